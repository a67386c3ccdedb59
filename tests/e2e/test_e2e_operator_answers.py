"""Operator answers (issue 22, item 6; issue 34, item 3) over real processes: a site run again
after its upload is told it already committed, when, and its receipt, at once from the receipt
it keeps; a rerun with other records, or one the analyst refuses as different, is told when it
uploaded and its receipt (not that its key "was published differently"); a site whose kit comes
from another CA is refused with one line."""

from __future__ import annotations

import json
import re
import subprocess
import sys

import numpy as np
import pytest
from e2e_support import release_federation, stop_federation

from noisyanchor.deploy.certs import write_pki
from noisyanchor.deploy.launch import child_env
from noisyanchor.participant.config import load_participant_config
from noisyanchor.participant.local_state import receipt_path

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

IDS, N_I, D, R = ("p0", "p1"), 30, 6, 16


def _participant(config, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "noisyanchor", "participant", "upload",
                           "--config", str(config), *args], capture_output=True, text=True,
                          timeout=120, env=child_env())


def test_rerun_after_upload_and_a_kit_of_another_ca_get_one_clear_answer(tmp_path):
    rng = np.random.default_rng(4)
    fed = release_federation(tmp_path, IDS, [rng.standard_normal((N_I, D)) for _ in IDS],
                             dim=D, anchors=R, timeout=60.0, tables="")
    try:
        for pid in IDS:  # the dealer (p0) and another site
            receipt = receipt_path(load_participant_config(fed.configs[pid]))
            kept = json.loads(receipt.read_text())["receipt"]
            # A rerun, with the kit's experiment seed (the same upload again) or without it (a
            # site's own run draws new secrets), is answered from the kept receipt at once.
            unseeded = tmp_path / f"{pid}-unseeded.toml"
            unseeded.write_text("\n".join(x for x in fed.configs[pid].read_text().splitlines()
                                          if not x.startswith("seed =")) + "\n")
            for config in (fed.configs[pid], unseeded):
                same = _participant(config)
                assert same.returncode == 0, same.stderr[-2000:]
                assert re.search(rf"{pid}: upload of {N_I} records \(\d+ bytes\) already "
                                 rf"committed; receipt {kept}, received .+; the analyst still "
                                 "holds it; nothing was sent again", same.stdout), same.stdout
            # Other records than the uploaded ones: refused at once, naming the receipt.
            other = tmp_path / "data" / f"{pid}-other.npz"
            np.savez(other, x=rng.standard_normal((N_I, D)), labels=np.arange(N_I) % 2,
                     tags=np.zeros(N_I, dtype="i1"))
            changed = tmp_path / f"{pid}-changed.toml"
            changed.write_text(re.sub(r'(?m)^data = ".*"$', f'data = "{other}"',
                                      unseeded.read_text()))
            # Without the receipt (a state folder kept before receipts were), the analyst
            # refuses the differing upload of a site's own run with the same answer.
            for config in (changed, unseeded):
                if config == unseeded:
                    receipt.unlink()
                again = _participant(config)
                assert again.returncode == 1
                out = again.stderr + again.stdout
                assert re.search(rf"'{pid}' already uploaded at 20\d\d-\d\d-\d\dT[\d:]+\+00:00, "
                                 rf"receipt {kept[:16]}\.\.\.", out), out[-2000:]
                assert "published differently" not in out
        # p1's kit from another CA: the TLS handshake fails; the site says so in one line.
        other = write_pki(tmp_path / "other-pki", ["p1"], ca_name="some other CA")
        text = fed.configs["p1"].read_text()
        for old, new in ((fed.analyst.files.pki.clients["p1"][0], other.clients["p1"][0]),
                         (fed.analyst.files.pki.clients["p1"][1], other.clients["p1"][1])):
            text = text.replace(str(old), str(new))
        foreign = tmp_path / "p1-foreign.toml"
        foreign.write_text(text.replace("timeout = 60.0", "timeout = 8.0"))
        refused = _participant(foreign)
        assert refused.returncode == 1
        lines = [x for x in refused.stderr.splitlines()
                 if x.startswith("noisyanchor participant: error:")]
        assert len(lines) == 1 and "was not issued by the CA" in lines[0] and \
            "(issuer CN=some other CA)" in lines[0], refused.stderr[-2000:]
    finally:
        stop_federation(fed)

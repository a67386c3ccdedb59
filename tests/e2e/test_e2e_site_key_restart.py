"""A site that stops right after the analyst committed its upload, before it kept its key,
keeps the right key when run again: the kept seeds give the identical upload, the analyst
answers it as a repeat, and the key then maps the site's records onto its rows of Z."""

from __future__ import annotations

import json

import numpy as np
import pytest
from e2e_support import FEDERATION, free_port

from noisyanchor.deploy.demo import wait_for_result, write_analyst, write_participant
from noisyanchor.deploy.launch import start, stop, wait_for_port
from noisyanchor.participant import run
from noisyanchor.participant.config import load_participant_config
from noisyanchor.participant.site_state import SITE_KEY_FILE, load_site_key, upload_seed_path

pytestmark = pytest.mark.e2e

IDS, N, D, R = ("p0", "p1", "p2"), 30, 6, 16
TIMEOUT = 90.0


class Crash(Exception):
    """Stands for the process dying between the analyst's receipt and the key's write."""


def test_a_run_interrupted_after_the_commit_keeps_the_committed_key(tmp_path, rng, monkeypatch):
    data = {}
    for pid in IDS:
        data[pid] = tmp_path / "data" / f"{pid}.npz"
        data[pid].parent.mkdir(parents=True, exist_ok=True)
        np.savez(data[pid], x=rng.standard_normal((N, D)), labels=np.arange(N) % 2)
    files = write_analyst(tmp_path, IDS, federation_id=FEDERATION, method="aa-igdp-an",
                          anchors=R, dim=None, sigma=0.0, v=0.01, accept_collusion=False,
                          data=data)
    port = free_port()
    procs = [start(["analyst", "serve", "--config", files.analyst_config, "--port", port],
                   tmp_path / "analyst.log")]
    try:
        assert wait_for_port(files.port_file, procs[0]) == port
        configs = {pid: write_participant(files, pid, federation_id=FEDERATION,
                                          address=f"127.0.0.1:{port}", method="aa-igdp-an",
                                          anchors=R, dim=None, projection_seed=None, sigma=0.0,
                                          v=0.01, timeout=TIMEOUT) for pid in IDS}
        procs += [start(["participant", "upload", "--config", configs[pid]],
                        tmp_path / f"{pid}.log") for pid in IDS[1:]]
        cfg = load_participant_config(configs["p0"])

        def crash(*_args, **_kwargs):
            raise Crash

        monkeypatch.setattr(run, "keep_site_key", crash)
        with pytest.raises(Crash):
            run.run_upload(cfg)  # p0 in this process: its upload commits, then it "dies"
        monkeypatch.undo()
        assert upload_seed_path(cfg).is_file() and not (cfg.state_dir / SITE_KEY_FILE).exists()
        for p in procs[1:]:
            assert p.wait(TIMEOUT) == 0
        wait_for_result(files.store, procs[0], TIMEOUT)

        again = run.run_upload(cfg)  # the same site run again
        assert again.already_committed  # identical bytes: the analyst's repeat answer
        assert not upload_seed_path(cfg).exists()
        key = load_site_key(cfg)
        result = json.loads((files.store / "result" / "result.json").read_text())
        a, b = result["row_ranges"]["p0"]
        with np.load(data["p0"]) as d:
            t = key.encode(d["x"])
        rotations = np.load(files.store / "result" / "rotations.npy")
        means = np.load(files.store / "result" / "means.npy")
        z = np.load(files.store / "result" / "z.npy")
        # N_0(M_0(x)) with the kept key is p0's block of Z (the key of the committed upload).
        np.testing.assert_allclose((t - means[0]) @ rotations[0], z[a:b], rtol=0, atol=1e-9)
    finally:
        for p in procs:
            stop(p)

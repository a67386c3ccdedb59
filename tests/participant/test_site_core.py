"""The site's core without any transport (issue 32, item 2): joining on the declaration
dataclass, and the one upload computed in steps exactly as both transports send it."""

from __future__ import annotations

import dataclasses
import stat
from pathlib import Path

import numpy as np
import pytest

from noisyanchor import deploy
from noisyanchor.common.errors import InvalidInputError, PreconditionError
from noisyanchor.common.npy_files import load_npz
from noisyanchor.common.protocol_messages import FederationInfo
from noisyanchor.deploy.certs import write_pki
from noisyanchor.participant.config import load_participant_config
from noisyanchor.participant.core.join import join
from noisyanchor.participant.core.upload import (
    SECRETS_FILE,
    compute_site_upload,
    keep_secrets,
    own_site_model,
    plan_upload,
)

TEMPLATE = Path(deploy.__file__).parent / "templates" / "participant.toml"

#: The declaration of the template's federation (``v`` and the translation scale as the kit's).
INFO = FederationInfo("pilot-2026", ("org-a", "org-b"), "aa-igdp-an", "org-a", 0, v=0.02,
                      translation_scale=100.0, dealer="org-a")


@pytest.fixture
def cfg(tmp_path):
    write_pki(tmp_path / "pki", ["org-a"])
    (tmp_path / "data").mkdir()
    rng = np.random.default_rng(3)
    rows = [f"{a:.6f},{b:.6f},{c:.6f},{i % 2}" for i, (a, b, c) in
            enumerate(rng.normal(size=(40, 3)))]
    (tmp_path / "data" / "org-a.csv").write_text("a,b,c,label\n" + "\n".join(rows) + "\n")
    (tmp_path / "site.toml").write_text(TEMPLATE.read_text())
    return dataclasses.replace(load_participant_config(tmp_path / "site.toml"), seed=7)


def test_joining_refuses_a_site_the_declaration_does_not_name(cfg):
    with pytest.raises(InvalidInputError, match="'org-a' is not one of federation"):
        join(cfg, dataclasses.replace(INFO, participants=("org-b", "org-c")))


def test_joining_names_both_sides_of_a_parameter_that_differs(cfg):
    with pytest.raises(InvalidInputError, match="dim"):
        join(cfg, dataclasses.replace(INFO, dim=5))
    assert join(cfg, dataclasses.replace(INFO, dim=3)).x.shape == (40, 3)


def test_the_same_seeds_compute_the_same_upload_and_key(cfg):
    seed = bytes(range(32))
    made = [compute_site_upload(plan_upload(cfg, join(cfg, INFO), None), seed)
            for _ in range(2)]
    for name in ("data", "anchor", "labels", "tags"):
        np.testing.assert_array_equal(made[0].arrays[name], made[1].arrays[name])
    assert made[0].spec == made[1].spec
    assert made[0].key.to_bytes() == made[1].key.to_bytes()
    assert made[0].records == 40 and made[0].arrays["anchor"].shape == (12, 3)  # r = 4 d


def test_kept_secrets_are_private_and_hold_the_anchor(cfg):
    plan = plan_upload(cfg, join(cfg, INFO), None)
    made = compute_site_upload(plan, bytes(32))
    path = keep_secrets(plan, made)
    assert path == cfg.state_dir / SECRETS_FILE
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    with path.open("rb") as fh:
        kept = load_npz(fh, str(path))
    assert {"rotation", "translation", "anchor", "anchor_noise"} <= set(kept)
    np.testing.assert_array_equal(kept["rotation"], made.state.key.rotation)


def test_a_site_model_of_another_site_is_refused(cfg):
    other = dataclasses.make_dataclass("Site", ["federation_id", "participant"])
    assert own_site_model(cfg, other("pilot-2026", "org-a"), "x").participant == "org-a"
    with pytest.raises(PreconditionError, match="site model of 'org-b'"):
        own_site_model(cfg, other("pilot-2026", "org-b"), "the analyst's answer")

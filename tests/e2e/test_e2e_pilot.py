"""A new operator's path as one script: provision, the analyst, three sites started at different
times (the last a minute late), progress while they wait, and result.json with the model."""

from __future__ import annotations

import pytest
from e2e_support import free_port

from noisyanchor.deploy.pilot import SITES, run_pilot

pytestmark = [pytest.mark.e2e, pytest.mark.slow]


def test_provisioned_sites_started_a_minute_apart_produce_a_model(tmp_path):
    run = run_pilot(tmp_path, free_port(), stagger=3.0, late=60.0)
    assert run.exit_codes == dict.fromkeys(SITES, 0), {s: run.log(s)[-500:] for s in SITES}
    # The early sites waited for the late one and said so while waiting.
    for site in SITES[:2]:
        assert "waiting for org-c to publish their exchange keys" in run.log(site) or \
            "waiting for org-a to seal the anchor seed" in run.log(site)
    assert "waiting for org-c" in run.log("org-a")
    model = run.result["model"]
    assert model["name"] == "logistic" and model["n_test"] > 0
    # Digits, AA-I-GDP with anchor noise v = 0.02: the demo's model scores 0.97; chance is 0.1.
    assert model["balanced_accuracy"] > 0.8
    assert run.result["participants"] == list(SITES)
    text = run.log("analyst")
    assert "org-c connected from" in text and "alignment done" in text

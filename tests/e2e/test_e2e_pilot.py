"""A new operator's path as one script: provision, the analyst, three sites started at different
times (the last a minute late), progress while they wait, and result.json with the model."""

from __future__ import annotations

import dataclasses

import pytest
from e2e_support import free_port, random_upload

from noisyanchor.analyst.storage import read_bundle_spec
from noisyanchor.common.errors import InvalidInputError
from noisyanchor.common.tomlconfig import TlsFiles
from noisyanchor.common.wire import bundle_spec
from noisyanchor.deploy.launch import start, stop
from noisyanchor.deploy.pilot import SITES, pilot_sites, run_pilot
from noisyanchor.experiments.datasets import table_schema
from noisyanchor.participant.client import AnalystClient
from noisyanchor.participant.config import load_participant_config

pytestmark = [pytest.mark.e2e, pytest.mark.slow]


@pytest.mark.extended  # the late site waits a minute by design
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


def test_three_hospitals_on_typed_breast_cancer_columns_preprocess_identically(tmp_path, rng):
    """The breast cancer template (30 columns in very different units, each scaled with its
    public range at every site), split by `data split`, through provision and the pilot; the
    analyst holds one preprocessing digest and refuses an upload declaring another."""
    port = free_port()
    run = run_pilot(tmp_path, port, stagger=1.0, late=1.0, dataset="breast-cancer")
    sites = pilot_sites("breast-cancer")
    assert run.exit_codes == dict.fromkeys(sites, 0), {s: run.log(s)[-500:] for s in sites}
    kits = tmp_path / "kits"
    tabular = table_schema("breast-cancer")
    digest = tabular.digest()
    store = kits / "analyst" / "store"
    for site in sites:  # the kit pins the digest; the stored upload names the same one
        assert load_participant_config(kits / site / f"{site}.toml").preprocessing_sha256 == \
            digest.hex()
        spec = read_bundle_spec(store / "uploads" / f"{site}.bundle", root=store)[0]
        assert spec.preprocessing_sha256 == digest
    assert run.result["records"] == 569 and run.result["dim"] == 30
    # Logistic regression on the aligned, publicly scaled records; chance is 0.5.
    assert run.result["model"]["balanced_accuracy"] > 0.85, run.result["model"]
    before = {p: p.read_bytes() for p in store.rglob("*") if p.is_file()
              and "logs" not in p.parts and p.suffix != ".lock"}  # the lock names the process
    analyst = start(["analyst", "serve", "--config", kits / "analyst" / "analyst.toml"],
                    tmp_path / "logs" / "analyst-again.log")
    try:
        pki = kits / "hospital-c" / "pki"
        tls = TlsFiles(pki / "ca.pem", pki / "hospital-c.pem", pki / "hospital-c.key")
        other = dataclasses.replace(tabular, columns=(dataclasses.replace(
            tabular.columns[3], max=4254.0), *tabular.columns[4:], *tabular.columns[:3]))
        arrays = random_upload(rng, 10, 30, 120)
        with AnalystClient(f"127.0.0.1:{port}", tls, "localhost", "pilot", 30.0) as client:
            for declared in (other.digest(), b""):
                spec = bundle_spec("pilot", "aa-igdp-an", arrays, digests=False,
                                   preprocessing_sha256=declared)
                with pytest.raises(InvalidInputError, match="preprocessed differently"):
                    client.send_bundle("upload", spec, arrays)
    finally:
        stop(analyst)
    assert {p: p.read_bytes() for p in before} == before

"""The Flower ServerApp's protocol (analyst/flower_server.py) with the real ClientApp
(participant/flower_client.py), driven through a loopback Grid (tests/flower_loopback.py):
what a site keeps, and how a refusal, an offline node and a second upload end a run. The same
federation on Flower's simulation engine and over gRPC: tests/e2e/test_e2e_flower.py."""

from __future__ import annotations

import tomllib
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("flwr")

from noisyanchor.analyst.config import load_analyst_config
from noisyanchor.analyst.federation import Federation
from noisyanchor.analyst.flower_server import FlowerFederation
from noisyanchor.analyst.storage import Store
from noisyanchor.common.errors import (
    AlreadyExistsError,
    DeadlineExceededError,
    FederationFailedError,
    InvalidInputError,
    UnauthenticatedError,
)
from noisyanchor.deploy.flower_demo import flower_kits
from noisyanchor.deploy.launch import write_toml
from noisyanchor.experiments.simulate import SimulationConfig, prepare
from noisyanchor.participant.config import load_participant_config
from noisyanchor.participant.flower_client import client_app
from noisyanchor.participant.predict import predict
from tests.flower_loopback import LoopbackGrid

SEED = 11


@pytest.fixture
def kits(tmp_path) -> tuple[Path, list[Path], object]:
    """The 3-site digits federation of the demo (seed :data:`SEED`): the analyst's config,
    each site's kit, the prepared data."""
    config = SimulationConfig(dataset="digits", method="aa-igdp-an", participants=3,
                              colluder=None, seed=SEED, utility=False)
    fed = prepare(config)
    analyst, by_site = flower_kits(tmp_path, config, fed)
    return analyst, list(by_site.values()), fed


def _federation(analyst: Path) -> Federation:
    cfg = load_analyst_config(analyst)
    return Federation(cfg, Store(cfg.output_dir))


def _run(analyst: Path, grid: LoopbackGrid) -> dict:
    fed = _federation(analyst)
    try:
        return FlowerFederation(grid, fed, reply_timeout=30.0, nodes_timeout=5.0).run()
    finally:
        fed.close()


def test_each_site_keeps_its_key_and_own_model_and_predicts_offline(kits):
    analyst, kit_paths, data = kits
    summary = _run(analyst, LoopbackGrid(kit_paths, client_app()))
    assert summary["participants"] == ["p0", "p1", "p2"]
    assert summary["solver"]["certified"]
    store = load_analyst_config(analyst).output_dir
    for i, kit in enumerate(kit_paths):
        cfg = load_participant_config(kit)
        kept = {p.name for p in cfg.state_dir.iterdir()}
        # the key, the receipt and its own model; the agreement's key and seeds are gone
        assert {"site-key.bin", "site-model.bin", "site-model.sha256"} <= kept
        assert not any(n.startswith(("exchange-", "upload-seed-")) for n in kept)
        assert "site-key.pending" not in kept
        # no analyst exists any more: the prediction reads the state folder only
        predicted = predict(cfg, data.x[i][:20])
        assert predicted.labels.shape == (20,)
        assert np.mean(predicted.labels == data.labels[i][:20]) > 0.5
    assert not list((store / "sealed").glob("*.key"))  # the relay holds ciphertexts only


def test_a_site_whose_config_does_not_fit_withdraws_and_the_run_stops(kits):
    analyst, kit_paths, _ = kits
    doc = tomllib.loads(kit_paths[2].read_text())
    doc["protocol"]["v"] = 2 * doc["protocol"]["v"]  # not the v the federation declares
    write_toml(kit_paths[2], doc)
    with pytest.raises(FederationFailedError, match=r"p2 withdrew .*\bv\b"):
        _run(analyst, LoopbackGrid(kit_paths, client_app()))
    fed = _federation(analyst)
    assert "p2" in fed.withdrawals()  # recorded as over gRPC
    assert fed.list_keys() == []  # nothing left any site before the refusal


def test_a_node_whose_kit_is_refused_answers_an_error_of_the_same_class(kits):
    analyst, kit_paths, _ = kits
    doc = tomllib.loads(kit_paths[2].read_text())
    doc["protocol"]["sigma"] = 0.5  # refused by the kit's own checks: aa-igdp-an has no sigma
    write_toml(kit_paths[2], doc)
    # The ClientApp's InvalidInputError travels as a Flower Error (code 400) and is raised
    # again by the ServerApp as an InvalidInputError naming the node and the key.
    with pytest.raises(InvalidInputError, match=r"node 3: .*\[protocol\] sigma"):
        _run(analyst, LoopbackGrid(kit_paths, client_app()))


def test_a_node_offline_at_upload_ends_the_run_and_a_new_run_resumes(kits):
    analyst, kit_paths, _ = kits
    grid = LoopbackGrid(kit_paths, client_app())
    grid.offline_from[2] = "query.upload"
    with pytest.raises(DeadlineExceededError, match=r"no answer from p1 \(node 2\).*offline"):
        _run(analyst, grid)
    fed = _federation(analyst)
    assert fed.missing_uploads() == ["p1"]  # the others' uploads stay committed
    # Back online, the next run resumes the agreement (the kept keys) and asks only p1 to upload.
    summary = _run(analyst, LoopbackGrid(kit_paths, client_app()))
    assert summary["participants"] == ["p0", "p1", "p2"]
    for kit in kit_paths:
        assert (load_participant_config(kit).state_dir / "site-model.bin").is_file()


def test_a_second_run_cannot_upload_again(kits):
    analyst, kit_paths, _ = kits
    _run(analyst, LoopbackGrid(kit_paths, client_app()))
    with pytest.raises(AlreadyExistsError, match=r"p0.*already uploaded.*uploads once"):
        _run(analyst, LoopbackGrid(kit_paths, client_app()))


def test_a_node_claiming_another_sites_kit_is_refused(kits):
    analyst, kit_paths, _ = kits
    # Node 2 holds p0's certificate but signs with p1's key: the hello does not verify.
    doc = tomllib.loads(kit_paths[1].read_text())
    doc["tls"]["cert"] = tomllib.loads(kit_paths[0].read_text())["tls"]["cert"]
    doc["participant"]["id"] = "p0"
    forged = kit_paths[1].with_name("forged.toml")
    write_toml(forged, doc)
    with pytest.raises(UnauthenticatedError, match="hello of node 2"):
        _run(analyst, LoopbackGrid([kit_paths[0], forged, kit_paths[2]], client_app()))


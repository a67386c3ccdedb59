"""DP similarity release end to end: a real analyst process and three participant processes over
mutual TLS on 127.0.0.1; after the alignment, score, top-k and Gram releases come back over the
Release service, and the privacy ledger refuses the release that would cross the budget, also
after the analyst restarts."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
from e2e_support import (
    FEDERATION,
    RunningAnalyst,
    release_federation,
    stop_federation,
    wait_until,
)

from noisyanchor.analyst.storage import read_bundle
from noisyanchor.cli import main
from noisyanchor.common.errors import (
    BudgetExceededError,
    InvalidInputError,
    NotFoundError,
    PreconditionError,
)
from noisyanchor.common.scoreshield import (
    calibrate_sigma,
    gram_record_sensitivity,
    score_vector_sensitivity,
)
from noisyanchor.participant.config import load_participant_config
from noisyanchor.participant.release_client import (
    load_key,
    query_record,
    release_gram,
    release_scores,
    transform_query,
)
from noisyanchor.protos.v1 import release_pb2, release_pb2_grpc

pytestmark = pytest.mark.e2e

IDS, N_I, D, R = ("p0", "p1", "p2"), 40, 6, 16
#: Budget of the dataset; the releases below spend ~250 of it, a request for all of it is refused.
EPS_BUDGET, DELTA = 1000.0, 1e-5
#: "Large" epsilon of the accuracy checks: sigma = 0.19 for the score vector (sensitivity 2).
EPS_LARGE = 100.0
TIMEOUT = 60.0


@dataclass
class Released:
    """The running federation (:class:`ReleaseFederation`) and the refusal of a release asked
    for before the alignment."""

    analyst: RunningAnalyst
    configs: dict[str, Path]
    records: np.ndarray
    early_refusal: str


def _records(rng: np.random.Generator) -> np.ndarray:
    """Records around the centres +-3 e_0, +-3 e_1: their cosines spread over [-1, 1]."""
    centres = 3.0 * np.vstack([np.eye(D)[:2], -np.eye(D)[:2]])
    return centres[rng.integers(0, 4, N_I)] + 0.5 * rng.standard_normal((N_I, D))


@pytest.fixture(scope="module")
def fed(tmp_path_factory) -> Iterator[Released]:
    rng = np.random.default_rng(5)
    early = []

    def before_upload(configs: dict[str, Path]) -> None:
        try:  # before any upload: the federation is not aligned yet
            release_scores(load_participant_config(configs["p0"]), np.ones(D), 1.0, DELTA)
        except PreconditionError as err:
            early.append(str(err))

    running = release_federation(
        tmp_path_factory.mktemp("release"), IDS, [_records(rng) for _ in IDS], dim=D, anchors=R,
        tables=f"[privacy]\nepsilon_budget = {EPS_BUDGET}\ndelta_budget = {DELTA}\n"
               f"participant_epsilon_budget = {EPS_BUDGET}\n", timeout=TIMEOUT,
        before_upload=before_upload)
    try:
        yield Released(running.analyst, running.configs, running.records, "".join(early))
    finally:
        stop_federation(running)


def clean_scores(fed: Released, pid: str, t: np.ndarray) -> np.ndarray:
    """Noise-free scores from the store: rows (z_k - c)/||.||, query (t - b_i) R_i/||.||."""
    result = fed.analyst.files.store / "result"
    z, c = np.load(result / "z.npy"), np.load(result / "shift.npy")
    i = IDS.index(pid)
    u = (t - np.load(result / "means.npy")[i]) @ np.load(result / "rotations.npy")[i]
    e = (z - c) / np.linalg.norm(z - c, axis=1, keepdims=True)
    return e @ (u / np.linalg.norm(u))


def query(fed: Released, pid: str, row: int) -> tuple[object, np.ndarray, np.ndarray]:
    """Participant ``pid``'s config, its local record ``row`` and that record in its GDP frame."""
    cfg = load_participant_config(fed.configs[pid])
    x = np.load(cfg.data)["x"][row]
    return cfg, x, transform_query(cfg, x, load_key(cfg))


def _charges(fed: Released) -> int:
    ledger = json.loads((fed.analyst.files.store / "privacy_ledger.json").read_text())
    return len(ledger["datasets"][FEDERATION])


def test_release_before_alignment_is_refused_with_failed_precondition(fed):
    assert "FAILED_PRECONDITION" in fed.early_refusal and "collecting" in fed.early_refusal


def test_query_is_the_record_as_the_participant_uploaded_it(fed, tmp_path):
    cfg = load_participant_config(fed.configs["p1"])
    record = tmp_path / "record.npy"
    np.save(record, np.load(cfg.data)["x"][7][None, :])  # a (1, d_in) row is accepted too
    x = query_record(cfg, record, None)
    np.testing.assert_array_equal(x, query_record(cfg, None, 7))
    uploaded = read_bundle(fed.analyst.files.store / "uploads" / "p1.bundle")[1]["data"][7]
    # t = x O_1 + Psi_1 is row 7 of p1's upload Y_1 (no data noise in aa-igdp; rounding 1e-9)
    np.testing.assert_allclose(transform_query(cfg, x, load_key(cfg)), uploaded, atol=1e-9)


def test_score_release_tracks_the_clean_cosines_at_large_epsilon(fed):
    cfg, x, t = query(fed, "p1", 3)
    res = release_scores(cfg, t, EPS_LARGE, DELTA)
    n = len(fed.records)
    assert res.scores.shape == (n,) and res.records == n and res.ids is None
    assert np.all(np.abs(res.scores) <= 1.0)
    clean = clean_scores(fed, "p1", t)
    # noiseless anchors: Procrustes is exact, the clean scores are the records' own cosines
    cos = fed.records @ x / (np.linalg.norm(fed.records, axis=1) * np.linalg.norm(x))
    np.testing.assert_allclose(clean, cos, atol=1e-9)
    sigma = calibrate_sigma(EPS_LARGE, DELTA, score_vector_sensitivity())
    assert res.spend.sigma == pytest.approx(sigma, rel=1e-12) and res.spend.sensitivity == 2.0
    # sigma = 0.19 against a spread of ~0.7: the correlation is ~0.97 in expectation
    assert np.corrcoef(res.scores, clean)[0, 1] > 0.9
    assert 0 < res.spend.spent_epsilon <= EPS_BUDGET
    # The operator's log shows the charge (made before any noise is drawn).
    assert wait_until(lambda: "charged scores/p1 to dataset" in fed.analyst.log.read_text(), 10)


def test_top_k_release_returns_k_ids_sorted_by_privatised_score(fed):
    cfg, _, t = query(fed, "p2", 0)
    k = 5
    res = release_scores(cfg, t, EPS_LARGE, DELTA, top_k=k)
    assert res.ids.shape == (k,) == res.scores.shape and len(set(res.ids.tolist())) == k
    assert np.all((0 <= res.ids) & (res.ids < len(fed.records)))
    assert np.all(np.diff(res.scores) <= 0)
    clean = clean_scores(fed, "p2", t)
    kth = np.sort(clean)[-k]
    # a returned row below the true k-th score by 6 sigma needs a 4.2-sigma noise difference
    assert np.all(clean[res.ids] >= kth - 6 * res.spend.sigma)


@pytest.mark.parametrize("projector", ["newton", "aap"])
def test_gram_release_streams_back_psd_with_unit_diagonal(fed, tmp_path, capsys, projector):
    out = tmp_path / "gram.npy"
    assert main(["release", "gram", "--config", str(fed.configs["p2"]), "--epsilon", "20",
                 "--delta", str(DELTA), "--projector", projector, "--max-iter", "30", "--out",
                 str(out), "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    n = len(fed.records)
    g = np.load(out)
    assert g.shape == (n, n) and summary["n"] == n and summary["projector"] == projector
    assert 1 <= summary["iterations"] <= 30 and not summary["repeated"]
    assert summary["spend"]["sigma"] == pytest.approx(
        calibrate_sigma(20.0, DELTA, gram_record_sensitivity(n)), rel=1e-12)
    np.testing.assert_allclose(g, g.T, atol=1e-12)
    np.testing.assert_allclose(np.diag(g), 1.0, atol=1e-9)  # the final normalisation: rounding
    assert np.linalg.eigvalsh(g).min() >= -1e-8  # PSD up to rounding
    assert np.abs(g).max() <= 1.0


def test_invalid_gram_query_is_refused_before_any_charge(fed):
    cfg = load_participant_config(fed.configs["p1"])
    charged = _charges(fed)
    with pytest.raises(InvalidInputError, match="max_iterations must be <= 500"):
        release_gram(cfg, 1.0, DELTA, max_iterations=501)
    with pytest.raises(InvalidInputError, match="projector must be one of"):
        release_gram(cfg, 1.0, DELTA, projector="higham")
    assert _charges(fed) == charged


def test_scores_cli_prints_the_top_k_as_json(fed, capsys):
    assert main(["release", "scores", "--config", str(fed.configs["p0"]), "--row-index", "2",
                 "--epsilon", str(EPS_LARGE), "--delta", str(DELTA), "--top-k", "3",
                 "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert len(summary["ids"]) == len(summary["scores"]) == 3
    assert summary["scores"] == sorted(summary["scores"], reverse=True)


def test_scores_cli_prints_human_text_by_default(fed, capsys):
    args = ["release", "scores", "--config", str(fed.configs["p0"]), "--row-index", "2",
            "--epsilon", str(EPS_LARGE), "--delta", str(DELTA)]
    assert main([*args, "--top-k", "2"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("released 2 of 120 privatised scores")
    assert len(lines) == 3 and all(line.startswith("  row ") for line in lines[1:])
    assert main(args) == 0
    assert "--json prints the vector" in capsys.readouterr().out


def test_unknown_dataset_is_refused_with_not_found(fed):
    cfg = load_participant_config(fed.configs["p0"])
    with pytest.raises(NotFoundError, match="NOT_FOUND: no dataset 'other'"):
        release_gram(cfg, 1.0, DELTA, dataset="other")


@pytest.mark.parametrize("method, match", [
    ("c-gdp", "method c-gdp has no anchor"),
    ("aa-igdp", r"no \[privacy\] table"),
])
def test_release_is_refused_without_an_anchor_or_without_a_budget(analyst, method, match):
    running = analyst(["p0", "p1"], method, dim=D, anchors=R)
    with running.client("p0") as client:
        stub = release_pb2_grpc.ReleaseStub(client.channel)
        with pytest.raises(PreconditionError, match=f"FAILED_PRECONDITION: .*{match}"):
            client.call("Gram release", lambda: stub.SubmitGram(release_pb2.GramQuery(
                federation_id=FEDERATION, epsilon=1.0, delta=DELTA, request_id="r1"),
                timeout=10))


def test_scores_cli_refuses_without_the_kept_gdp_key(fed, tmp_path, capsys):
    text = fed.configs["p0"].read_text().replace("keep_secrets = true", "keep_secrets = false")
    cfg = tmp_path / "p0.toml"
    state = tmp_path / "empty-state"
    cfg.write_text("\n".join(f'state_dir = "{state}"' if line.startswith("state_dir") else line
                             for line in text.splitlines()))
    assert main(["release", "scores", "--config", str(cfg), "--row-index", "0", "--epsilon",
                 "1", "--delta", str(DELTA)]) == 1
    assert "keep_secrets = true" in capsys.readouterr().err


def test_release_crossing_the_budget_is_refused_also_after_a_restart(fed):
    cfg, _, t = query(fed, "p0", 1)
    spent = release_scores(cfg, t, EPS_LARGE, DELTA).spend.spent_epsilon
    charged = _charges(fed)
    # the whole budget alone, composed with anything already spent, crosses it
    with pytest.raises(BudgetExceededError, match="RESOURCE_EXHAUSTED") as refused:
        release_scores(cfg, t, EPS_BUDGET, DELTA)
    assert f"spent epsilon={spent:.6g} to" in str(refused.value)  # the dataset budget
    assert "budget of dataset 'e2e' is exhausted" in str(refused.value)
    assert _charges(fed) == charged  # nothing charged, nothing released

    fed.analyst.restart()
    with pytest.raises(BudgetExceededError, match=f"spent epsilon={spent:.6g} to"):
        release_scores(cfg, t, EPS_BUDGET, DELTA)
    after = release_scores(cfg, t, EPS_LARGE, DELTA).spend  # the ledger resumed, not reset
    assert after.spent_epsilon > spent and _charges(fed) == charged + 1
    # composition is not additive: what is left is more than budget - spent
    assert EPS_BUDGET - after.spent_epsilon < after.remaining_epsilon < EPS_BUDGET

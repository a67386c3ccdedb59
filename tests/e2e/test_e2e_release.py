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
from noisyanchor.common.json_vocabulary import problems
from noisyanchor.common.scoreshield import (
    calibrate_sigma,
    gram_identity_sensitivity,
    gram_record_sensitivity,
    score_vector_sensitivity,
)
from noisyanchor.participant.config import load_participant_config
from noisyanchor.participant.release_client import (
    load_key,
    query_record,
    release_gram,
    release_row,
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
#: Public bound on the records of one identity (the analyst's identity column has 3 each).
K = 3


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

    root = tmp_path_factory.mktemp("release")
    identities = root / "identities.txt"  # 40 people with 3 records each, one label a line
    identities.write_text("".join(f"person-{k // K}\n" for k in range(len(IDS) * N_I)))
    running = release_federation(
        root, IDS, [_records(rng) for _ in IDS], dim=D, anchors=R,
        tables=f"[privacy]\nepsilon_budget = {EPS_BUDGET}\ndelta_budget = {DELTA}\n"
               f"participant_epsilon_budget = {EPS_BUDGET}\n", timeout=TIMEOUT,
        before_upload=before_upload,
        extra={"release": {"identities": str(identities), "max_records_per_identity": K}})
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
    uploaded = read_bundle(fed.analyst.files.store / "uploads" / "p1.bundle",
                           root=fed.analyst.files.store)[1]["data"][7]
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
    assert not problems(summary)  # the --json vocabulary (tests/cli/test_json_vocabulary.py)
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
    assert not problems(summary)  # the --json vocabulary (tests/cli/test_json_vocabulary.py)
    assert len(summary["ids"]) == len(summary["scores"]) == 3
    assert summary["scores"] == sorted(summary["scores"], reverse=True)


def test_scores_cli_prints_human_text_by_default(fed, capsys):
    args = ["release", "scores", "--config", str(fed.configs["p0"]), "--row-index", "2",
            "--epsilon", str(EPS_LARGE), "--delta", str(DELTA)]
    assert main([*args, "--top-k", "2"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("released 2 of 120 privatised scores")
    # what is charged and why it is a composed, delta-converted figure
    assert "this release alone, stated at the budget's delta=1e-05" in lines[0]
    assert "composition is not additive" in lines[0]
    assert lines[1].startswith("guarantee: a query's score vector: (epsilon, delta)-DP for "
                               "replacing any one record; Delta = 2")
    assert len(lines) == 4 and all(line.startswith("  row ") for line in lines[2:])
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


# --- issue 26: regimes, baseline, what is charged ---------------------------------------------

def test_row_release_is_noised_for_its_own_sensitivity(fed, capsys):
    cfg = load_participant_config(fed.configs["p1"])
    n = len(fed.records)
    res = release_row(cfg, 5, 50.0, DELTA)
    assert res.scores.shape == (n,) and res.scores[5] == 1.0  # its own entry: public, no noise
    assert res.spend.sensitivity == pytest.approx(2 * np.sqrt(n - 1))
    assert res.spend.sigma == pytest.approx(calibrate_sigma(50.0, DELTA, 2 * np.sqrt(n - 1)),
                                            rel=1e-12)
    assert res.spend.regime == "row/record" and "App. D" in res.spend.guarantee
    assert res.noise_dominated and res.useful_epsilon > 50.0
    assert main(["release", "row", "--config", str(fed.configs["p1"]), "--row", "5",
                 "--epsilon", "50", "--delta", str(DELTA), "--top-k", "4", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert not problems(out)
    assert len(out["ids"]) == 4 and 5 not in out["ids"] and out["noise_dominated"]
    with pytest.raises(InvalidInputError, match="outside the 120 records"):
        release_row(cfg, n, 50.0, DELTA)


def test_margin_release_clips_before_the_noise(fed):
    cfg, _, t = query(fed, "p0", 4)
    res = release_scores(cfg, t, EPS_LARGE, DELTA, margin=0.5)
    assert res.spend.sensitivity == pytest.approx(0.5) and res.scores.min() >= 0.5
    assert res.spend.sigma == pytest.approx(calibrate_sigma(EPS_LARGE, DELTA, 0.5), rel=1e-12)
    assert res.spend.regime == "scores/record/margin=0.5"


def test_identity_level_releases_use_the_analysts_identity_column(fed, tmp_path, capsys):
    cfg, _, t = query(fed, "p2", 1)
    res = release_scores(cfg, t, EPS_LARGE, DELTA, adjacency="identity")
    assert res.spend.regime == f"scores/identity(k={K})"
    assert res.spend.sensitivity == pytest.approx(2 * np.sqrt(K))
    assert res.spend.record_epsilon < EPS_LARGE  # a record is part of an identity: cheaper
    out = tmp_path / "gram.npy"
    n = len(fed.records)
    assert main(["release", "gram", "--config", str(fed.configs["p2"]), "--epsilon", "50",
                 "--delta", str(DELTA), "--identity", "--out", str(out), "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["spend"]["regime"] == f"gram/identity(k={K})"
    assert summary["spend"]["sensitivity"] == pytest.approx(gram_identity_sensitivity(n, K))
    with pytest.raises(InvalidInputError, match="adjacency must be"):
        release_scores(cfg, t, EPS_LARGE, DELTA, adjacency="household")


def test_gram_release_states_its_data_free_baseline(fed, tmp_path, capsys):
    out = tmp_path / "gram.npy"
    args = ["release", "gram", "--config", str(fed.configs["p0"]), "--epsilon", "5",
            "--delta", str(DELTA), "--out", str(out)]
    assert main([*args, "--json", "--request-id", "baseline-json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    n = len(fed.records)
    b = summary["baseline"]
    assert b["identity_max"] == n * (n - 1) and b["noisy_distance"] == pytest.approx(
        summary["spend"]["sigma"] ** 2 * n * (n + 1) / 2)
    # record level at epsilon 5 on 120 records: no better than releasing nothing, and says so
    assert summary["no_better_than_identity"] and b["no_better_than_identity"]
    assert summary["useful_epsilon"] > 5.0 and "identity matrix" in summary["warning"]
    g, clean = np.load(out), _clean_gram(fed)
    assert np.linalg.norm(g - clean) ** 2 > 0.5 * np.linalg.norm(clean - np.eye(n)) ** 2
    assert main([*args, "--request-id", "baseline-json"]) == 0  # the same release, as text
    text = capsys.readouterr().out
    assert "a repeat of an earlier release" in text and "baseline (squared Frobenius" in text
    assert "warning: this Gram release is not expected to be closer" in text


def _clean_gram(fed: Released) -> np.ndarray:
    result = fed.analyst.files.store / "result"
    z, c = np.load(result / "z.npy"), np.load(result / "shift.npy")
    e = (z - c) / np.linalg.norm(z - c, axis=1, keepdims=True)
    return e @ e.T


def test_a_release_asked_at_another_delta_is_charged_at_the_budgets_delta(fed, capsys):
    assert main(["release", "scores", "--config", str(fed.configs["p1"]), "--row-index", "0",
                 "--epsilon", "1", "--delta", "1e-7", "--top-k", "1"]) == 0
    first = capsys.readouterr().out.splitlines()[0]
    charged = float(first.split("charged epsilon=")[1].split(":")[0])
    assert charged < 1.0  # epsilon 1 at delta 1e-7 is less at the budget's delta 1e-5
    assert "asked at delta=1e-07" in first

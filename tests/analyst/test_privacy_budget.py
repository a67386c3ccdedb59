"""Tests of analyst.privacy_budget: exact Gaussian composition (checked against dp_accounting's
PLD accountant), dataset budgets and per-participant quotas, refusals that say what is left,
request ids, persistence, version-1 ledgers, locking."""

from __future__ import annotations

import json
import math
import threading
from pathlib import Path

import dp_accounting
import pytest
from dp_accounting.pld import pld_privacy_accountant

from noisyanchor.analyst.privacy_budget import (
    LEDGER_VERSION,
    Charge,
    PrivacyLedger,
    epsilon_of_mu,
    mu_of_epsilon,
)
from noisyanchor.common.errors import (
    BudgetExceededError,
    InvalidInputError,
    LedgerError,
    PreconditionError,
)
from noisyanchor.common.scoreshield import (
    Calibration,
    Regime,
    calibrate,
    gaussian_delta,
    gaussian_epsilon,
    gram_record_sensitivity,
    score_vector_sensitivity,
)

DELTA = 1e-5
PIDS = ("a", "b")


def _cal(epsilon: float, delta: float = DELTA):
    return calibrate(epsilon, delta, score_vector_sensitivity())


def _ledger(path: Path, budget: float, **kw) -> PrivacyLedger:
    kw.setdefault("participants", PIDS)
    kw.setdefault("participant_epsilon_budget", budget)
    return PrivacyLedger(path, budget, DELTA, **kw)


def _pld_epsilon(sigmas: list[float]) -> float:
    acc = pld_privacy_accountant.PLDAccountant(
        dp_accounting.NeighboringRelation.ADD_OR_REMOVE_ONE, value_discretization_interval=1e-4)
    acc.compose(dp_accounting.ComposedDpEvent([dp_accounting.GaussianDpEvent(s / 2.0)
                                               for s in sigmas]))
    return acc.get_epsilon(DELTA)


def test_single_release_spends_exactly_its_own_epsilon(tmp_path: Path) -> None:
    ledger = _ledger(tmp_path / "ledger.json", 2.0)
    assert ledger.spent("digits") == (0.0, 0.0)
    charge = ledger.charge("digits", "a", _cal(1.0), request_id="r1", label="scores")
    assert isinstance(charge, Charge) and charge.participant == "a"
    eps, delta = ledger.spent("digits")
    assert delta == DELTA
    # the calibration meets (1, 1e-5) with equality up to its root finder: exact to 1e-9
    assert eps == pytest.approx(1.0, abs=1e-9) and charge.epsilon == pytest.approx(1.0, abs=1e-9)


def test_composition_is_exact_and_agrees_with_the_pld_accountant(tmp_path: Path) -> None:
    ledger = _ledger(tmp_path / "l.json", 10.0)
    cals = [_cal(0.5), _cal(1.0), _cal(0.3), _cal(0.7, 1e-7)]
    for i, cal in enumerate(cals):
        ledger.charge("d", PIDS[i % 2], cal, request_id=f"r{i}", label="x")
    eps, _ = ledger.spent("d")
    z_eff = sum((c.sigma / 2.0) ** -2 for c in cals) ** -0.5
    # exact: the composition is one Gaussian mechanism with noise multiplier z_eff
    assert gaussian_delta(z_eff, eps, 1.0) == pytest.approx(DELTA, rel=1e-6)
    # dp_accounting's PLD accountant is pessimistic by at most its discretisation (1e-4 per
    # composed event here): never below the exact value, and within 1e-3 of it
    pld = _pld_epsilon([c.sigma for c in cals])
    assert eps - 1e-9 <= pld <= eps + 1e-3
    assert eps < 0.5 + 1.0 + 0.3 + 0.7  # far tighter than summing epsilons


def test_dataset_budget_refusal_names_the_budget_and_what_is_left(tmp_path: Path) -> None:
    ledger = _ledger(tmp_path / "l.json", 1.3)
    ledger.charge("d", "a", _cal(1.0), request_id="first", label="first")
    before = ledger.account("d")
    with pytest.raises(BudgetExceededError) as exc:
        ledger.charge("d", "b", _cal(1.0), request_id="second", label="second")
    msg = str(exc.value)
    assert "privacy budget of dataset 'd' is exhausted" in msg and "second" in msg
    assert f"left: epsilon={before.left_epsilon:.6g} for one more release" in msg
    assert ledger.account("d") == before and len(ledger.charges("d")) == 1  # nothing recorded
    # what is left is exactly what one more release may have, and then nothing is
    left = before.left_epsilon
    ledger.charge("d", "b", _cal(left), request_id="exact", label="exact")
    assert ledger.account("d").spent_epsilon == pytest.approx(1.3, abs=1e-6)
    with pytest.raises(BudgetExceededError, match="left: epsilon=0 "):
        ledger.charge("d", "a", _cal(0.01), request_id="more", label="more")
    ledger.charge("other", "a", _cal(1.25), request_id="x", label="x")  # its own budget


def test_participant_quota_refusal_names_the_participant(tmp_path: Path) -> None:
    ledger = PrivacyLedger(tmp_path / "l.json", 10.0, DELTA, participants=PIDS,
                           participant_epsilon_budget=1.0)
    ledger.charge("d", "a", _cal(0.8), request_id="1", label="scores")
    with pytest.raises(BudgetExceededError,
                       match=r"participant 'a'\'s quota on dataset 'd' is exhausted.*left: "
                             r"epsilon=0\.\d+"):
        ledger.charge("d", "a", _cal(0.8), request_id="2", label="scores")
    # another participant's quota is untouched by a's spending
    assert ledger.account("d", "b").spent_epsilon == 0.0
    ledger.charge("d", "b", _cal(0.8), request_id="1", label="scores")
    acc = ledger.account("d", "a")
    assert acc.budget_epsilon == 1.0 and acc.releases == 1 and acc.max_releases == 1000


def test_default_quota_is_the_fair_share_every_participant_can_spend(tmp_path: Path) -> None:
    pids = tuple(f"p{i}" for i in range(5))
    ledger = PrivacyLedger(tmp_path / "l.json", 4.0, DELTA, participants=pids)
    quota = ledger.participant_epsilon_budget
    # p quotas of mu_B / sqrt(p) compose to exactly mu_B
    assert mu_of_epsilon(quota, DELTA) == pytest.approx(mu_of_epsilon(4.0, DELTA) / math.sqrt(5),
                                                        rel=1e-9)
    for pid in pids:  # each spends its whole quota (what is left of it), and all fit
        left = ledger.account("d", pid).left_epsilon
        assert left == pytest.approx(quota, rel=1e-6)
        ledger.charge("d", pid, _cal(left), request_id="all", label="x")
    assert ledger.account("d").spent_epsilon == pytest.approx(4.0, rel=1e-6)
    assert ledger.account("d").spent_epsilon <= 4.0


def test_count_quota_bounds_the_rows_even_of_nearly_free_releases(tmp_path: Path) -> None:
    ledger = _ledger(tmp_path / "l.json", 1.0, participant_max_releases=3)
    tiny = _cal(1e-12)
    for i in range(3):
        ledger.charge("d", "a", tiny, request_id=f"r{i}", label="x")
    with pytest.raises(BudgetExceededError, match=r"release quota .* 3 of 3 releases"):
        ledger.charge("d", "a", tiny, request_id="r3", label="x")
    assert ledger.account("d", "a").left_epsilon == 0.0
    assert len(json.loads((tmp_path / "l.json").read_text())["datasets"]["d"]) == 3


def test_a_request_id_is_charged_once_and_found_again_after_a_restart(tmp_path: Path) -> None:
    path = tmp_path / "sub" / "ledger.json"
    first = _ledger(path, 1.3)
    charge = first.charge("d", "a", _cal(1.0), request_id="job-7", label="first")
    with pytest.raises(InvalidInputError, match="already charged"):
        first.charge("d", "a", _cal(0.1), request_id="job-7", label="again")
    again = _ledger(path, 1.3)  # a new object on the same file: the ledger resumed
    assert again.spent("d") == first.spent("d")
    assert again.charges("d") == first.charges("d")
    assert again.charged("d", "a", "job-7") == charge
    assert again.charged("d", "b", "job-7") is None  # ids are per participant
    with pytest.raises(BudgetExceededError):
        again.charge("d", "b", _cal(1.0), request_id="x", label="second")
    assert not [p for p in path.parent.iterdir() if p.name != "ledger.json"]  # no temporaries


def test_version_1_ledgers_are_read_and_upgraded(tmp_path: Path) -> None:
    path = tmp_path / "l.json"
    sigma = _cal(0.5).sigma
    path.write_text(json.dumps({"version": 1, "epsilon_budget": 2.0, "delta_budget": DELTA,
                                "datasets": {"d": [{
                                    "dataset": "d", "label": "gram/aap/b", "sigma": sigma,
                                    "sensitivity": 2.0, "noise_multiplier": sigma / 2.0,
                                    "epsilon": 0.5, "spent_epsilon": 0.5, "timestamp": 1.0}]}}))
    ledger = _ledger(path, 2.0)
    assert ledger.account("d").spent_epsilon == pytest.approx(0.5, abs=1e-9)
    assert ledger.account("d", "b").releases == 1
    ledger.charge("d", "a", _cal(0.5), request_id="new", label="scores")
    assert json.loads(path.read_text())["version"] == LEDGER_VERSION
    assert _ledger(path, 2.0).account("d").releases == 2


def test_corrupt_ledger_is_an_error_not_a_reset(tmp_path: Path) -> None:
    path = tmp_path / "ledger.json"
    _ledger(path, 1.0).charge("d", "a", _cal(0.5), request_id="r", label="a")
    text = path.read_text()
    path.write_text(text[: len(text) // 2])  # truncated file
    with pytest.raises(LedgerError, match="corrupt"):
        _ledger(path, 1.0)
    doc = json.loads(text)
    doc["datasets"]["d"][0]["sigma"] = -1.0
    path.write_text(json.dumps(doc))
    with pytest.raises(LedgerError, match="corrupt"):
        _ledger(path, 1.0)
    del doc["datasets"]
    path.write_text(json.dumps(doc))
    with pytest.raises(LedgerError, match="corrupt"):
        _ledger(path, 1.0)


def test_budget_cannot_change_on_an_existing_ledger(tmp_path: Path) -> None:
    path = tmp_path / "ledger.json"
    _ledger(path, 1.0).charge("d", "a", _cal(0.5), request_id="r", label="a")
    with pytest.raises(LedgerError, match="budget"):
        _ledger(path, 2.0)
    # quotas may change (operator policy): the rows are attributed, the totals recomputed
    assert _ledger(path, 1.0, participant_epsilon_budget=0.6).account("d", "a").releases == 1


@pytest.mark.parametrize(("eps", "delta"), [(0.0, DELTA), (-1.0, DELTA), (math.nan, DELTA),
                                            (1.0, 0.0), (1.0, 1.0), (1.0, math.nan)])
def test_bad_budget_is_rejected(tmp_path: Path, eps: float, delta: float) -> None:
    with pytest.raises(InvalidInputError, match="budget"):
        PrivacyLedger(tmp_path / "l.json", eps, delta, participants=PIDS)


def test_bad_charge_arguments_are_rejected(tmp_path: Path) -> None:
    ledger = _ledger(tmp_path / "l.json", 1.0)
    with pytest.raises(InvalidInputError, match="Calibration"):
        ledger.charge("d", "a", 0.5, request_id="r", label="a")
    with pytest.raises(InvalidInputError, match="dataset"):
        ledger.charge("", "a", _cal(0.1), request_id="r", label="a")
    with pytest.raises(InvalidInputError, match="request_id"):
        ledger.charge("d", "a", _cal(0.1), request_id="", label="a")
    with pytest.raises(InvalidInputError, match="not a participant"):
        ledger.charge("d", "mallory", _cal(0.1), request_id="r", label="a")
    assert not (tmp_path / "l.json").exists()


def test_concurrent_charges_never_overspend(tmp_path: Path) -> None:
    # each release costs 1.0 alone; the budget holds exactly two of them composed (~1.46)
    ledger = _ledger(tmp_path / "l.json", 1.6)
    cal = _cal(1.0)
    outcomes: list[str] = []

    def worker(i: int) -> None:
        try:
            ledger.charge("d", PIDS[i % 2], cal, request_id=f"t{i}", label=f"t{i}")
            outcomes.append("ok")
        except BudgetExceededError:
            outcomes.append("refused")

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert outcomes.count("ok") == 2 and outcomes.count("refused") == 4
    assert ledger.spent("d")[0] <= 1.6
    assert len(_ledger(tmp_path / "l.json", 1.6).charges("d")) == 2


def test_epsilon_and_mu_conversions_invert_each_other() -> None:
    for eps in (0.01, 0.5, 3.0, 40.0):
        assert epsilon_of_mu(mu_of_epsilon(eps, DELTA), DELTA) == pytest.approx(eps, rel=1e-9)
    assert epsilon_of_mu(0.0, DELTA) == 0.0


@pytest.mark.slow
def test_reopening_a_long_ledger_does_no_accounting_per_row(tmp_path: Path, monkeypatch) -> None:
    """Issue 9: 1,912 nearly free releases made the first charge after a restart take 12.6 s
    (every row re-composed under the lock). Rows are now bounded by the count quota, and a
    reopened ledger only sums mu^2 over them: the epsilon conversions it makes do not grow with
    the rows."""
    import noisyanchor.common.scoreshield.calibration as pbmod  # epsilon_of_mu lives there

    path = tmp_path / "l.json"
    ledger = _ledger(path, 5.0, participant_max_releases=200)
    for i in range(400):
        ledger.charge("d", PIDS[i % 2], _cal(0.011), request_id=f"r{i}", label="scores")
    calls = {"n": 0}
    original = pbmod.gaussian_epsilon

    def counted(*args, **kwargs):
        calls["n"] += 1
        return original(*args, **kwargs)

    monkeypatch.setattr(pbmod, "gaussian_epsilon", counted)
    again = _ledger(path, 5.0, participant_max_releases=200)
    assert calls["n"] <= 1  # at most the fair-share quota, whatever the number of rows
    assert again.account("d").releases == 400
    assert again.spent("d")[0] == pytest.approx(ledger.spent("d")[0], rel=1e-12)


# --- what may be charged (issue 26) -----------------------------------------------------------

def test_a_tiny_stated_sensitivity_is_charged_the_epsilon_the_release_states(
        tmp_path: Path) -> None:
    # the issue: sensitivity 1e-12 with sigma 1e-3 was charged 0.0; the release reports epsilon 1
    ledger = _ledger(tmp_path / "l.json", 5.0)
    cal = Calibration(epsilon=1.0, delta=DELTA, sensitivity=1e-12, sigma=1e-3, method="analytic")
    charge = ledger.charge("d", "a", cal, request_id="r", label="tiny")
    assert charge.epsilon == pytest.approx(1.0, rel=1e-9)
    assert ledger.spent("d")[0] == pytest.approx(1.0, rel=1e-9)
    # and after a restart the same mu is summed from the row
    again = _ledger(tmp_path / "l.json", 5.0)
    assert again.spent("d")[0] == pytest.approx(1.0, rel=1e-9)


@pytest.mark.parametrize("field", ["sensitivity", "sigma"])
@pytest.mark.parametrize("value", [0.0, -2.0, math.inf, math.nan])
def test_forged_calibrations_are_refused_and_nothing_is_charged(
        tmp_path: Path, field: str, value: float) -> None:
    ledger = _ledger(tmp_path / "l.json", 5.0)
    cal = _cal(1.0)
    object.__setattr__(cal, field, value)  # past the frozen dataclass's validation
    with pytest.raises(InvalidInputError, match=field):
        ledger.charge("d", "a", cal, request_id="r", label="forged")
    assert ledger.charges() == [] and not (tmp_path / "l.json").exists()


def test_a_calibration_altered_after_construction_is_refused(tmp_path: Path) -> None:
    ledger = _ledger(tmp_path / "l.json", 5.0)
    cal = _cal(1.0)
    object.__setattr__(cal, "sigma", 1e-3)  # promises epsilon 1, delivers ~2e6
    with pytest.raises(InvalidInputError, match="below"):
        ledger.charge("d", "a", cal, request_id="r", label="forged")
    assert ledger.charges() == []


def test_an_output_space_gram_is_charged_its_record_level_cost(tmp_path: Path) -> None:
    ledger = _ledger(tmp_path / "l.json", 1e6)
    regime = Regime("gram", 100, adjacency="output", radius=2.0)
    cal = calibrate(10.0, DELTA, regime)
    charge = ledger.charge("d", "a", cal, request_id="r", label="gram/output")
    record_eps = gaussian_epsilon(cal.sigma, DELTA, gram_record_sensitivity(100))
    assert charge.epsilon == pytest.approx(record_eps, rel=1e-6) and record_eps > 100
    assert charge.sensitivity == pytest.approx(gram_record_sensitivity(100))


def _chained(tmp_path: Path, charges: int = 3) -> tuple[Path, Path]:
    path, head = tmp_path / "ledger.json", tmp_path / "store" / "ledger.head.json"
    head.parent.mkdir()
    ledger = _ledger(path, 10.0, head_path=head)
    for k in range(charges):
        ledger.charge("d", "ab"[k % 2], _cal(0.5), request_id=f"r{k}", label="scores")
    return path, head


def test_the_ledger_is_a_hash_chain_with_its_head_kept_apart(tmp_path: Path) -> None:
    """Issue 22: each row continues the chain of the rows before it, and the head (count, last
    value) is written beside the store, so a ledger reopened with its head resumes exactly."""
    path, head = _chained(tmp_path)
    rows = sorted((r for v in json.loads(path.read_text())["datasets"].values() for r in v),
                  key=lambda r: r["seq"])
    assert [r["seq"] for r in rows] == [0, 1, 2] and len({r["chain"] for r in rows}) == 3
    assert json.loads(head.read_text())["rows"] == 3
    assert json.loads(head.read_text())["chain"] == rows[-1]["chain"]
    assert _ledger(path, 10.0, head_path=head).account("d").releases == 3


@pytest.mark.parametrize("tamper, refusal", [
    (lambda doc: doc["datasets"]["d"][1].update(sigma=doc["datasets"]["d"][1]["sigma"] * 9),
     "row 1 .* does not continue the chain"),
    (lambda doc: doc["datasets"]["d"].pop(1), "row 1 .* does not continue the chain"),
    (lambda doc: doc["datasets"]["d"].pop(), "has 2 rows, but 3 charges were recorded"),
    (lambda doc: doc["datasets"].clear(), "has 0 rows, but 3 charges were recorded"),
], ids=["row-edited", "middle-row-removed", "last-row-removed", "all-rows-removed"])
def test_an_edited_or_trimmed_ledger_is_refused(tmp_path: Path, tamper, refusal) -> None:
    path, head = _chained(tmp_path)
    doc = json.loads(path.read_text())
    tamper(doc)
    path.write_text(json.dumps(doc))
    with pytest.raises(LedgerError, match=refusal):
        _ledger(path, 10.0, head_path=head)


def test_a_missing_or_older_ledger_is_refused_not_read_as_budget_zero(tmp_path: Path) -> None:
    path, head = _chained(tmp_path, 2)
    older = path.read_text()
    _ledger(path, 10.0, head_path=head).charge("d", "a", _cal(0.5), request_id="r9", label="x")
    path.write_text(older)  # a backup from before the last charge
    with pytest.raises(LedgerError, match="has 2 rows, but 3 charges were recorded"):
        _ledger(path, 10.0, head_path=head)
    path.unlink()  # deleted, or its volume not mounted
    with pytest.raises(LedgerError, match="is missing, but 3 charges were recorded"):
        _ledger(path, 10.0, head_path=head)


def test_a_ledger_one_write_ahead_of_its_head_is_taken(tmp_path: Path) -> None:
    """A crash between the ledger's write and its head's leaves the ledger one row ahead: the
    rows are all chained, so they are taken and the head brought up to date."""
    path, head = _chained(tmp_path, 2)
    before = head.read_text()
    _ledger(path, 10.0, head_path=head).charge("d", "a", _cal(0.5), request_id="r8", label="x")
    head.write_text(before)
    assert _ledger(path, 10.0, head_path=head).account("d").releases == 3
    assert json.loads(head.read_text())["rows"] == 3


def test_a_read_only_ledger_writes_nothing_and_charges_nothing(tmp_path: Path) -> None:
    """``analyst status`` reads the ledger beside the running analyst: a ledger one write ahead
    of its head (the analyst between its two writes) is read as it is, the head left alone."""
    path, head = _chained(tmp_path, 2)
    before = head.read_text()
    _ledger(path, 10.0, head_path=head).charge("d", "a", _cal(0.5), request_id="r8", label="x")
    head.write_text(before)
    reader = _ledger(path, 10.0, head_path=head, read_only=True)
    assert reader.account("d").releases == 3 and head.read_text() == before
    with pytest.raises(PreconditionError, match="opened read-only"):
        reader.charge("d", "a", _cal(0.5), request_id="r9", label="x")
    assert _ledger(path, 10.0, head_path=head).account("d").releases == 3

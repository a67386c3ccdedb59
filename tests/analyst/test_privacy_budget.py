"""Tests of analyst.privacy_budget: composition via dp_accounting, refusal, persistence, locking."""

from __future__ import annotations

import json
import math
import threading
from pathlib import Path

import dp_accounting
import pytest
from dp_accounting.pld import pld_privacy_accountant

from noisyanchor.analyst.privacy_budget import Charge, LedgerError, PrivacyLedger
from noisyanchor.common.errors import BudgetExceededError, InvalidInputError
from noisyanchor.common.scoreshield import analytic_sigma, gaussian_delta, score_vector_sensitivity

DELTA = 1e-5


def _sigma_for(epsilon: float) -> float:
    return analytic_sigma(epsilon, DELTA, score_vector_sensitivity())


def test_single_release_spends_its_own_epsilon(tmp_path: Path) -> None:
    ledger = PrivacyLedger(tmp_path / "ledger.json", 2.0, DELTA)
    assert ledger.spent("digits") == (0.0, 0.0)
    charge = ledger.charge("digits", _sigma_for(1.0), 2.0, label="scores")
    assert isinstance(charge, Charge)
    eps, delta = ledger.spent("digits")
    assert delta == DELTA
    # PLD is pessimistic by at most a discretisation step (1e-4 here)
    assert 1.0 - 1e-6 <= eps <= 1.0 + 1e-3


def test_composition_matches_exact_gaussian_composition(tmp_path: Path) -> None:
    # k Gaussian releases with multipliers z_i compose exactly to one Gaussian with
    # z_eff = (sum z_i^-2)^(-1/2); the PLD accountant must agree (and is never below it).
    ledger = PrivacyLedger(tmp_path / "l.json", 10.0, DELTA)
    sigmas = [_sigma_for(0.5), _sigma_for(1.0), _sigma_for(0.3)]
    for i, s in enumerate(sigmas):
        ledger.charge("d", s, 2.0, label=f"r{i}")
    eps, _ = ledger.spent("d")
    z_eff = sum((s / 2.0) ** -2 for s in sigmas) ** -0.5
    assert gaussian_delta(z_eff, eps, 1.0) <= DELTA * (1 + 1e-6)  # eps is a valid bound
    assert gaussian_delta(z_eff, eps - 5e-3, 1.0) > DELTA  # and tight to 5e-3
    assert eps < 0.5 + 1.0 + 0.3  # tighter than summing epsilons


def test_release_crossing_the_budget_is_refused(tmp_path: Path) -> None:
    ledger = PrivacyLedger(tmp_path / "l.json", 1.3, DELTA)
    ledger.charge("d", _sigma_for(1.0), 2.0, label="first")
    before = ledger.spent("d")
    assert ledger.would_exceed("d", _sigma_for(1.0), 2.0)
    with pytest.raises(BudgetExceededError, match=r"spent epsilon=.*budget epsilon=1\.3") as exc:
        ledger.charge("d", _sigma_for(1.0), 2.0, label="second")
    assert "second" in str(exc.value) and "'d'" in str(exc.value)
    assert ledger.spent("d") == before  # nothing recorded
    assert len(ledger.charges("d")) == 1
    # a cheaper release still fits, and other datasets have their own budget
    assert not ledger.would_exceed("d", _sigma_for(0.2), 2.0)
    ledger.charge("other", _sigma_for(1.25), 2.0, label="x")


def test_a_single_release_above_the_budget_is_refused_quickly(tmp_path: Path) -> None:
    ledger = PrivacyLedger(tmp_path / "l.json", 1.0, DELTA)
    # noise multiplier 0.01 (epsilon in the hundreds): refused by the exact pre-check
    with pytest.raises(BudgetExceededError, match="exceeded"):
        ledger.charge("d", 0.02, 2.0, label="huge")
    assert ledger.spent("d") == (0.0, 0.0)


def test_ledger_survives_a_restart(tmp_path: Path) -> None:
    path = tmp_path / "sub" / "ledger.json"
    first = PrivacyLedger(path, 1.3, DELTA)
    first.charge("d", _sigma_for(1.0), 2.0, label="first")
    spent = first.spent("d")
    again = PrivacyLedger(path, 1.3, DELTA)  # new object on the same file
    assert again.spent("d") == spent
    assert again.charges("d") == first.charges("d")
    with pytest.raises(BudgetExceededError):
        again.charge("d", _sigma_for(1.0), 2.0, label="second")
    assert not list(path.parent.glob("*.tmp"))  # no stray temporary files


def test_cached_composition_equals_composing_every_release_at_once(tmp_path: Path) -> None:
    """Each charge composes one release onto the cached composition; the spent epsilon is the
    one of a single ComposedDpEvent of all releases, and a reopened ledger (which re-composes
    its charges) continues identically."""
    path = tmp_path / "l.json"
    sigmas = [_sigma_for(e) for e in (0.3, 0.1, 0.5, 0.2, 0.1, 0.4)]
    ledger = PrivacyLedger(path, 10.0, DELTA)
    for i, s in enumerate(sigmas[:4]):
        ledger.charge("d", s, 2.0, label=f"r{i}")
    copy = tmp_path / "copy.json"  # one process owns a ledger file: reopen a copy
    copy.write_bytes(path.read_bytes())
    reopened = PrivacyLedger(copy, 10.0, DELTA)
    for i, s in enumerate(sigmas[4:], start=4):
        ledger.charge("d", s, 2.0, label=f"r{i}")
        reopened.charge("d", s, 2.0, label=f"r{i}")
    acc = pld_privacy_accountant.PLDAccountant(
        dp_accounting.NeighboringRelation.ADD_OR_REMOVE_ONE, value_discretization_interval=1e-3)
    acc.compose(dp_accounting.ComposedDpEvent([dp_accounting.GaussianDpEvent(s / 2.0)
                                               for s in sigmas]))
    assert ledger.spent("d") == reopened.spent("d") == (acc.get_epsilon(DELTA), DELTA)


def test_corrupt_ledger_is_an_error_not_a_reset(tmp_path: Path) -> None:
    path = tmp_path / "ledger.json"
    PrivacyLedger(path, 1.0, DELTA).charge("d", _sigma_for(0.5), 2.0, label="a")
    text = path.read_text()
    path.write_text(text[: len(text) // 2])  # truncated file
    with pytest.raises(LedgerError, match="corrupt"):
        PrivacyLedger(path, 1.0, DELTA)
    doc = json.loads(text)
    doc["datasets"]["d"][0]["sigma"] = -1.0
    path.write_text(json.dumps(doc))
    with pytest.raises(LedgerError, match="corrupt"):
        PrivacyLedger(path, 1.0, DELTA)
    del doc["datasets"]
    path.write_text(json.dumps(doc))
    with pytest.raises(LedgerError, match="corrupt"):
        PrivacyLedger(path, 1.0, DELTA)


def test_budget_cannot_change_on_an_existing_ledger(tmp_path: Path) -> None:
    path = tmp_path / "ledger.json"
    PrivacyLedger(path, 1.0, DELTA).charge("d", _sigma_for(0.5), 2.0, label="a")
    with pytest.raises(LedgerError, match="budget"):
        PrivacyLedger(path, 2.0, DELTA)


@pytest.mark.parametrize(("eps", "delta"), [(0.0, DELTA), (-1.0, DELTA), (math.nan, DELTA),
                                            (1.0, 0.0), (1.0, 1.0), (1.0, math.nan)])
def test_bad_budget_is_rejected(tmp_path: Path, eps: float, delta: float) -> None:
    with pytest.raises(InvalidInputError, match="budget"):
        PrivacyLedger(tmp_path / "l.json", eps, delta)


def test_bad_charge_arguments_are_rejected(tmp_path: Path) -> None:
    ledger = PrivacyLedger(tmp_path / "l.json", 1.0, DELTA)
    with pytest.raises(InvalidInputError, match="sigma"):
        ledger.charge("d", 0.0, 2.0, label="a")
    with pytest.raises(InvalidInputError, match="sensitivity"):
        ledger.charge("d", 1.0, math.nan, label="a")
    with pytest.raises(InvalidInputError, match="dataset"):
        ledger.charge("", 1.0, 2.0, label="a")
    assert not (tmp_path / "l.json").exists()


def test_concurrent_charges_never_overspend(tmp_path: Path) -> None:
    # each release costs 1.0 alone; the budget holds exactly two of them composed (~1.46)
    ledger = PrivacyLedger(tmp_path / "l.json", 1.6, DELTA)
    sigma = _sigma_for(1.0)
    outcomes: list[str] = []

    def worker(i: int) -> None:
        try:
            ledger.charge("d", sigma, 2.0, label=f"t{i}")
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
    assert len(PrivacyLedger(tmp_path / "l.json", 1.6, DELTA).charges("d")) == 2

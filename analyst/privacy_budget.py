"""Privacy budget accountant of the analyst: a persisted ledger of Gaussian releases per dataset.

Every DP release (a ScoreShield score vector or Gram, SPEC.md section 5) is a Gaussian mechanism
with noise ``sigma`` and L2 sensitivity ``Delta``; its privacy loss depends only on the noise
multiplier ``z = sigma / Delta``. The releases charged against one dataset compose; the composed
guarantee is computed by ``dp_accounting``'s privacy-loss-distribution (PLD) accountant (tight, up
to a pessimistic discretisation), never by summing epsilons. A dataset's budget is
``(epsilon_budget, delta_budget)``: a release is refused when, composed with everything already
charged, the smallest epsilon at ``delta_budget`` would exceed ``epsilon_budget``.

The ledger is a JSON file written atomically (temporary file in the same directory, fsync,
``os.replace``, fsync of the directory), so a restart resumes the spent budget; a ledger that
cannot be read or does not validate is an error, never silently reset. Check-then-charge is atomic
under a ``threading.Lock`` (the analyst service is multi-threaded); one process owns a ledger file.

References
----------
SPEC.md section 5 ("repeated releases compose and need an accountant"); ScoreShield paper,
Section 5 limitations (one release analysed); Google ``dp_accounting`` (PLD accountant).
"""

from __future__ import annotations

import copy
import json
import logging
import math
import os
import threading
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

import dp_accounting
from dp_accounting.pld import pld_privacy_accountant

from noisyanchor.common.errors import BudgetExceededError, InvalidInputError, PreconditionError
from noisyanchor.common.files import atomic_write
from noisyanchor.common.scoreshield.calibration import gaussian_delta, gaussian_epsilon
from noisyanchor.common.validation import check_positive

log = logging.getLogger(__name__)

#: Version of the ledger file layout.
LEDGER_VERSION = 1


class LedgerError(PreconditionError):
    """The ledger file is unreadable, corrupt or disagrees with the configured budget."""


@dataclass(frozen=True)
class Charge:
    """One release charged to a dataset.

    Attributes
    ----------
    dataset : str
        Dataset the release was computed from.
    label : str
        What was released (e.g. ``"gram/aap"``).
    sigma : float
        Noise standard deviation of the Gaussian mechanism.
    sensitivity : float
        L2 / Frobenius sensitivity it was calibrated to.
    noise_multiplier : float
        ``sigma / sensitivity``.
    epsilon : float
        Epsilon of this release alone at ``delta_budget`` (PLD).
    spent_epsilon : float
        Composed epsilon of the dataset at ``delta_budget`` after this charge.
    timestamp : float
        Unix time of the charge.
    """

    dataset: str
    label: str
    sigma: float
    sensitivity: float
    noise_multiplier: float
    epsilon: float
    spent_epsilon: float
    timestamp: float


class PrivacyLedger:
    """Per-dataset budget ``(epsilon_budget, delta_budget)`` for composed Gaussian releases.

    Parameters
    ----------
    path : str or os.PathLike
        JSON ledger file. Created on the first charge; an existing file is loaded and must carry
        the same budget.
    epsilon_budget : float
        ``epsilon > 0`` every dataset may spend in total.
    delta_budget : float
        ``0 < delta < 1``; the composition is accounted at this delta.

    Raises
    ------
    InvalidInputError
        Bad budget values.
    LedgerError
        Existing ledger unreadable, corrupt, or recorded with a different budget.
    """

    def __init__(self, path: str | os.PathLike, epsilon_budget: float, delta_budget: float):
        self._path = Path(path)
        self.epsilon_budget = check_positive(epsilon_budget, "epsilon_budget")
        d = float(delta_budget)
        if not (math.isfinite(d) and 0.0 < d < 1.0):
            raise InvalidInputError(f"delta_budget must be in (0, 1), got {delta_budget!r}")
        self.delta_budget = d
        # PLD grid step: the default 1e-4 becomes very slow for small noise multipliers (large
        # budgets); scaling it with the budget keeps the discretisation error (pessimistic, at most
        # one step per composed event) around 1e-4 of the budget.
        self._interval = 1e-4 * max(1.0, self.epsilon_budget)
        self._lock = threading.Lock()
        self._charges: dict[str, list[Charge]] = {}
        self._composed: dict[str, pld_privacy_accountant.PLDAccountant] = {}
        if self._path.exists():
            self._load()

    @property
    def path(self) -> Path:
        """Location of the ledger file."""
        return self._path

    # ---- accounting ------------------------------------------------------------------------

    def _accountant(self, multipliers: Sequence[float] = ()
                    ) -> pld_privacy_accountant.PLDAccountant:
        """A PLD accountant with the Gaussian mechanisms of ``multipliers`` composed in order."""
        # Our sensitivities are already replacement sensitivities, so the privacy-loss pair is
        # N(0, z^2) vs N(1, z^2): dp_accounting's ADD_OR_REMOVE_ONE semantics for GaussianDpEvent.
        # (Its REPLACE_ONE would double the sensitivity a second time.)
        acc = pld_privacy_accountant.PLDAccountant(
            dp_accounting.NeighboringRelation.ADD_OR_REMOVE_ONE,
            value_discretization_interval=self._interval)
        for z in multipliers:
            acc.compose(dp_accounting.GaussianDpEvent(z))
        return acc

    def _composed_with(self, dataset: str, z: float) -> pld_privacy_accountant.PLDAccountant:
        """The composition of ``dataset``'s charges and one more Gaussian release ``z``.

        The composition of the charges so far is cached per dataset, so a charge costs one
        convolution instead of re-composing every release (sequential composition gives the
        same PLD, bit for bit, as composing the whole list at once).
        """
        if dataset not in self._composed:
            self._composed[dataset] = self._accountant(
                [c.noise_multiplier for c in self._charges.get(dataset, [])])
        candidate = copy.deepcopy(self._composed[dataset])
        candidate.compose(dp_accounting.GaussianDpEvent(z))
        return candidate

    def _epsilon(self, acc: pld_privacy_accountant.PLDAccountant) -> float:
        """Smallest epsilon at ``delta_budget`` of the composition held by ``acc``."""
        return float(acc.get_epsilon(self.delta_budget))

    def _exact_lower_bound(self, multipliers: list[float]) -> float:
        """Exact epsilon of a Gaussian composition (1/z^2 add up), a cheap pre-check.

        Composing Gaussian mechanisms is exactly one Gaussian mechanism with
        ``z_eff = (sum_i z_i^-2)^(-1/2)`` (Dong, Roth and Su, Gaussian DP); its exact epsilon is a
        lower bound of the pessimistic PLD value, so exceeding the budget here means refusing
        without building a large PLD.
        """
        z_eff = sum(z ** -2 for z in multipliers) ** -0.5
        if gaussian_delta(z_eff, self.epsilon_budget, 1.0) <= self.delta_budget:
            return 0.0  # within budget: no cheap verdict, let the PLD decide
        return gaussian_epsilon(z_eff, self.delta_budget, 1.0)

    def _check(self, dataset: str, z: float
               ) -> tuple[float, float, float, pld_privacy_accountant.PLDAccountant | None]:
        """``(spent, alone, after, composed)`` for adding multiplier ``z`` to ``dataset``;
        ``composed`` is the accountant after the release (None when refused by the exact
        pre-check)."""
        current = [c.noise_multiplier for c in self._charges.get(dataset, [])]
        spent = self._charges[dataset][-1].spent_epsilon if current else 0.0
        bound = self._exact_lower_bound([*current, z])
        if bound > self.epsilon_budget:
            alone = self._exact_lower_bound([z]) or self._epsilon(self._accountant([z]))
            return spent, alone, bound, None
        composed = self._composed_with(dataset, z)
        return spent, self._epsilon(self._accountant([z])), self._epsilon(composed), composed

    @staticmethod
    def _multiplier(sigma: float, sensitivity: float) -> float:
        s = check_positive(sigma, "sigma")
        d = check_positive(sensitivity, "sensitivity")
        return s / d

    @staticmethod
    def _check_name(value: str, name: str) -> str:
        if not isinstance(value, str) or not value:
            raise InvalidInputError(f"{name} must be a non-empty string, got {value!r}")
        return value

    def would_exceed(self, dataset: str, sigma: float, sensitivity: float) -> bool:
        """Whether charging this Gaussian release to ``dataset`` would exceed the budget."""
        dataset = self._check_name(dataset, "dataset")
        z = self._multiplier(sigma, sensitivity)
        with self._lock:
            after = self._check(dataset, z)[2]
        return after > self.epsilon_budget

    def charge(self, dataset: str, sigma: float, sensitivity: float, *, label: str) -> Charge:
        """Charge one Gaussian release to ``dataset``, or refuse it.

        Parameters
        ----------
        dataset : str
            Dataset identifier.
        sigma : float
            Noise standard deviation of the release, > 0.
        sensitivity : float
            L2 / Frobenius sensitivity the noise was calibrated to, > 0 (the adjacency of the
            dataset's budget: record-level sensitivities for a record-level budget).
        label : str
            Description stored in the ledger.

        Returns
        -------
        Charge
            The recorded charge (persisted before it is returned).

        Raises
        ------
        BudgetExceededError
            The composition would exceed ``(epsilon_budget, delta_budget)``; nothing is recorded.
        """
        dataset = self._check_name(dataset, "dataset")
        label = self._check_name(label, "label")
        z = self._multiplier(sigma, sensitivity)
        with self._lock:
            spent, alone, after, composed = self._check(dataset, z)
            if after > self.epsilon_budget:
                raise BudgetExceededError(
                    f"privacy budget of dataset {dataset!r} exceeded: release {label!r} "
                    f"(sigma={sigma:.6g}, sensitivity={sensitivity:.6g}) requests epsilon="
                    f"{alone:.6g} alone; spent epsilon={spent:.6g} would become {after:.6g} > "
                    f"budget epsilon={self.epsilon_budget:.6g} (all at delta="
                    f"{self.delta_budget:.3g})")
            charge = Charge(dataset=dataset, label=label, sigma=float(sigma),
                            sensitivity=float(sensitivity), noise_multiplier=z, epsilon=alone,
                            spent_epsilon=after, timestamp=time.time())
            charges = {k: list(v) for k, v in self._charges.items()}
            charges.setdefault(dataset, []).append(charge)
            self._write(charges)  # persist first; memory changes only if the write succeeded
            self._charges = charges
            self._composed[dataset] = composed
        # Logged at the charge (not when the release is sent): a release abandoned by a
        # shutdown stays charged, and the operator's log must show it.
        log.info("privacy ledger: charged %s to dataset %s: epsilon %.4g alone, %.4g of %.4g "
                 "spent", label, dataset, alone, after, self.epsilon_budget)
        return charge

    def spent(self, dataset: str) -> tuple[float, float]:
        """``(epsilon, delta)`` spent by ``dataset``: composed epsilon at ``delta_budget``.

        ``(0.0, 0.0)`` when nothing was charged.
        """
        dataset = self._check_name(dataset, "dataset")
        with self._lock:
            charges = self._charges.get(dataset, [])
            if not charges:
                return 0.0, 0.0
            return charges[-1].spent_epsilon, self.delta_budget

    def remaining(self, dataset: str) -> float:
        """Epsilon left at ``delta_budget`` (approximate: composition is not additive)."""
        return max(0.0, self.epsilon_budget - self.spent(dataset)[0])

    def charges(self, dataset: str | None = None) -> list[Charge]:
        """The recorded charges, of one dataset or of all, in charge order."""
        with self._lock:
            if dataset is not None:
                return list(self._charges.get(dataset, []))
            return [c for v in self._charges.values() for c in v]

    # ---- persistence -----------------------------------------------------------------------

    def _write(self, charges: dict[str, list[Charge]]) -> None:
        doc = {
            "version": LEDGER_VERSION,
            "epsilon_budget": self.epsilon_budget,
            "delta_budget": self.delta_budget,
            "accountant": "dp_accounting PLD, Gaussian events, noise_multiplier=sigma/sensitivity",
            "datasets": {k: [asdict(c) for c in v] for k, v in charges.items()},
        }
        self._path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write(self._path, json.dumps(doc, indent=2, sort_keys=True).encode("utf-8"))

    def _load(self) -> None:
        where = str(self._path)
        try:
            doc = json.loads(self._path.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
            raise LedgerError(f"privacy ledger {where} is unreadable or corrupt ({err}); "
                              "refusing to start with an unknown spent budget") from None
        try:
            if doc["version"] != LEDGER_VERSION:
                raise LedgerError(f"privacy ledger {where} has version {doc['version']!r}, "
                                  f"expected {LEDGER_VERSION}")
            eb, db = float(doc["epsilon_budget"]), float(doc["delta_budget"])
            charges: dict[str, list[Charge]] = {}
            for name, rows in doc["datasets"].items():
                charges[name] = [Charge(**row) for row in rows]
                for c in charges[name]:
                    if not (c.sigma > 0 and c.sensitivity > 0 and c.spent_epsilon >= 0
                            and c.dataset == name):
                        raise ValueError(f"invalid charge {c}")
        except LedgerError:
            raise
        except (KeyError, TypeError, ValueError, AttributeError) as err:
            raise LedgerError(f"privacy ledger {where} is corrupt ({err!r}); refusing to start "
                              "with an unknown spent budget") from None
        if (eb, db) != (self.epsilon_budget, self.delta_budget):
            raise LedgerError(
                f"privacy ledger {where} was created with budget (epsilon={eb}, delta={db}), "
                f"not (epsilon={self.epsilon_budget}, delta={self.delta_budget}); a budget "
                "cannot be changed on an existing ledger")
        self._charges = charges

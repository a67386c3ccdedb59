"""Privacy budget accountant of the analyst: a persisted ledger of Gaussian releases, per dataset
and per participant.

Every DP release (a ScoreShield score vector or Gram, SPEC.md section 5) is a Gaussian mechanism
with noise ``sigma`` and L2 sensitivity ``Delta``. Its privacy loss is exactly that of
``mu``-Gaussian differential privacy with ``mu = Delta / sigma`` (Dong, Roth and Su, "Gaussian
differential privacy", JRSS-B 2022, Theorem 2.7), and Gaussian mechanisms compose exactly, even
adaptively: ``k`` releases are ``sqrt(sum_i mu_i^2)``-GDP (ibid., Corollary 3.3). So the composed
guarantee of any set of releases is that of ONE Gaussian mechanism, whose ``(epsilon, delta)``
curve is the analytic one of Balle and Wang (:func:`common.scoreshield.gaussian_epsilon`). This
is exact (a privacy-loss-distribution accountant such as ``dp_accounting``'s computes the same
number up to its pessimistic discretisation; the tests check the two agree), costs O(1) per
charge, and a restart only sums ``mu_i^2`` over the rows: no composition to redo under the lock.

Two budgets are checked before anything is released, both at ``delta_budget``:

- the dataset budget ``epsilon_budget`` bounds the composition of every release of a dataset;
- each participant's quota ``participant_epsilon_budget`` bounds the composition of that
  participant's releases of the dataset, so one participant cannot spend the budget of all.
  Default: the fair share ``mu_B / sqrt(p)`` for ``p`` participants, with which every
  participant can always spend its whole quota (``p`` quotas compose to exactly the budget).

and a count quota (``participant_max_releases``) bounds the rows each participant can add. A
refusal names the budget that is exhausted and what is left of it: the largest epsilon one more
release could still have (``sqrt(mu_B^2 - mu_spent^2)`` converted at ``delta_budget``).

Each row carries the caller's request id, so a release is charged at most once per id (the
release jobs of :mod:`analyst.release_jobs` rely on this after a crash). The ledger is a JSON
file written atomically (:func:`common.files.atomic_write`), so a restart resumes the spent
budget; a ledger that cannot be read or does not validate is an error, never silently reset.
Check-then-charge is atomic under a ``threading.Lock``; one process owns a ledger file. Version 1
ledgers (no participants, no request ids) are read, their rows attributed to the participant
named at the end of their label, and rewritten as version 2 on the next charge.

References
----------
SPEC.md section 5 ("repeated releases compose and need an accountant"); ScoreShield paper,
Section 5 limitations (one release analysed); Dong, Roth and Su (2022); Balle and Wang (2018).
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import os
import threading
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, fields
from pathlib import Path

from noisyanchor.common.errors import (
    BudgetExceededError,
    InvalidInputError,
    LedgerError,
    PreconditionError,
)
from noisyanchor.common.files import atomic_write, read_under
from noisyanchor.common.scoreshield.calibration import (
    Calibration,
    check_epsilon_delta,
    epsilon_of_mu,
    mu_of_epsilon,
)

log = logging.getLogger(__name__)

#: Version of the ledger file layout.
LEDGER_VERSION = 3

#: File name of the ledger's head in the analyst's store (kept apart from the rows).
LEDGER_HEAD = "ledger.head.json"

#: A reported "left" epsilon is converted from ``mu_left * (1 - _LEFT_MARGIN)``, so a release
#: asking exactly for it fits despite the rounding of squares and square roots.
_LEFT_MARGIN = 1e-9


def charged_mu(calibration: Calibration) -> float:
    """The ``mu`` a release is charged: never less than its noise delivers, nor than it states.

    ``max(mu(epsilon, delta), Delta_rec / sigma)``: the GDP parameter of the guarantee the
    release states (a :class:`Calibration` cannot state more than its noise delivers at its own
    sensitivity, so this covers ``Delta / sigma``, and a sensitivity made small on purpose is
    still charged the epsilon the release reports), and the record-level cost of the noise when
    the calibration names its regime (``Delta_rec`` derived from the regime's formula and ``n``,
    e.g. the record-level cost of an output-space Gram release). Identity-level releases are
    charged their identity-level cost, which exceeds the record-level one.

    Raises
    ------
    InvalidInputError
        Not a Calibration, or one whose fields do not validate (a non-positive or non-finite
        sensitivity or sigma, or a sigma below what its guarantee needs), however it was made.
    """
    if not isinstance(calibration, Calibration):
        raise InvalidInputError("calibration must be a common.scoreshield.Calibration")
    for name in ("sensitivity", "sigma"):
        value = getattr(calibration, name)
        if not (isinstance(value, (int, float)) and math.isfinite(value) and value > 0):
            raise InvalidInputError(f"cannot charge a release whose {name} is {value!r}: it "
                                    "must be a finite number > 0")
    # re-validate every field: a frozen dataclass can still be altered with object.__setattr__
    cal = Calibration(**{f.name: getattr(calibration, f.name) for f in fields(Calibration)})
    mu = mu_of_epsilon(cal.epsilon, cal.delta)
    if cal.regime is not None:
        mu = max(mu, cal.regime.record_sensitivity / cal.sigma)
    return max(mu, cal.sensitivity / cal.sigma)


@dataclass(frozen=True)
class Charge:
    """One release charged to a dataset by a participant.

    Attributes
    ----------
    dataset : str
        Dataset the release was computed from.
    participant : str
        Who asked for it (and whose quota it counts against).
    request_id : str
        The caller's id of the release ("" for version-1 rows).
    label : str
        What was released (e.g. ``"gram/newton"``).
    sigma : float
        Noise standard deviation of the Gaussian mechanism.
    sensitivity : float
        Sensitivity charged: ``mu * sigma`` (:func:`charged_mu`), the release's own sensitivity
        unless its stated guarantee or its record-level cost is higher.
    epsilon : float
        Epsilon of this release alone at ``delta_budget``.
    spent_epsilon : float
        Composed epsilon of the dataset at ``delta_budget`` after this charge.
    participant_spent_epsilon : float
        Composed epsilon of the participant's releases of the dataset after this charge.
    timestamp : float
        Unix time of the charge.
    """

    dataset: str
    participant: str
    request_id: str
    label: str
    sigma: float
    sensitivity: float
    epsilon: float
    spent_epsilon: float
    participant_spent_epsilon: float
    timestamp: float

    @property
    def mu(self) -> float:
        """``Delta / sigma``: the release is exactly ``mu``-GDP."""
        return self.sensitivity / self.sigma


@dataclass(frozen=True)
class Account:
    """What one budget holds: a dataset's, or one participant's quota on a dataset.

    Attributes
    ----------
    name : str
        Dataset name or participant id.
    budget_epsilon : float
        The budget, composed epsilon at ``delta``.
    spent_epsilon : float
        Composed epsilon of the releases charged to it.
    left_epsilon : float
        The largest epsilon (at ``delta``) one more release could still have; composition is
        not additive, so this is not ``budget - spent``.
    releases : int
        Releases charged to it.
    max_releases : int or None
        Count quota (participants only).
    delta : float
        ``delta_budget``, at which all of the above are stated.
    """

    name: str
    budget_epsilon: float
    spent_epsilon: float
    left_epsilon: float
    releases: int
    max_releases: int | None
    delta: float


class _Tally:
    """Sum of ``mu_i^2`` and count of the releases charged to one budget."""

    __slots__ = ("count", "mu_sq")

    def __init__(self) -> None:
        self.mu_sq = 0.0
        self.count = 0


class PrivacyLedger:
    """Dataset budgets and per-participant quotas for composed Gaussian releases.

    Parameters
    ----------
    path : str or os.PathLike
        JSON ledger file. Created on the first charge; an existing file is loaded and must carry
        the same dataset budget.
    epsilon_budget : float
        ``epsilon > 0`` every dataset may spend in total.
    delta_budget : float
        ``0 < delta < 1``; every composition is accounted at this delta.
    participants : sequence of str
        The participants that may be charged (the fair-share quota divides by their number).
    participant_epsilon_budget : float, optional
        Each participant's quota per dataset; default the fair share (module docstring).
    participant_max_releases : int
        Releases each participant may be charged for per dataset.
    head_path : str or os.PathLike, optional
        Where the ledger's head (its row count and last chain value) is kept, apart from the
        rows: in the analyst's store (:data:`LEDGER_HEAD`). With it, a ledger that is missing,
        shorter than the head or not the one the head saw is refused.
    read_only : bool
        Only read the ledger and its head (``analyst status`` beside the running analyst, which
        owns both files): the head is never brought up to date and :meth:`charge` is refused.

    Raises
    ------
    InvalidInputError
        Bad budget values.
    LedgerError
        Existing ledger unreadable, corrupt, recorded with a different dataset budget, its
        chain broken (a row edited, removed or inserted), or missing or shorter than its head.
    """

    def __init__(self, path: str | os.PathLike, epsilon_budget: float, delta_budget: float, *,
                 participants: Sequence[str], participant_epsilon_budget: float | None = None,
                 participant_max_releases: int = 1000,
                 head_path: str | os.PathLike | None = None, read_only: bool = False) -> None:
        self._path = Path(path)
        self._read_only = read_only
        self._head_path = None if head_path is None else Path(head_path)
        try:
            self.epsilon_budget, self.delta_budget = check_epsilon_delta(epsilon_budget,
                                                                         delta_budget)
        except InvalidInputError as err:
            raise InvalidInputError(f"bad privacy budget: {err}") from None
        self.participants = tuple(participants)
        if not self.participants:
            raise InvalidInputError("a privacy ledger needs at least one participant")
        self._mu_budget = mu_of_epsilon(self.epsilon_budget, self.delta_budget)
        if participant_epsilon_budget is None:
            self._mu_quota = self._mu_budget / math.sqrt(len(self.participants))
            self.participant_epsilon_budget = epsilon_of_mu(self._mu_quota, self.delta_budget)
        else:
            quota, _ = check_epsilon_delta(participant_epsilon_budget, self.delta_budget)
            self.participant_epsilon_budget = quota
            self._mu_quota = mu_of_epsilon(quota, self.delta_budget)
        if int(participant_max_releases) < 1:
            raise InvalidInputError(f"participant_max_releases must be >= 1, got "
                                    f"{participant_max_releases!r}")
        self.participant_max_releases = int(participant_max_releases)
        self._lock = threading.Lock()
        self._rows: dict[str, list[Charge]] = {}
        self._tallies: dict[tuple[str, str | None], _Tally] = {}
        self._by_request: dict[tuple[str, str, str], Charge] = {}
        self._order: list[tuple[str, Charge]] = []  # every charge, in charge order
        if self._path.exists():
            self._load()
        else:
            self._check_missing()

    @property
    def path(self) -> Path:
        """Location of the ledger file."""
        return self._path

    # ---- queries ---------------------------------------------------------------------------

    def _tally(self, dataset: str, participant: str | None) -> _Tally:
        return self._tallies.get((dataset, participant)) or _Tally()

    def _account(self, dataset: str, participant: str | None) -> Account:
        tally = self._tally(dataset, participant)
        mu_budget = self._mu_budget if participant is None else self._mu_quota
        left_sq = mu_budget * mu_budget - tally.mu_sq
        left = (epsilon_of_mu(math.sqrt(left_sq) * (1.0 - _LEFT_MARGIN), self.delta_budget)
                if left_sq > 0.0 else 0.0)
        if participant is not None and tally.count >= self.participant_max_releases:
            left = 0.0
        return Account(
            name=dataset if participant is None else participant,
            budget_epsilon=(self.epsilon_budget if participant is None
                            else self.participant_epsilon_budget),
            spent_epsilon=epsilon_of_mu(math.sqrt(tally.mu_sq), self.delta_budget),
            left_epsilon=left, releases=tally.count,
            max_releases=None if participant is None else self.participant_max_releases,
            delta=self.delta_budget)

    def account(self, dataset: str, participant: str | None = None) -> Account:
        """The dataset's budget, or (with ``participant``) that participant's quota on it."""
        dataset = _check_name(dataset, "dataset")
        with self._lock:
            return self._account(dataset, participant)

    def spent(self, dataset: str) -> tuple[float, float]:
        """``(epsilon, delta)`` spent by ``dataset``: composed epsilon at ``delta_budget``.

        ``(0.0, 0.0)`` when nothing was charged.
        """
        acc = self.account(dataset)
        return (acc.spent_epsilon, self.delta_budget) if acc.releases else (0.0, 0.0)

    def datasets(self) -> list[str]:
        """Datasets with at least one charge."""
        with self._lock:
            return sorted(self._rows)

    def charges(self, dataset: str | None = None) -> list[Charge]:
        """The recorded charges, of one dataset or of all, in charge order."""
        with self._lock:
            if dataset is not None:
                return list(self._rows.get(dataset, []))
            return [c for rows in self._rows.values() for c in rows]

    def charged(self, dataset: str, participant: str, request_id: str) -> Charge | None:
        """The charge of ``participant``'s request ``request_id`` on ``dataset``, if any."""
        with self._lock:
            return self._by_request.get((dataset, participant, request_id))

    # ---- charging --------------------------------------------------------------------------

    @staticmethod
    def _refusal(what: str, account: Account, after: float) -> str:
        return (f"{what} is exhausted: this release would take its spent epsilon="
                f"{account.spent_epsilon:.6g} to {after:.6g} > {account.budget_epsilon:.6g}; "
                f"left: epsilon={account.left_epsilon:.6g} for one more release")

    def charge(self, dataset: str, participant: str, calibration: Calibration, *,
               request_id: str, label: str) -> Charge:
        """Charge one Gaussian release to ``dataset`` and ``participant``'s quota, or refuse it.

        Parameters
        ----------
        dataset : str
            Dataset identifier.
        participant : str
            One of the ledger's participants.
        calibration : Calibration
            The noise the release will apply. It is charged :func:`charged_mu`: the epsilon it
            states, and at least the record-level cost of its noise when it names its regime;
            the row records ``sigma`` and the sensitivity that ``mu`` corresponds to.
        request_id : str
            The caller's id of this release; a second charge with the same
            ``(dataset, participant, request_id)`` is refused (ask :meth:`charged` first).
        label : str
            Description stored in the ledger.

        Returns
        -------
        Charge
            The recorded charge (persisted before it is returned).

        Raises
        ------
        BudgetExceededError
            The participant's count quota, its epsilon quota or the dataset budget would be
            exceeded (the message names which and what is left); nothing is recorded.
        InvalidInputError
            A calibration that does not validate (:func:`charged_mu`); nothing is recorded.
        PreconditionError
            The ledger was opened ``read_only``.
        """
        if self._read_only:
            raise PreconditionError(f"privacy ledger {self._path} was opened read-only")
        dataset = _check_name(dataset, "dataset")
        label = _check_name(label, "label")
        request_id = _check_name(request_id, "request_id")
        if participant not in self.participants:
            raise InvalidInputError(f"{participant!r} is not a participant of this ledger")
        mu = charged_mu(calibration)
        mu_sq = mu * mu
        with self._lock:
            key = (dataset, participant, request_id)
            if key in self._by_request:
                raise InvalidInputError(f"request {request_id!r} of {participant!r} on "
                                        f"{dataset!r} is already charged")
            mine, total = self._tally(dataset, participant), self._tally(dataset, None)
            alone = epsilon_of_mu(math.sqrt(mu_sq), self.delta_budget)
            quota = self._account(dataset, participant)
            if mine.count >= self.participant_max_releases:
                raise BudgetExceededError(
                    f"participant {participant!r}'s release quota on dataset {dataset!r} is "
                    f"exhausted: {mine.count} of {self.participant_max_releases} releases "
                    "charged ([privacy] participant_max_releases); left: none; nothing was "
                    "charged")
            refusals = []  # every budget this release would cross, the dataset's first
            if total.mu_sq + mu_sq > self._mu_budget ** 2:
                after = epsilon_of_mu(math.sqrt(total.mu_sq + mu_sq), self.delta_budget)
                refusals.append(self._refusal(f"the privacy budget of dataset {dataset!r}",
                                              self._account(dataset, None), after))
            if mine.mu_sq + mu_sq > self._mu_quota ** 2:
                after = epsilon_of_mu(math.sqrt(mine.mu_sq + mu_sq), self.delta_budget)
                refusals.append(self._refusal(f"participant {participant!r}'s quota on dataset "
                                              f"{dataset!r}", quota, after))
            if refusals:
                raise BudgetExceededError(
                    f"{'; and '.join(refusals)}. Release {label!r} (sigma="
                    f"{calibration.sigma:.6g}, sensitivity={calibration.sensitivity:.6g}; "
                    f"epsilon={calibration.epsilon:g} at delta={calibration.delta:g}) costs "
                    f"epsilon={alone:.6g} alone; all epsilons at delta={self.delta_budget:g}; "
                    "nothing was charged")
            charge = Charge(
                dataset=dataset, participant=participant, request_id=request_id, label=label,
                sigma=calibration.sigma, sensitivity=mu * calibration.sigma, epsilon=alone,
                spent_epsilon=epsilon_of_mu(math.sqrt(total.mu_sq + mu_sq), self.delta_budget),
                participant_spent_epsilon=epsilon_of_mu(math.sqrt(mine.mu_sq + mu_sq),
                                                        self.delta_budget),
                timestamp=time.time())
            rows = {k: list(v) for k, v in self._rows.items()}
            rows.setdefault(dataset, []).append(charge)
            self._write(rows)  # persist first; memory changes only if the write succeeded
            self._rows = rows
            self._add(charge)
        # Logged at the charge (not when the release is sent): a release abandoned by a
        # shutdown stays charged, and the operator's log must show it.
        log.info("privacy ledger: charged %s to dataset %s (participant %s, request %s): "
                 "epsilon %.4g alone, %.4g of %.4g spent", label, dataset, participant,
                 request_id, charge.epsilon, charge.spent_epsilon, self.epsilon_budget)
        return charge

    def _add(self, charge: Charge) -> None:
        self._order.append((charge.dataset, charge))
        for who in (charge.participant, None):
            tally = self._tallies.setdefault((charge.dataset, who), _Tally())
            tally.mu_sq += charge.mu ** 2
            tally.count += 1
        if charge.request_id:
            self._by_request[(charge.dataset, charge.participant, charge.request_id)] = charge

    # ---- persistence -----------------------------------------------------------------------

    def _write(self, rows: dict[str, list[Charge]]) -> None:
        """Persist ``rows`` (every charge so far, the new one last): each row chained to the
        one before (:func:`chain_link`), the ledger written atomically, then its head."""
        # rows only ever grows: what is beyond the rows charged so far is new, in that order
        order = self._order + [(k, c) for k, v in rows.items()
                               for c in v[len(self._rows.get(k, ())):]]
        link, out = genesis(self.epsilon_budget, self.delta_budget), {}
        for seq, (name, charge) in enumerate(order):
            link = chain_link(link, charge)
            out.setdefault(name, []).append(asdict(charge) | {"seq": seq, "chain": link})
        doc = {
            "version": LEDGER_VERSION,
            "epsilon_budget": self.epsilon_budget,
            "delta_budget": self.delta_budget,
            "accountant": "exact Gaussian composition: mu-GDP with mu = sqrt(sum of "
                          "(sensitivity / sigma)^2), epsilon at delta_budget (analytic)",
            "chain": "row k's chain = SHA-256(row k-1's chain || row k's fields as canonical "
                     "JSON); row 0 starts from SHA-256 of the budget; the head (rows, last "
                     "chain) is kept apart, in the analyst's store",
            "datasets": out,
        }
        self._path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write(self._path, json.dumps(doc, indent=1, sort_keys=True).encode("utf-8"))
        self._write_head(len(order), link)

    def _write_head(self, count: int, link: str) -> None:
        if self._head_path is not None:
            atomic_write(self._head_path, json.dumps(
                {"rows": count, "chain": link, "ledger": str(self._path)}).encode())

    def _read_head(self) -> tuple[int, str] | None:
        if self._head_path is None or not self._head_path.is_file():
            return None
        try:
            head = json.loads(read_under(self._head_path.parent, self._head_path, 1 << 16))
            return int(head["rows"]), str(head["chain"])
        except (OSError, ValueError, KeyError, TypeError) as err:
            raise LedgerError(f"the ledger head {self._head_path} is unreadable ({err}); "
                              "refusing to start with an unknown spent budget") from None

    def _check_against_head(self, links: list[str]) -> None:
        """Refuse a ledger shorter than the head has seen, or whose rows up to the head are
        not the ones it saw; a ledger one write ahead (a crash before the head's write) is
        taken and the head brought up to date."""
        head = self._read_head()
        if head is None:
            if links and not self._read_only:
                log.warning("privacy ledger %s: no head yet (a ledger of an earlier version); "
                            "its %d rows are taken and the head written", self._path,
                            len(links))
                self._write_head(len(links), links[-1])
            return
        count, link = head
        if len(links) < count:
            raise LedgerError(
                f"privacy ledger {self._path} has {len(links)} rows, but {count} charges were "
                f"recorded before (head {self._head_path}): rows were removed or an older copy "
                "was restored; refusing to start with less spent budget than was spent")
        if count and links[count - 1] != link:
            raise LedgerError(
                f"privacy ledger {self._path}: its first {count} rows are not the ones recorded "
                f"before (the chain differs from head {self._head_path}): the ledger was "
                "replaced or rewritten; refusing to start")
        if len(links) > count and not self._read_only:
            self._write_head(len(links), links[-1])

    def _check_missing(self) -> None:
        """Refuse a missing ledger once charges were recorded (a deleted file or an unmounted
        volume would otherwise read as budget 0)."""
        head = self._read_head()
        if head is not None and head[0] > 0:
            raise LedgerError(
                f"privacy ledger {self._path} is missing, but {head[0]} charges were recorded "
                f"(head {self._head_path}): restore the ledger (or mount its volume); refusing "
                "to start with a spent budget of 0")

    def _load(self) -> None:
        where = str(self._path)
        try:
            doc = json.loads(read_under(self._path.parent, self._path).decode("utf-8"))
        except (OSError, ValueError, RecursionError) as err:  # IntegrityError: a symlink
            raise LedgerError(f"privacy ledger {where} is unreadable or corrupt ({err}); "
                              "refusing to start with an unknown spent budget") from None
        try:
            version = doc["version"]
            if version not in (1, 2, LEDGER_VERSION):
                raise LedgerError(f"privacy ledger {where} has version {version!r}, expected "
                                  f"{LEDGER_VERSION}")
            eb, db = float(doc["epsilon_budget"]), float(doc["delta_budget"])
            raw = [(name, r) for name, entries in doc["datasets"].items() for r in entries]
            if version == LEDGER_VERSION:
                raw.sort(key=lambda item: int(item[1]["seq"]))
            rows = [(name, _row(r, name, version), r) for name, r in raw]
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
        links, link = [], genesis(eb, db)
        for seq, (name, charge, r) in enumerate(rows):
            link = chain_link(link, charge)
            if version == LEDGER_VERSION and (r.get("seq") != seq or r.get("chain") != link):
                raise LedgerError(
                    f"privacy ledger {where}: row {seq} (dataset {name!r}, participant "
                    f"{charge.participant!r}, request {charge.request_id!r}) does not continue "
                    "the chain of the rows before it: a row was edited, removed or inserted; "
                    "refusing to start")
            links.append(link)
        if version != LEDGER_VERSION and self._read_head() is not None:
            raise LedgerError(f"privacy ledger {where} has version {version} (no chain) but the "
                              f"store keeps the head of a chained ledger ({self._head_path}): "
                              "it was replaced by an older file; refusing to start")
        self._check_against_head(links)
        self._rows = {}
        for name, charge, _ in rows:
            self._rows.setdefault(name, []).append(charge)
            self._add(charge)


def genesis(epsilon_budget: float, delta_budget: float) -> str:
    """The chain value before row 0: SHA-256 of the ledger's budget (hex)."""
    return hashlib.sha256(json.dumps(["noisyanchor/v1/privacy-ledger", epsilon_budget,
                                      delta_budget]).encode()).hexdigest()


def chain_link(previous: str, charge: Charge) -> str:
    """Row ``k``'s chain value: SHA-256 of row ``k-1``'s (hex) and row ``k``'s fields as
    canonical JSON (hex). Any edit, removal, insertion or reordering of rows changes every
    value after it."""
    fields_json = json.dumps(asdict(charge), sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(bytes.fromhex(previous) + fields_json.encode()).hexdigest()


_CHARGE_FIELDS = {f.name for f in fields(Charge)}


def _row(raw: dict, dataset: str, version: int) -> Charge:
    """One ledger row, validated; version-1 rows are attributed to the end of their label,
    version-3 rows carry their place in the chain besides the charge's fields."""
    if version == 1:
        raw = {"participant": str(raw["label"]).rsplit("/", 1)[-1], "request_id": "",
               "participant_spent_epsilon": 0.0, **raw}
        raw = {k: v for k, v in raw.items() if k in _CHARGE_FIELDS}
    elif version == LEDGER_VERSION:  # the chain's fields are checked by the caller
        raw = {k: v for k, v in raw.items() if k not in ("seq", "chain")}
    charge = Charge(**raw)
    ok = (charge.dataset == dataset and all(isinstance(getattr(charge, k), str) for k in
                                            ("participant", "request_id", "label"))
          and math.isfinite(charge.sigma) and charge.sigma > 0
          and math.isfinite(charge.sensitivity) and charge.sensitivity > 0)
    if not ok:
        raise ValueError(f"invalid charge {charge}")
    return charge


def _check_name(value: str, name: str) -> str:
    if not isinstance(value, str) or not value:
        raise InvalidInputError(f"{name} must be a non-empty string, got {value!r}")
    return value

"""What a ScoreShield release publishes and whom it protects: its regime, and the sensitivity
that follows from it.

A :class:`Regime` names the released statistic (``kind``), the adjacency the guarantee is about
and the public parameters (``n``, a public bound on records per identity, a public margin, an
output-space radius). Its :attr:`Regime.sensitivity` is derived from them by the formula of the
paper, never supplied by a caller, and :attr:`Regime.record_sensitivity` is the sensitivity of
the same statistic under record replacement, which a record-level ledger charges. A release
derives its own regime from its input and refuses a calibration made for another one, so the
noise it applies always delivers the guarantee it reports.

Formulas (``r`` is the range one entry can move: 2 for cosines in ``[-1, 1]``, ``1 - a`` for
scores clipped to a public margin ``[a, 1]`` before the noise):

============  ==========  =============================================  =====================
kind          adjacency   ``Delta`` (L2 / Frobenius)                     paper
============  ==========  =============================================  =====================
``scores``    record      ``r``                                          Sec. 3.1; App. H.1
``scores``    identity    ``r sqrt(k)``                                  App. C.3, eq. (32)
``row``       record      ``r sqrt(n - 1)``                              App. D, eq. (95)
``row``       identity    ``r sqrt(n - 1)`` (the row has n - 1 entries)  App. D; App. C.3
``gram``      record      ``2 sqrt(2 (n - 1))``                          Sec. 3.2; App. J.1
``gram``      identity    ``2 sqrt(2 k (n - k) + min(k (k - 1), k^2/2))``  derived (App. J.1)
``gram``      output      ``rho`` (NOT a record-level guarantee)         Def. 2.3; App. E
============  ==========  =============================================  =====================

Identity adjacency (paper eq. (28)): the records of one identity (person) may all be replaced;
``k`` is a public bound on the records of any identity, which a release enforces on the identity
column it is given. The number of records of each identity is treated as public (replacement,
not addition or removal), as ``n`` is.

References
----------
SPEC.md section 5; ScoreShield paper Sections 3.1-3.2 and Appendices C.3, D, E, H.1, J.1.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from noisyanchor.common.errors import InvalidInputError
from noisyanchor.common.scoreshield.sensitivity import (
    gram_identity_sensitivity,
    gram_output_sensitivity,
    gram_record_sensitivity,
    identity_rows_sensitivity,
    margin_entry_range,
    record_row_sensitivity,
)
from noisyanchor.common.validation import check_count

#: Released statistics: a query's score vector (regime (i)), one record's row of the Gram
#: (regime (iii)), the whole Gram (regime (ii)).
KINDS = ("scores", "row", "gram")

#: Adjacency relations a guarantee can be about.
ADJACENCIES = ("record", "identity", "output")

_PAPER = {
    ("scores", "record"): "ScoreShield paper Section 3.1 (sensitivity 2), App. H.1 eq. (339) "
                          "(public margin)",
    ("scores", "identity"): "ScoreShield paper App. C.3, eqs. (28) and (32)",
    ("row", "record"): "ScoreShield paper App. D (regime (iii)), eqs. (91)-(95)",
    ("row", "identity"): "ScoreShield paper App. D, eq. (95), with App. C.3 eq. (28)",
    ("gram", "record"): "ScoreShield paper Section 3.2 and App. J.1",
    ("gram", "identity"): "derived here as in App. J.1 (common/scoreshield/sensitivity.py)",
    ("gram", "output"): "ScoreShield paper Definition 2.3 and App. E",
}


@dataclass(frozen=True)
class Regime:
    """A release's statistic, adjacency and public parameters (module docstring).

    Attributes
    ----------
    kind : {"scores", "row", "gram"}
        What is released.
    n : int
        Records of the collection (``scores``: coordinates of the vector; ``row`` and ``gram``:
        ``n`` records, ``n >= 2``).
    adjacency : {"record", "identity", "output"}
        ``output`` only for ``gram``.
    max_records_per_identity : int
        Public bound ``k >= 1`` on the records of one identity (identity adjacency; 1 otherwise).
    margin : float or None
        Public margin ``a`` in ``[-1, 1)``: scores are clipped to ``[a, 1]`` before the noise
        (``scores`` and ``row`` only).
    radius : float or None
        Output-space adjacency radius ``rho > 0`` (``gram``/``output`` only).
    """

    kind: str
    n: int
    adjacency: str = "record"
    max_records_per_identity: int = 1
    margin: float | None = None
    radius: float | None = None

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise InvalidInputError(f"regime kind must be one of {KINDS}, got {self.kind!r}")
        if self.adjacency not in ADJACENCIES:
            raise InvalidInputError(f"adjacency must be one of {ADJACENCIES}, got "
                                    f"{self.adjacency!r}")
        check_count(self.n, "n", minimum=1 if self.kind == "scores" else 2)
        k = check_count(self.max_records_per_identity, "max_records_per_identity", minimum=1)
        if self.adjacency != "identity" and k != 1:
            raise InvalidInputError("max_records_per_identity is a bound of identity adjacency; "
                                    f"adjacency is {self.adjacency!r}")
        if self.margin is not None:
            if self.kind == "gram":
                raise InvalidInputError("a public margin clips score vectors and rows; a Gram "
                                        "release has none")
            margin_entry_range(self.margin)  # validates a in [-1, 1)
        if self.adjacency == "output":
            if self.kind != "gram":
                raise InvalidInputError("output-space adjacency is defined for Gram releases "
                                        "only (paper Definition 2.3)")
            if self.radius is None:
                raise InvalidInputError("output-space adjacency needs its radius rho")
            gram_output_sensitivity(self.radius)
        elif self.radius is not None:
            raise InvalidInputError(f"a radius belongs to output-space adjacency, not "
                                    f"{self.adjacency!r}")

    @property
    def entry_range(self) -> float:
        """``r``: how far one released entry can move when its record changes."""
        return 2.0 if self.margin is None else margin_entry_range(self.margin)

    @property
    def sensitivity(self) -> float:
        """``Delta`` under :attr:`adjacency` (module docstring's table)."""
        r = self.entry_range
        if self.kind == "scores":
            if self.adjacency == "identity":
                return r / 2.0 * identity_rows_sensitivity(self.max_records_per_identity)
            return r
        if self.kind == "row":
            return r / 2.0 * record_row_sensitivity(self.n)
        if self.adjacency == "output":
            assert self.radius is not None
            return gram_output_sensitivity(self.radius)
        if self.adjacency == "identity":
            return gram_identity_sensitivity(self.n, self.max_records_per_identity)
        return gram_record_sensitivity(self.n)

    @property
    def record_sensitivity(self) -> float:
        """``Delta`` of the same statistic under record replacement: what the noise costs a
        record-level budget whatever adjacency the release states (a record is part of an
        identity; an output-space radius says nothing about records)."""
        return Regime(self.kind, self.n, margin=self.margin).sensitivity

    @property
    def name(self) -> str:
        """Short label, e.g. ``"gram/identity(k=3)"`` or ``"scores/record/margin=0.2"``."""
        adj = self.adjacency
        if adj == "identity":
            adj = f"identity(k={self.max_records_per_identity})"
        elif adj == "output":
            adj = f"output(rho={self.radius:g})"
        extra = "" if self.margin is None else f"/margin={self.margin:g}"
        return f"{self.kind}/{adj}{extra}"

    @property
    def formula(self) -> str:
        """The sensitivity as a formula in the public parameters."""
        r = "2" if self.margin is None else f"(1 - a) with a = {self.margin:g}"
        if self.kind == "scores":
            return f"Delta = {r}" + (" * sqrt(k)" if self.adjacency == "identity" else "")
        if self.kind == "row":
            return f"Delta = {r} * sqrt(n - 1)"
        if self.adjacency == "output":
            return "Delta = rho"
        if self.adjacency == "identity":
            return "Delta_F = 2 sqrt(2 k (n - k) + min(k (k - 1), k^2 / 2))"
        return "Delta_F = 2 sqrt(2 (n - 1))"

    @property
    def reference(self) -> str:
        """Where the formula comes from."""
        return _PAPER[(self.kind, self.adjacency)]

    def guarantee(self) -> str:
        """What (epsilon, delta)-DP means for this regime, in one sentence."""
        what = {"scores": "a query's score vector", "row": f"record row (n = {self.n})",
                "gram": f"the {self.n} x {self.n} Gram"}[self.kind]
        margin = ("" if self.margin is None else
                  f", scores clipped to the public margin [{self.margin:g}, 1] before the noise")
        if self.adjacency == "record":
            who = "replacing any one record"
        elif self.adjacency == "identity":
            who = (f"replacing all records of any one identity (public bound: at most "
                   f"{self.max_records_per_identity} records per identity, enforced)")
        else:
            who = (f"Gram matrices within Frobenius distance {self.radius:g} (output space; NOT "
                   "a record-level guarantee)")
        return f"{what}{margin}: (epsilon, delta)-DP for {who}; {self.formula} = " \
               f"{self.sensitivity:.6g} ({self.reference})"


def identity_regime_bound(labels: object, max_records_per_identity: int) -> int:
    """Check that no identity in ``labels`` has more than ``k`` records; return ``k``.

    Raises
    ------
    InvalidInputError
        Some identity exceeds the public bound (which identity and how many), or the labels
        are empty.
    """
    import numpy as np

    k = check_count(max_records_per_identity, "max_records_per_identity", minimum=1)
    lab = np.asarray(labels)
    if lab.ndim != 1 or lab.size == 0:
        raise InvalidInputError(f"identities must be one label per record, got shape {lab.shape}")
    values, counts = np.unique(lab, return_counts=True)
    worst = int(np.argmax(counts))
    if counts[worst] > k:
        raise InvalidInputError(
            f"identity {values[worst].item()!r} has {int(counts[worst])} records, above the "
            f"public bound max_records_per_identity = {k}: the identity-level sensitivity "
            "would not hold; raise the bound (more noise) or keep at most k records per identity")
    return k


def check_margin(margin: float | None) -> float | None:
    """``margin`` as a float in ``[-1, 1)``, or None."""
    if margin is None:
        return None
    margin_entry_range(margin)
    return float(margin)


def useful_sigma(regime: Regime) -> float:
    """Largest noise at which a released score vector or row can still rank.

    The largest of ``m`` draws of ``N(0, sigma^2)`` is about ``sigma sqrt(2 ln m)``; once that
    reaches half the range of a score (1 for ``[-1, 1]``, ``(1 - a)/2`` with a margin), the noise
    alone can lift any record to the top, so the ranking says more about the noise than about
    the query. ``m`` is the number of noisy coordinates (``n``, or ``n - 1`` for a row). Public:
    it depends on the regime only.
    """
    if regime.kind == "gram":
        raise InvalidInputError("useful_sigma is for score vectors and rows; a Gram release "
                                "states its data-free baseline (common.scoreshield.baseline)")
    m = max(regime.n - (regime.kind == "row"), 2)
    return regime.entry_range / 2.0 / math.sqrt(2.0 * math.log(m))

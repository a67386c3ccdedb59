"""A participant's test that the anchor it is about to use is a draw of the protocol's
distribution, so that a dealer cannot make it upload a crafted one (issue 33, item 5).

The protocol's anchor (SPEC.md section 1) is the orthonormal frame of ``H_r Omega``: ``1^T A = 0``,
``A^T A = I_d``, and its column space is a Haar-random ``d``-dimensional subspace of ``1^perp``
(``Omega`` Gaussian). Two tests, each named in the refusal:

* ``structure``: ``||1^T A||`` and ``||A^T A - I_d||`` within rounding (:data:`STRUCTURE_TOL`).
  Deterministic: the protocol's construction never fails it. It refuses a scaled anchor (the
  dealer's lever against anchor noise: with ``A^T A = s^2 I`` the known-anchor estimate's error
  is ``v / s``) and the dealer's raw records.
* ``leverage``: the largest row leverage ``max_k ||A_k||^2``. Under the protocol,
  ``||A_k||^2 = (r - 1)/r * beta_k`` with ``beta_k ~ Beta(d/2, (r - 1 - d)/2)`` (the squared
  projection of the unit vector ``e_k - 1/r`` onto a uniform ``d``-subspace of the
  ``(r - 1)``-dimensional ``1^perp``), so by the union bound over the ``r`` rows
  ``P(max_k ||A_k||^2 > t) <= r * BetaSF(t r/(r - 1)) = alpha``: the test's false-refusal rate is
  at most ``alpha`` (:data:`FALSE_REFUSAL_RATE`). It refuses an anchor concentrated on a few rows
  (a sparse or coordinate anchor).

What no test can refuse, and needs not: an orthonormal anchor whose column space is drawn as the
protocol's (e.g. the dealer's own Gaussian-like records, centred and orthonormalised). For such
an anchor every attack's error has the same distribution as for the protocol's own anchor (the
anchor noise ``W_i`` is rotation-invariant), so it gives the attacker nothing.

References: SPEC.md section 1; noisy-anchor GDP paper, Section 2.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy import stats

from noisyanchor.common.errors import IntegrityError
from noisyanchor.common.validation import as_matrix, check_anchor_rows

#: Largest ``||1^T A||`` and ``||A^T A - I||_F`` the structure test allows (rounding only).
STRUCTURE_TOL = 1e-8
#: Bound on the leverage test's false-refusal rate for an anchor of the protocol.
FALSE_REFUSAL_RATE = 1e-6


@dataclass(frozen=True)
class AnchorTest:
    """The outcome of :func:`run_anchor_tests`.

    Attributes
    ----------
    passed : bool
    failed_test : str or None
        ``structure`` or ``leverage`` (the first test failed), None when passed.
    column_sum : float
        ``||1^T A||``.
    gram_error : float
        ``||A^T A - I_d||_F``.
    max_leverage : float
        ``max_k ||A_k||^2``.
    leverage_bound : float
        ``t``: the largest value the leverage test allows at ``alpha``.
    reason : str
        Why it failed (empty when passed).
    """

    passed: bool
    failed_test: str | None
    column_sum: float
    gram_error: float
    max_leverage: float
    leverage_bound: float
    reason: str = ""


def leverage_bound(r: int, d: int, alpha: float = FALSE_REFUSAL_RATE) -> float:
    """``t`` with ``r * BetaSF(t r/(r - 1); d/2, (r - 1 - d)/2) = alpha`` (module docstring);
    ``(r - 1)/r`` when ``r = d + 1`` (the frame is then all of ``1^perp`` and every row has that
    leverage: nothing to test)."""
    if r - 1 - d <= 0:
        return (r - 1) / r + STRUCTURE_TOL
    return float((r - 1) / r * stats.beta.isf(alpha / r, d / 2, (r - 1 - d) / 2))


def run_anchor_tests(anchor: np.ndarray, alpha: float = FALSE_REFUSAL_RATE) -> AnchorTest:
    """Both tests of the module docstring on ``A`` (``r x d``)."""
    a = as_matrix(anchor, "anchor")
    r, d = a.shape
    check_anchor_rows(r, d, "the anchor needs")
    column_sum = float(np.linalg.norm(a.sum(axis=0)))
    gram_error = float(np.linalg.norm(a.T @ a - np.eye(d)))
    lev = float(np.max(np.sum(a * a, axis=1)))
    bound = leverage_bound(r, d, alpha)
    if max(column_sum, gram_error) > STRUCTURE_TOL:
        return AnchorTest(False, "structure", column_sum, gram_error, lev, bound,
                          f"the anchor is not centred with orthonormal columns (||1^T A|| = "
                          f"{column_sum:.3g}, ||A^T A - I|| = {gram_error:.3g}, rounding allows "
                          f"{STRUCTURE_TOL:g}): a scaled or raw anchor")
    if lev > bound:
        return AnchorTest(False, "leverage", column_sum, gram_error, lev, bound,
                          f"the anchor's largest row leverage {lev:.3g} exceeds {bound:.3g}, "
                          f"which an anchor of the protocol exceeds with probability at most "
                          f"{alpha:g}: an anchor concentrated on a few rows")
    return AnchorTest(True, None, column_sum, gram_error, lev, bound)


def check_protocol_anchor(anchor: np.ndarray, alpha: float = FALSE_REFUSAL_RATE) -> np.ndarray:
    """``anchor`` unchanged when it passes :func:`run_anchor_tests`, else :class:`IntegrityError`
    naming the failed test (a participant refuses to upload with it)."""
    res = run_anchor_tests(anchor, alpha)
    if not res.passed:
        raise IntegrityError(f"anchor refused by the {res.failed_test} test: {res.reason}")
    return anchor

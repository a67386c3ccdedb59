"""Global L2 / Frobenius sensitivities of the ScoreShield releases, one named function each.

Every function states the adjacency relation its bound holds for. Feed the result to
:func:`common.scoreshield.calibrate_sigma`. Unit-norm embeddings (``||e_i|| = 1``) and a public
unit-norm query are assumed throughout, as in the paper.

References
----------
SPEC.md section 5; ScoreShield paper Section 3.1 ("Sensitivity", regime (i)), Section 3.2 and
Appendix J.1 (regime (ii)), Definition 2.3 (output-space adjacency), Appendix C.3
("Identity-Adjacency", eqs. (28)-(32)), Appendix D (regime (iii), one record's row), Appendix H.1
(public margin) and Appendix K.1 ("Privacy parameters"). :class:`common.scoreshield.regimes.
Regime` picks the right one for a release.
"""

from __future__ import annotations

import math

from noisyanchor.common.errors import InvalidInputError
from noisyanchor.common.validation import check_count, check_positive


def score_vector_sensitivity() -> float:
    """``Delta_2 = 2`` for the score vector ``s = E q`` under record replacement.

    Replacing one row ``e_k`` by ``e_k'`` changes only ``s_k = <e_k, q>``, by at most
    ``|<e_k - e_k', q>| <= ||e_k - e_k'|| ||q|| <= 2`` (Cauchy-Schwarz; paper Section 3.1).
    """
    return 2.0


def gram_record_sensitivity(n: int) -> float:
    """``Delta_F = 2 sqrt(2 (n - 1))`` for the Gram ``S = E E^T`` under record replacement.

    Replacing row ``k`` changes row and column ``k`` of ``S`` except the diagonal (which stays 1):
    ``2 (n - 1)`` entries, each by at most 2 (paper Section 3.2, Appendix J.1, eq. (348)).

    Parameters
    ----------
    n : int
        Number of records ``n >= 2``.
    """
    n = check_count(n, "n", minimum=2)
    return 2.0 * math.sqrt(2.0 * (n - 1))


def gram_output_sensitivity(radius: float) -> float:
    """``Delta_F = rho`` for the Gram under output-space (Gram-matrix) adjacency at radius ``rho``.

    Two collections are adjacent when ``||S - S'||_F <= rho`` (paper Definition 2.3); the
    sensitivity is the radius by definition. This is a guarantee about Gram matrices, not records:
    it covers one record replacement only if ``rho >= 2 sqrt(2 (n - 1))`` (paper footnote 1).

    Parameters
    ----------
    radius : float
        Adjacency radius ``rho > 0``.
    """
    return check_positive(radius, "radius")


def per_entry_sensitivity() -> float:
    """``Delta = 2``: the range of ONE cosine entry. NOT a record-level DP calibration.

    This is the paper's experimental calibration for Gram releases (Appendix K.1: noise "calibrated
    from an l2-sensitivity bound for a single entry"). Noise at this scale protects a change of a
    single entry ``S_ij`` of the Gram; replacing one record changes ``2 (n - 1)`` entries, so a
    Gram released with this calibration is NOT (epsilon, delta)-DP with respect to record
    replacement: its record-level guarantee is that of noise multiplier
    ``sigma / (2 sqrt(2 (n - 1)))``, e.g. epsilon = 1 per entry is epsilon ~ 122 per record at
    n = 1000, delta = 1e-5 (:func:`common.scoreshield.gaussian_epsilon`). Report results under this
    calibration under their own name.
    For the score vector of regime (i) the record-level sensitivity happens to equal this value
    (one coordinate changes); use :func:`score_vector_sensitivity` there.
    """
    return 2.0


def identity_centroid_sensitivity() -> float:
    """``Delta_2 = 2`` for a score vector over per-identity unit centroids, identity adjacency.

    Identity adjacency (paper eq. (28)): all images of at most one identity may change. If each
    identity ``k`` is first aggregated to one unit-norm centroid ``c_k = sum_{i in I_k} e_i /
    ||sum_{i in I_k} e_i||`` (eq. (29)) and the released vector is ``(<c_k, q>)_k`` (eq. (30)),
    only one coordinate moves, by at most 2 (eq. (31)): identity-level privacy at the cost of
    record-level privacy, with the same constant. The centroid aggregation must happen before the
    noise is added.
    """
    return 2.0


def identity_rows_sensitivity(max_images_per_identity: int) -> float:
    """``Delta_2 = 2 sqrt(m)`` for the per-image score vector under identity adjacency.

    Publishing one coordinate per image (the ``n``-vector ``E q``) lets up to ``m`` coordinates
    change when one identity's images change (paper eq. (32)), each by at most 2. ``m`` must be a
    public upper bound on the number of images of any single identity, and the gallery size and
    row-to-identity layout are treated as public (replacement of an identity's images, not a
    change in their number).

    Parameters
    ----------
    max_images_per_identity : int
        Public bound ``m = max_k |I_k| >= 1``.
    """
    m = check_count(max_images_per_identity, "max_images_per_identity", minimum=1)
    return 2.0 * math.sqrt(m)


def gram_identity_sensitivity(n: int, max_images_per_identity: int) -> float:
    """``Delta_F = 2 sqrt(2 m (n - m) + min(m (m - 1), m^2 / 2))``: per-image Gram, identity
    adjacency.

    Not in the paper; derived here as in Appendix J.1. When the ``m`` rows of one identity
    change, the diagonal stays 1 and the change splits into the cross block (``2 m (n - m)``
    entries, each moving by at most 2: ``8 m (n - m)``) and the identity's own ``m x m`` block
    ``B -> B'``. Entrywise that block moves by at most ``4 m (m - 1)``; as both blocks are
    correlation matrices, also ``||B - B'||_F^2 = ||B||_F^2 + ||B'||_F^2 - 2 <B, B'> <= 2 m^2``
    (``<B, B'> >= 0`` for PSD matrices, ``||B||_F^2 <= m^2``). So ``||S - S'||_F^2 <= 8 m (n - m)
    + min(4 m (m - 1), 2 m^2)``. The cross part alone is attained (all rows equal to ``u``, the
    identity's turned to ``-u``), so the bound is tight to a factor ``1 + m / (4 (n - m))``.
    For ``m = 1`` it is :func:`gram_record_sensitivity`.

    Parameters
    ----------
    n : int
        Number of images ``n >= 2``.
    max_images_per_identity : int
        Public bound ``1 <= m`` (values above ``n`` count as ``n``).
    """
    n = check_count(n, "n", minimum=2)
    m = check_count(max_images_per_identity, "max_images_per_identity", minimum=1)
    m = min(m, n)
    return 2.0 * math.sqrt(2 * m * (n - m) + min(m * (m - 1), m * m / 2.0))


def record_row_sensitivity(n: int) -> float:
    """``Delta_2 = 2 sqrt(n - 1)`` for one record's row ``(<e_k, e_j>)_j`` of the Gram.

    Regime (iii) of the paper (Appendix D, eqs. (91)-(95)): the reference record ``k`` is a
    private record, so replacing it moves all ``n - 1`` off-diagonal entries of its row, each by
    at most 2 (the diagonal stays 1); replacing another record moves one entry. Tight. The same
    bound holds under identity adjacency (the row has only ``n - 1`` entries that can move).
    Releasing such a row through the score-vector release (sensitivity 2) would under-noise it
    by ``sqrt(n - 1)``.

    Parameters
    ----------
    n : int
        Records ``n >= 2``.
    """
    n = check_count(n, "n", minimum=2)
    return 2.0 * math.sqrt(n - 1)


def margin_entry_range(margin: float) -> float:
    """``1 - a``: how far one score can move when it is clipped to a public margin ``[a, 1]``.

    ScoreShield paper Appendix H.1, eqs. (339)-(340): if every released score lies in ``[a, 1]``
    the score-vector sensitivity is ``1 - a`` instead of 2. The paper uses it as a utility model
    only, "unless the margin restriction is enforced as a public precondition"; the releases
    here enforce it by clipping the clean scores to ``[a, 1]`` before the noise, which is a
    fixed, data-independent map of each score, so the bound holds for every collection.

    Parameters
    ----------
    margin : float
        ``a`` in ``[-1, 1)``.
    """
    try:
        a = float(margin)
    except (TypeError, ValueError):
        raise InvalidInputError(f"margin must be a number in [-1, 1), got {margin!r}") from None
    if not (math.isfinite(a) and -1.0 <= a < 1.0):
        raise InvalidInputError(f"margin must be a number in [-1, 1), got {margin!r}")
    return 1.0 - a

"""Screening of the uploads before alignment: a site whose records lie in another scale or unit.

GDP keeps the distances between one site's records: ``Y_i = X_i F O_i + 1 Psi_i^T`` (SPEC.md
section 1) gives ``||y_k - y_l|| = ||(x_k - x_l) F||``, so the analyst sees the spread of every
site's records without seeing any record. Four checks use only that:

- **box** (a typed schema whose every column is bounded): each encoded record lies in a public
  box, so no two records of a site are farther apart than its diagonal ``D`` (times ``||F||_2``
  under a projection, plus the private-data noise ``sigma`` where the method adds it).
- **spread** (no bounded schema): each site's robust spread (median distance of its records to
  their mean) against the other sites', with a generous ratio so honest non-iid sites pass.
- **direction** (methods with anchors, or one common key; at least three sites): each site's
  anchor is aligned provisionally onto the reference's (orthogonal Procrustes: the anchor ``A``
  is the same at every site), its records are brought into that common frame, and its variance
  along every direction is compared with each other site's (the generalized eigenvalues of the
  two covariances). A column in a unit a thousand times too large or too small shows as one
  direction whose variance is a million times off, which the overall spread barely shows.
- **anchor**: ``A`` has orthonormal columns (``A^T A = I``), so every singular value of a site's
  centered anchor representation ``B_i - 1 b_i^T = A O_i + v H W_i`` lies within
  ``v (sqrt(r) + sqrt(d) + t)`` of 1 (Weyl), whatever its map.

A check whose bound needs a noise level the method adds but the federation does not declare is
skipped, and said so. Each finding names the site, the check, the measured value, its bound and a
reason in words.

References: SPEC.md sections 1-2; issue 29, item 4.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass

import numpy as np

from noisyanchor.common.chunks import centered_gram, column_mean, row_norms
from noisyanchor.common.linalg import polar_factor
from noisyanchor.common.methods import Method
from noisyanchor.common.tabular.columns import BooleanColumn, CategoricalColumn, NumericColumn
from noisyanchor.common.tabular.ranges import FAR_SCALES, RANGE_WIDTHS
from noisyanchor.common.tabular.schema import TabularSchema

#: A site's spread may differ from the other sites' by this factor before it is named.
SPREAD_RATIO = 5.0

#: A site's variance along one direction may differ from another site's by this factor beyond
#: the spread two samples of one population show (measured on digits and breast-cancer, 3 and
#: 10 sites, iid and label-skewed: honest sites up to 8.6, a column x0.001 from 10.6 up).
DIRECTION_RATIO = 10.0

#: Variance added to every direction before the ratios (relative to the mean variance per
#: direction): a direction nearly constant everywhere (a blank pixel) compares as equal.
DIRECTION_FLOOR = 1e-2

#: Probability that an honest site's noise pushes a bound out, per check (Gaussian tails).
FALSE_ALARM = 1e-9

#: Fewest records per working dimension a site needs for its covariance in the direction check.
RECORDS_PER_DIM = 1.5

#: Fewest records a site needs for its spread to be compared with the others'.
MIN_SPREAD_RECORDS = 10

#: Other sites each site is compared with at most in the direction check (the next ones in
#: order): p (p - 1) generalized eigenproblems of size h would dominate at many sites.
MAX_PEERS = 10


@dataclass(frozen=True)
class Finding:
    """One site outside one check's bound.

    Attributes
    ----------
    site : str
    check : str
        ``box``, ``spread``, ``direction`` or ``anchor``.
    measured, bound : float
        The value measured on the site's upload and the bound it exceeds.
    reason : str
        What it means, in words, and what the site can check.
    """

    site: str
    check: str
    measured: float
    bound: float
    reason: str


@dataclass(frozen=True)
class Screening:
    """What the checks found: findings, the checks run and the checks skipped with why."""

    findings: tuple[Finding, ...]
    ran: tuple[str, ...]
    skipped: dict[str, str]

    @property
    def flagged(self) -> tuple[str, ...]:
        """The sites named by at least one finding, in first-finding order."""
        return tuple(dict.fromkeys(f.site for f in self.findings))

    def reasons(self, site: str) -> list[str]:
        """The reasons given for ``site``."""
        return [f.reason for f in self.findings if f.site == site]

    def to_json(self) -> dict:
        """``{"findings": [...], "flagged": [...], "checks": [...], "skipped": {...}}``."""
        return {"findings": [asdict(f) for f in self.findings], "flagged": list(self.flagged),
                "checks": list(self.ran), "skipped": dict(self.skipped)}


def box_diameter(schema: TabularSchema) -> tuple[float | None, str]:
    """Diagonal ``D`` of the box every honest encoded record of ``schema`` lies in.

    A ``min``/``max`` column encodes to ``[0, 1]``, widened by :data:`~common.tabular.ranges.
    RANGE_WIDTHS` on each side (values may truly lie outside a published range; further out
    they are what the site's own check calls far); a ``center``/``scale`` column to
    ``[-FAR_SCALES, FAR_SCALES]``; a categorical column is one-hot (two records differ by at most
    ``sqrt 2``); a boolean lies in ``[0, 1]``.

    Returns
    -------
    D : float or None
        None when a column has no public bound (an unscaled numeric column).
    why : str
        Which column has no bound (empty when ``D`` is given).
    """
    square = 0.0
    for column in schema.columns:
        if isinstance(column, NumericColumn):
            if column.scale is not None:
                square += (2 * FAR_SCALES) ** 2
            elif column.min is not None:
                square += (1 + 2 * RANGE_WIDTHS) ** 2
            else:
                return None, f"column {column.name!r} has no public range (min/max or " \
                             "center/scale)"
        elif isinstance(column, CategoricalColumn):
            square += 2.0
        elif isinstance(column, BooleanColumn):
            square += 1.0
    return math.sqrt(square), ""


def _tail(n: int) -> float:
    """``t`` with ``P(any of n Gaussian norms exceeds its mean by t) <= FALSE_ALARM``."""
    return math.sqrt(2 * math.log(max(n, 1) / FALSE_ALARM))


def box_check(sites: Sequence[str], data: Sequence[np.ndarray], diameter: float, *,
              projection_norm: float = 1.0, sigma: float = 0.0) -> list[Finding]:
    """Sites two of whose records lie farther apart than the box allows.

    For each site the record ``k*`` farthest from the mean is taken and its largest distance to
    any record of the site measured (``O(n d)``; at least ``||y_k* - mean||``, so a record far
    out of the box is always seen). Honest: at most ``D ||F||_2 + 2 sigma (sqrt(h) + t)``.

    Parameters
    ----------
    sites : sequence of str
    data : sequence of (n_i, h) ndarrays
        ``Y_i``.
    diameter : float
        ``D`` (:func:`box_diameter`).
    projection_norm : float
        ``||F||_2`` (1 without a projection).
    sigma : float
        Private-data noise of the method (0 when it adds none).
    """
    findings = []
    for site, y in zip(sites, data, strict=True):
        if len(y) < 2:
            continue
        h = y.shape[1]
        # 1e-9 relative: a record exactly at a corner must pass after rounding of the map.
        bound = diameter * projection_norm * (1 + 1e-9) + 2 * sigma * (math.sqrt(h)
                                                                        + _tail(len(y)))
        far = np.array(y[np.argmax(row_norms(y, column_mean(y)))])  # in chunks: y may be mapped
        measured = float(row_norms(y, far).max())
        if measured > bound:
            findings.append(Finding(
                site, "box", measured, bound,
                f"two of {site}'s records lie {measured:.4g} apart, but every record encoded "
                f"with the federation's public ranges lies in a box of diagonal {bound:.4g}: "
                "some column is in another unit or scale (x1000 too large?), or holds "
                "mistyped values; 'noisyanchor schema check' on the site's table names it"))
    return findings


def spread_check(sites: Sequence[str], data: Sequence[np.ndarray], *,
                 ratio: float = SPREAD_RATIO) -> list[Finding]:
    """Sites whose spread differs from most other sites' by more than ``ratio``.

    The spread ``s_i`` is the median distance of site ``i``'s records to their mean (rotation
    and translation invariant); site ``i``'s score is the lower median over the other sites of
    ``|log(s_i / s_j)|``, so one outlying site does not make the others look outlying.
    """
    if len(data) < 3:
        return []
    spread = np.array([np.median(row_norms(y, column_mean(y))) for y in data])
    spread = np.maximum(spread, np.finfo(float).tiny)
    logs = np.log(spread)
    findings = []
    for i, site in enumerate(sites):
        others = np.delete(logs, i)
        gap = np.quantile(np.abs(logs[i] - others), 0.5, method="lower")
        if gap > math.log(ratio):
            typical = float(np.exp(np.median(others)))
            times = spread[i] / typical
            findings.append(Finding(
                site, "spread", float(math.exp(gap)), ratio,
                f"{site}'s records are spread {times:.3g} times as widely as the other sites' "
                f"(median distance to their mean {spread[i]:.4g}, the others' {typical:.4g}): "
                f"a column {'larger' if times > 1 else 'smaller'} by a power of ten (another "
                "unit?), or a table that is not the federation's"))
    return findings


def anchor_check(sites: Sequence[str], anchors: Sequence[np.ndarray], v: float
                 ) -> list[Finding]:
    """Sites whose centered anchor representation has a singular value farther from 1 than the
    anchor noise ``v`` allows: ``v (sqrt(r) + sqrt(d) + t) + 1e-8``."""
    findings = []
    for site, b in zip(sites, anchors, strict=True):
        r, d = b.shape
        s = np.linalg.svd(b - b.mean(axis=0), compute_uv=False)
        measured = float(np.abs(s - 1.0).max())
        bound = v * (math.sqrt(r) + math.sqrt(d) + _tail(len(sites))) + 1e-8
        if measured > bound:
            findings.append(Finding(
                site, "anchor", measured, bound,
                f"{site}'s anchor representation is not the shared anchor under an orthogonal "
                f"map (a singular value {measured:.3g} away from 1, the declared anchor noise "
                f"allows {bound:.3g}): another anchor, another noise level, or a scaled one"))
    return findings


@dataclass(frozen=True)
class FrameMoments:
    """One site's records in the common frame, as :func:`direction_check` needs them.

    Attributes
    ----------
    n : int
        ``n_i``, the site's record count.
    covariance : (h, h) ndarray
        ``C_i = R_i^T Yc_i^T Yc_i R_i / n_i``, ``Yc_i = Y_i - 1 mean_i^T``.
    """

    n: int
    covariance: np.ndarray


def common_frame(data: Sequence[np.ndarray], anchors: Sequence[np.ndarray] | None,
                 reference: int = 0) -> list[FrameMoments]:
    """Each site's centered records ``(Y_i - 1 mean_i^T) R_i`` in the reference's frame, as
    their covariance (:class:`FrameMoments`), summed a chunk at a time: the records are never
    copied, so memory-mapped uploads stay on disk.

    ``R_i = Pi(Bc_i^T Bc_s)`` (SPEC.md section 2, Procrustes onto the reference ``s``); without
    anchors (one common key) ``R_i = I``.
    """
    grams = [centered_gram(y, column_mean(y)) for y in data]
    if anchors is not None:
        bc = [b - b.mean(axis=0) for b in anchors]
        rotations = polar_factor(np.stack([b.T @ bc[reference] for b in bc]))
        grams = [r.T @ g @ r for g, r in zip(grams, rotations, strict=True)]
    return [FrameMoments(len(y), g / len(y)) for y, g in zip(data, grams, strict=True)]


def direction_check(sites: Sequence[str], frames: Sequence[FrameMoments], *,
                    ratio: float = DIRECTION_RATIO, floor: float = DIRECTION_FLOOR
                    ) -> list[Finding]:
    """Sites whose variance along some direction of the common frame differs from most other
    sites' by more than ``ratio`` times what sampling explains.

    For sites ``i, j`` with covariances ``C_i, C_j`` (``frames``: :func:`common_frame`) and
    ``c = floor`` times the median variance per direction, the generalized eigenvalues
    ``lambda`` of ``(C_i + c I, C_j + c I)`` are the ratios of their variances along the
    extreme directions. Two samples of one population of sizes ``n_i, n_j`` in ``h``
    dimensions spread them up to about ``((1 + g_i) / (1 - g_j))^2`` and down to
    ``((1 - g_i) / (1 + g_j))^2``, ``g = sqrt(h / n)`` (Wachter); ``dev_ij`` is the log of the
    larger excess beyond these edges. Site ``i``'s score is the lower median of ``dev_ij``
    over the other sites (the next :data:`MAX_PEERS` in order at most), so one outlying site
    does not make the others look outlying.
    """
    if len(frames) < 3:
        return []
    h = frames[0].covariance.shape[1]
    covs = [f.covariance for f in frames]
    g = np.sqrt(np.minimum(h / np.array([f.n for f in frames]), 0.95))
    eye = floor * float(np.median([np.trace(cv) for cv in covs])) / h * np.eye(h)
    import scipy.linalg  # here, not at the top: the analyst listens before importing scipy

    p = len(frames)
    dev, shrunk = np.zeros((p, p)), np.zeros((p, p), dtype=bool)
    peers = [np.array([(i + k) % p for k in range(1, min(p, MAX_PEERS + 1))]) for i in range(p)]
    for i in range(p):  # one small generalized eigenproblem per pair, kept as a loop
        for j in peers[i]:
            lam = scipy.linalg.eigh(covs[i] + eye, covs[j] + eye, eigvals_only=True)
            up = math.log(lam[-1] / ((1 + g[i]) / (1 - g[j])) ** 2)
            down = -math.log(lam[0] / ((1 - g[i]) / (1 + g[j])) ** 2)
            dev[i, j], shrunk[i, j] = max(up, down), down > up
    findings = []
    for i, site in enumerate(sites):
        others = peers[i]
        k = others[np.argsort(dev[i, others], kind="stable")[(len(others) - 1) // 2]]
        score = math.exp(dev[i, k])
        if score > ratio:
            less = shrunk[i, k]
            findings.append(Finding(
                site, "direction", score, ratio,
                f"along one direction {site}'s records vary {score:.3g} times "
                f"{'less' if less else 'more'} than the other sites' beyond what sampling "
                "explains (in the anchor's common frame): one column is likely "
                f"{'smaller' if less else 'larger'} by a power of ten, an export in another "
                "unit (kg where g is declared?)"))
    return findings


def _majority(findings: list[Finding], judged: int, check: str, why: str,
              ran: list[str], skipped: dict[str, str]) -> list[Finding]:
    """``findings`` of a comparison with the other sites (recorded in ``ran``; ``why`` names
    the sites not judged), unless they name half the sites compared or more: then there is
    no majority to compare with (sites that differ among themselves, as strongly non-iid ones
    do), nobody is named and ``skipped`` says why."""
    ran.append(check)
    majority = 2 * len(findings) < judged
    if not majority:
        skipped[check] = (f"{len(findings)} of {judged} sites differ from the others: no "
                          "majority to compare a site with (sites this different among "
                          "themselves are not judged)")
    if why:
        skipped[check] = why.removeprefix("; ")
    return findings if majority else []


def _judged(sites: Sequence[str], data: Sequence[np.ndarray], minimum: int
            ) -> tuple[list[int], str]:
    """Indices of the sites with at least ``minimum`` records, and ``"; not judged: ..."``
    naming the others (empty when none)."""
    judged = [i for i, y in enumerate(data) if len(y) >= minimum]
    small = [sites[i] for i in range(len(sites)) if i not in judged]
    return judged, (f"; not judged: {', '.join(small)} (fewer than {minimum} records)"
                    if small else "")


def screen(sites: Sequence[str], data: Sequence[np.ndarray],
           anchors: Sequence[np.ndarray] | None, *, method: Method | str,
           diameter: float | None, no_box: str = "", projection_norm: float = 1.0,
           sigma: float | None = None, v: float | None = None, reference: int = 0
           ) -> Screening:
    """Every check that applies to the uploads, the ones that do not with why.

    Parameters
    ----------
    sites : sequence of str
    data : sequence of (n_i, h) ndarrays
        ``Y_i``.
    anchors : sequence of (r, h) ndarrays or None
        ``B_i`` (AA-I-GDP variants).
    method : Method or str
    diameter : float or None
        ``D`` of :func:`box_diameter`; None without a bounded schema (``no_box``: why).
    projection_norm : float
        ``||F||_2``.
    sigma, v : float or None
        Declared noise levels (None: not declared).
    reference : int
        Site whose anchor frame is the common frame.
    """
    method = Method.parse(method)
    findings: list[Finding] = []
    ran: list[str] = []
    skipped: dict[str, str] = {}
    noise = sigma if method.data_noise else 0.0
    if diameter is None:
        skipped["box"] = no_box or "the federation declares no typed schema with public ranges"
    elif noise is None:
        skipped["box"] = ("the method adds private-data noise but the federation declares no "
                          "sigma to bound it")
    else:
        findings += box_check(sites, data, diameter, projection_norm=projection_norm,
                              sigma=noise)
        ran.append("box")
    if diameter is not None:
        skipped["spread"] = "the box check bounds every site's spread"
    else:
        judged, why = _judged(sites, data, MIN_SPREAD_RECORDS)
        if len(judged) < 3:
            skipped["spread"] = f"fewer than three sites to compare{why}"
        else:
            findings += _majority(spread_check([sites[i] for i in judged],
                                               [data[i] for i in judged]), len(judged),
                                  "spread", why, ran, skipped)
    anchor_noise = v if method.anchor_noise else 0.0
    if not method.uses_anchor:
        skipped["anchor"] = f"method {method.value} has no anchor"
    elif anchor_noise is None:
        skipped["anchor"] = "the method adds anchor noise but the federation declares no v"
    elif anchors is None:
        skipped["anchor"] = "no anchor representations were given"
    else:
        findings += anchor_check(sites, anchors, anchor_noise)
        ran.append("anchor")
    judged, why = _judged(sites, data, math.ceil(RECORDS_PER_DIM * data[0].shape[1]))
    if not (method.uses_anchor or method.shared_key):
        skipped["direction"] = (f"method {method.value} has neither an anchor nor a common "
                                "key: no common frame before the alignment")
    elif len(judged) < 3:
        skipped["direction"] = f"fewer than three sites to compare{why}"
    else:
        frames = common_frame(data, anchors if method.uses_anchor else None, reference)
        findings += _majority(direction_check([sites[i] for i in judged],
                                              [frames[i] for i in judged]), len(judged),
                              "direction", why, ran, skipped)
    return Screening(tuple(findings), tuple(ran), skipped)

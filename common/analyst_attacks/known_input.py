"""Known-input attack: ``m`` records of a target, known to the attacker but not where they sit in
the upload, located through the pairwise distances GDP preserves, then centred Procrustes.

Model (SPEC.md section 3, "Without a colluder"): ``Y = X O + 1 Psi^T (+ sigma W)``. Distances are
preserved, ``||y_a - y_b|| = ||x_a - x_b||`` without data noise, so the rows ``j_1..j_m`` of ``Y``
that hold the known records ``K = [k_1; ...; k_m]`` are found by matching the ``m x m`` squared
distance matrix ``D_K`` against the upload's ``D_Y``. With private-data noise,
``E D_Y[a, b] = D_X[a, b] + 2 d sigma^2`` and
``Var D_Y[a, b] = 8 sigma^2 D_X[a, b] + 8 d sigma^4``, so an assignment ``J`` scores

    s(J) = sum_{k < l} (D_Y[j_k, j_l] - 2 d sigma^2 - D_K[k, l])^2 / (8 sigma^2 D_K[k, l]
           + 8 d sigma^4 + tau),

the Gaussian negative log-likelihood of the observed distances up to constants (``tau`` a tiny
floor that only matters at ``sigma = 0``, where every exact assignment scores ~0). Finding the
best ``J`` is a quadratic assignment problem; a beam search places the known records one at a
time (farthest-first, so the first distances carry the most relative precision) and keeps the
``beam`` best partial assignments after each.

Labels travel in the clear with every upload, and a known record can only sit in a row with its
own label: given the upload's labels and the known records', the search only considers rows
``j_k`` with ``label(j_k) = label(k_k)`` (under private-data noise the unrestricted search is
fooled by rows of other labels whose distances happen to fit better).

With the rows located, ``Kc = K - 1 kbar^T`` and ``Yc = Y_J - 1 ybar_J^T``:

    Q = U_k V_k^T   from the SVD  Yc^T Kc = U S V^T,   k = rank(Kc) <= min(m - 1, d),
    X^ = 1 kbar^T + (Y - 1 ybar_J^T) Q.

With ``m >= d + 1`` records in general position ``k = d``, ``Q = O^T`` and ``Psi^ = ybar_J -
O^T kbar`` exactly at ``sigma = 0`` (the known-input attack recovers the key from ``d + 1``
records). With ``m <= d``, ``Q`` is the partial isometry that decodes the ``k`` directions the
known records span exactly and puts the rest of each record at the known records' mean: the
expectation of a record's unseen component under a rotation-invariant prior.

References: Liu, Giannella and Kargupta, "A survey of attack techniques on privacy-preserving
data perturbation methods" (2008), known input-output attacks; SPEC.md section 3.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from noisyanchor.common.errors import InvalidInputError
from noisyanchor.common.validation import as_matrix, check_count, check_nonnegative

#: Partial assignments kept by the location search after each record.
DEFAULT_BEAM = 16
#: Relative singular-value tolerance of ``rank(Kc)``.
RANK_RTOL = 1e-9


@dataclass(frozen=True)
class Location:
    """Where the known records sit in the upload.

    Attributes
    ----------
    rows : (m,) int ndarray
        ``j_k``: row of ``Y`` holding known record ``k``.
    score : float
        ``s(J)`` of the chosen assignment.
    runner_up : float or None
        ``s`` of the best assignment that differs from it (None when the beam held no other):
        a margin near the best's says the location is ambiguous.
    """

    rows: np.ndarray
    score: float
    runner_up: float | None


@dataclass(frozen=True)
class KnownInputResult:
    """The known-input reconstruction of one target.

    Attributes
    ----------
    reconstruction : (n, d) ndarray
        ``X^``.
    decoder : (d, d) ndarray
        ``Q`` (``O^T`` when ``rank = d``; a partial isometry of rank ``rank`` otherwise).
    rank : int
        ``k = rank(Kc)``: the directions the known records determine.
    rotation, translation : ndarray or None
        ``O^ = Q^T`` and ``Psi^`` when ``rank = d`` (the full key), else None.
    location : Location
    """

    reconstruction: np.ndarray
    decoder: np.ndarray
    rank: int
    rotation: np.ndarray | None
    translation: np.ndarray | None
    location: Location


def squared_distances(a: np.ndarray) -> np.ndarray:
    """``D[a, b] = ||a_a - a_b||^2`` of the rows of ``a`` (clipped at 0 against rounding)."""
    sq = np.sum(a * a, axis=1)
    return np.maximum(sq[:, None] + sq[None, :] - 2 * a @ a.T, 0.0)


def _farthest_first(dk: np.ndarray) -> np.ndarray:
    """Known records in search order: the farthest pair, then each time the record farthest from
    those already placed (max-min)."""
    m = len(dk)
    a, b = np.unravel_index(int(np.argmax(dk)), dk.shape)
    order = [int(a), int(b)]
    rest = [k for k in range(m) if k not in order]
    while rest:
        nxt = max(rest, key=lambda k: float(dk[k, order].min()))
        order.append(nxt)
        rest.remove(nxt)
    return np.asarray(order)


def _label_mask(labels: np.ndarray | None, known_labels: np.ndarray | None, n: int,
                m: int) -> np.ndarray | None:
    """``allowed[k, j]``: known record ``k`` may sit in row ``j`` (same label); None without
    labels."""
    if labels is None and known_labels is None:
        return None
    if labels is None or known_labels is None:
        raise InvalidInputError("restricting by label needs both the upload's labels and the "
                                "known records' labels")
    labels, known_labels = np.asarray(labels).ravel(), np.asarray(known_labels).ravel()
    if len(labels) != n or len(known_labels) != m:
        raise InvalidInputError(f"labels: {len(labels)} for {n} upload rows and "
                                f"{len(known_labels)} for {m} known records")
    return known_labels[:, None] == labels[None, :]


def locate_known_records(y: np.ndarray, known: np.ndarray, *, data_noise: float = 0.0,
                         beam: int = DEFAULT_BEAM, labels: np.ndarray | None = None,
                         known_labels: np.ndarray | None = None) -> Location:
    """Rows of ``y`` that hold the records ``known`` (module docstring: score ``s(J)`` and beam
    search).

    Parameters
    ----------
    y : (n, d) ndarray
        The target's data upload ``Y``.
    known : (m, d) ndarray
        Known records ``K`` in the working space (``X F`` with a public projection), ``m >= 2``,
        in any order, all among the target's records.
    data_noise : float
        ``sigma`` of private-data noise (a public protocol parameter; 0 without).
    beam : int
        Partial assignments kept per step.
    labels, known_labels : (n,) and (m,) ndarrays, optional
        Labels of the upload's rows (sent in the clear) and of the known records: given, a
        known record is only placed in a row with its label.
    """
    y = as_matrix(y, "data upload")
    known = as_matrix(known, "known records", cols=y.shape[1])
    sigma = check_nonnegative(data_noise, "data noise sigma")
    beam = check_count(beam, "beam", minimum=1)
    m, d = known.shape
    n = len(y)
    if m < 2:
        raise InvalidInputError("locating known records needs at least 2 of them (one distance)")
    if m > n:
        raise InvalidInputError(f"{m} known records cannot sit among {n} upload rows")
    allowed = _label_mask(labels, known_labels, n, m)
    dy = squared_distances(y)
    dk = squared_distances(known)
    offset = 2 * d * sigma**2
    floor = (1e-9 * max(float(dk.max()), 1e-300)) ** 2
    var = 8 * sigma**2 * dk + 8 * d * sigma**4 + floor
    order = _farthest_first(dk)
    k0, k1 = order[0], order[1]
    pair = (dy - offset - dk[k0, k1]) ** 2 / var[k0, k1]
    np.fill_diagonal(pair, np.inf)
    if allowed is not None:
        pair[~(allowed[k0][:, None] & allowed[k1][None, :])] = np.inf
    keep = np.argsort(pair, axis=None, kind="stable")[:beam]
    paths = np.column_stack(np.unravel_index(keep, pair.shape))  # (B, 2) rows of k0, k1
    scores = pair.ravel()[keep]
    for step in range(2, m):
        k = order[step]
        placed = order[:step]
        # cost of putting record k at each row, given every placed record's row: (B, n)
        resid = dy[paths] - offset - dk[placed, k][None, :, None]
        add = np.sum(resid**2 / var[placed, k][None, :, None], axis=1)
        np.put_along_axis(add, paths, np.inf, axis=1)  # a row holds one record
        if allowed is not None:
            add[:, ~allowed[k]] = np.inf
        total = scores[:, None] + add
        flat = np.argsort(total, axis=None, kind="stable")[:beam]
        b, c = np.unravel_index(flat, total.shape)
        paths = np.column_stack([paths[b], c])
        scores = total[b, c]
    finite = np.isfinite(scores)
    if not finite.any():
        raise InvalidInputError("no assignment of the known records to distinct upload rows")
    rows = np.empty(m, dtype=np.int64)
    rows[order] = paths[0]
    others = [s for p, s in zip(paths[1:], scores[1:], strict=True)
              if np.isfinite(s) and not np.array_equal(np.sort(p), np.sort(paths[0]))]
    return Location(rows, float(scores[0]), float(min(others)) if others else None)


def known_input_attack(y: np.ndarray, known: np.ndarray, *, data_noise: float = 0.0,
                       beam: int = DEFAULT_BEAM, labels: np.ndarray | None = None,
                       known_labels: np.ndarray | None = None) -> KnownInputResult:
    """Reconstruct a target's records from its upload and ``m`` of its records (module
    docstring).

    Parameters
    ----------
    y : (n, d) ndarray
        ``Y``.
    known : (m, d) ndarray
        ``K``: records of this target known to the attacker (working space, any order).
    data_noise : float
        ``sigma`` (0 without private-data noise).
    beam : int
        Beam width of :func:`locate_known_records`.
    labels, known_labels : ndarrays, optional
        Restrict the location by label (:func:`locate_known_records`).
    """
    y = as_matrix(y, "data upload")
    known = as_matrix(known, "known records", cols=y.shape[1])
    loc = locate_known_records(y, known, data_noise=data_noise, beam=beam, labels=labels,
                               known_labels=known_labels)
    return decode_located(y, known, loc)


def decode_located(y: np.ndarray, known: np.ndarray, loc: Location) -> KnownInputResult:
    """Centred Procrustes from the records ``known`` sitting in rows ``loc.rows`` of ``y``
    (module docstring: ``Q``, ``X^`` and, at full rank, the key)."""
    d = y.shape[1]
    kbar = known.mean(axis=0)
    yj = y[loc.rows]
    ybar = yj.mean(axis=0)
    kc, yc = known - kbar, yj - ybar
    sk = np.linalg.svd(kc, compute_uv=False)
    rank = int(np.sum(sk > RANK_RTOL * max(float(sk[0]) if len(sk) else 0.0, 1e-300)
                      * max(kc.shape)))
    u, _, vt = np.linalg.svd(yc.T @ kc)
    q = u[:, :rank] @ vt[:rank]
    x_hat = kbar + (y - ybar) @ q
    rotation = translation = None
    if rank == d:
        rotation = q.T
        translation = ybar - kbar @ rotation
    return KnownInputResult(x_hat, q, rank, rotation, translation, loc)

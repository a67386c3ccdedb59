"""Reference-participant Procrustes alignment (Algorithm 2) for noiseless anchors.

References: SPEC.md section 2; noisy-anchor GDP paper, Algorithm 2 and Proposition 2.12.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from noisyanchor.common.errors import InvalidInputError
from noisyanchor.common.linalg import center_rows, polar_factor
from noisyanchor.common.validation import check_anchor_rows, stack_blocks


@dataclass(frozen=True)
class ProcrustesResult:
    """Maps ``N_i(T) = (T - 1 b_i^T) R_i + 1 b_s^T`` onto the reference participant ``s``.

    Attributes
    ----------
    rotations : (p, d, d) ndarray
        ``R_i = Pi(Bc_i^T Bc_s)``, ``R_s = I``.
    means : (p, d) ndarray
        ``b_i = B_i^T 1 / r``.
    reference : int
        ``s``.
    seconds : float
    """

    rotations: np.ndarray
    means: np.ndarray
    reference: int
    seconds: float

    @property
    def shift(self) -> np.ndarray:
        """Common shift ``b_s`` added after rotation."""
        return self.means[self.reference]


def align_to_reference(anchors: Sequence[np.ndarray], *, reference: int = 0) -> ProcrustesResult:
    """Align every participant to the reference ``s`` by orthogonal Procrustes on the anchors.

    Parameters
    ----------
    anchors : list of p (r, d) ndarrays
        Uploaded ``B_i`` (``p >= 2``, ``r >= d + 1``).
    reference : int
        Index ``s`` of the reference participant.

    Returns
    -------
    ProcrustesResult
        With noiseless anchors of full column rank, ``N_i(M_i(S)) = M_s(S)`` exactly.
    """
    start = time.perf_counter()
    b = stack_blocks(anchors, "anchors")
    p, r, d = b.shape
    check_anchor_rows(r, d, "anchors need")
    if isinstance(reference, bool) or not 0 <= int(reference) < p:
        raise InvalidInputError(f"reference must be an index in [0, {p}), got {reference!r}")
    s = int(reference)
    means, bc = center_rows(b)
    rotations = polar_factor(np.swapaxes(bc, 1, 2) @ bc[s])
    rotations[s] = np.eye(d)
    return ProcrustesResult(rotations, means, s, time.perf_counter() - start)

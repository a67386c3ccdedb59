"""Analyst-side alignment by method and assembly of the collaboration matrix ``Z``.

* C-GDP variants: the uploads already share one frame; ``Z`` stacks them.
* I-GDP: no anchors, no alignment is possible; ``Z`` stacks the unaligned uploads.
* AA-I-GDP and AA-I-GDP (private-data noise): noiseless anchors, reference Procrustes (Alg. 2).
* AA-I-GDP (anchor noise): centered GOPP (Algorithm 4) with its certificate.

References: SPEC.md sections 1-2.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from noisyanchor.common.chunks import let_go, row_chunks
from noisyanchor.common.errors import InvalidInputError
from noisyanchor.common.gopp import solve_gopp
from noisyanchor.common.methods import Method
from noisyanchor.common.procrustes import align_to_reference
from noisyanchor.common.validation import as_matrix


@dataclass(frozen=True)
class Alignment:
    """The analyst's maps ``N_i(T) = (T - 1 b_i^T) R_i + 1 c^T`` and the collaboration matrix.

    Attributes
    ----------
    z : (sum n_i, d) ndarray
        Collaboration matrix ``Z`` (aligned blocks stacked in participant order).
    row_ranges : list of (start, stop)
        Rows of ``Z`` that came from each participant.
    rotations : (p, d, d) ndarray
        ``R_i`` (identity when the method has no anchors).
    means : (p, d) ndarray
        ``b_i`` (zero when the method has no anchors).
    shift : (d,) ndarray
        ``c``: ``b_s`` for reference Procrustes, zero otherwise.
    solver : dict
        Solver name and diagnostics (JSON-ready).
    """

    z: np.ndarray
    row_ranges: list[tuple[int, int]]
    rotations: np.ndarray
    means: np.ndarray
    shift: np.ndarray
    solver: dict[str, Any] = field(default_factory=dict)

    def map_rows(self, i: int, t: np.ndarray) -> np.ndarray:
        """Apply participant ``i``'s alignment map ``N_i`` to rows ``T`` in its frame."""
        return (t - self.means[i]) @ self.rotations[i] + self.shift


def solver_for(method: Method) -> str:
    """Alignment solver the analyst uses for ``method``: none, procrustes or gopp."""
    if not method.uses_anchor:
        return "none"
    return "gopp" if method.anchor_noise else "procrustes"


def align(
    method: Method | str,
    data: Sequence[np.ndarray],
    anchors: Sequence[np.ndarray] | None = None,
    *,
    reference: int = 0,
    max_iter: int = 500,
    tol: float = 1e-7,
    certify: bool = True,
    solver: str | None = None,
    precision: str = "auto",
    stopping: str = "objective",
    gopp_method: str = "auto",
    z_file: Path | None = None,
) -> Alignment:
    """Align the uploads ``Y_i`` (with anchors ``B_i`` where the method has them) into ``Z``.

    Parameters
    ----------
    method : Method or str
    data : list of p (n_i, d) ndarrays
        ``Y_i``.
    anchors : list of p (r, d) ndarrays, optional
        ``B_i`` (AA-I-GDP variants).
    reference : int
        Reference participant ``s`` for Procrustes.
    max_iter, tol, certify, precision, stopping
        GOPP solver parameters (:func:`common.gopp.solve_gopp`).
    gopp_method : {"auto", "gpm"}
        ``solve_gopp``'s ``method``.
    solver : {"procrustes", "gopp"}, optional
        Override the method's default solver (anchor methods only).
    z_file : path, optional
        Write ``Z`` into this ``.npy`` file (preallocated, filled block by block) and return it
        as a memory map of that file; by default ``Z`` is built in memory the same way. Either
        way no block is stacked: the blocks ``Y_i`` may themselves be memory maps.
    """
    method = Method.parse(method)
    if len(data) < 2:
        raise InvalidInputError(f"alignment needs at least 2 participants, got {len(data)}")
    blocks = [as_matrix(y, f"data[{i}]") for i, y in enumerate(data)]
    d = blocks[0].shape[1]
    for i, y in enumerate(blocks):
        if y.shape[1] != d:
            raise InvalidInputError(f"data[{i}] has {y.shape[1]} columns, expected {d}")
    p = len(blocks)
    stops = np.cumsum([len(y) for y in blocks])
    row_ranges = [(int(a), int(b)) for a, b in zip(np.r_[0, stops[:-1]], stops, strict=True)]

    chosen = solver or solver_for(method)
    if chosen not in ("none", "procrustes", "gopp") or (chosen != "none") != method.uses_anchor:
        raise InvalidInputError(f"solver {chosen!r} does not fit method {method.value}")
    if chosen == "none":
        if anchors:
            raise InvalidInputError(f"method {method.value} takes no anchor uploads")
        rotations = np.broadcast_to(np.eye(d), (p, d, d)).copy()
        return Alignment(assemble(blocks, None, z_file), row_ranges, rotations,
                         np.zeros((p, d)), np.zeros(d), {"name": "none"})
    if anchors is None or len(anchors) != p:
        raise InvalidInputError(f"method {method.value} needs one anchor upload per participant")
    for i, b in enumerate(anchors):
        if np.shape(b)[1:] != (d,):
            raise InvalidInputError(f"anchors[{i}] has shape {np.shape(b)}, expected (r, {d})")

    if chosen == "procrustes":
        res = align_to_reference(anchors, reference=reference)
        rotations, means, shift = res.rotations, res.means, res.shift
        diag: dict[str, Any] = {"name": "procrustes", "reference": res.reference,
                                "seconds": res.seconds}
    else:
        gopp = solve_gopp(anchors, max_iter=max_iter, tol=tol, certify=certify,
                          precision=precision, stopping=stopping, method=gopp_method)
        rotations, means, shift = gopp.rotations, gopp.means, np.zeros(d)
        diag = {"name": "gopp", "iterations": gopp.iterations, "converged": gopp.converged,
                "stopping": stopping, "stopped_by": gopp.stopped_by,
                "stop_reason": gopp.stop_reason,
                "objective": gopp.objective, "fixed_point_residual": gopp.fixed_point_residual,
                "gopp_residual": gopp.gopp_residual,
                "certificate_min_eig": gopp.certificate_min_eig,
                "certificate_tol": gopp.certificate_tol, "certified": gopp.certified,
                "mixed_precision_steps": gopp.mixed_precision_steps,
                "product_drift": gopp.product_drift, "blas_threads": gopp.blas_threads,
                "method": gopp.method, "switch_reason": gopp.switch_reason,
                "certificate_path": gopp.certificate_path,
                "certificate_early_exit": gopp.certificate_early_exit, "seconds": gopp.seconds}
    z = assemble(blocks, (rotations, means, shift), z_file)
    return Alignment(z, row_ranges, rotations, means, shift, diag)


def assemble(blocks: Sequence[np.ndarray],
             maps: tuple[np.ndarray, np.ndarray, np.ndarray] | None,
             z_file: Path | None = None) -> np.ndarray:
    """The collaboration matrix ``Z``: row block ``i`` is ``N_i(Y_i) = (Y_i - 1 b_i^T) R_i +
    1 c^T`` (``Y_i`` itself without maps), written chunk by chunk into one preallocated array.

    Parameters
    ----------
    blocks : list of p (n_i, d) ndarrays
        ``Y_i`` (memory maps are read a chunk at a time).
    maps : tuple of ((p, d, d), (p, d), (d,)) ndarrays, or None
        ``(R_i, b_i, c)``; None: no maps (the blocks are copied as they are).
    z_file : path, optional
        The ``.npy`` file to write ``Z`` into (:func:`numpy.lib.format.open_memmap`); ``Z`` is
        then that file's memory map, flushed. Default: an array in memory.

    Returns
    -------
    (sum n_i, d) ndarray
        ``Z``.
    """
    shape = (sum(len(y) for y in blocks), blocks[0].shape[1])
    z = (np.empty(shape) if z_file is None
         else np.lib.format.open_memmap(z_file, mode="w+", dtype=np.float64, shape=shape))
    start = 0
    for i, y in enumerate(blocks):
        for rows in row_chunks(len(y), release=y):  # the uploads' pages go as they are read
            out = z[start + rows.start:start + rows.stop]
            if maps is None:
                out[...] = y[rows]
            else:
                np.matmul(y[rows] - maps[1][i], maps[0][i], out=out)
                out += maps[2]
            let_go(z, slice(start + rows.start, start + rows.stop))  # written: to the file
        start += len(y)
    if isinstance(z, np.memmap):
        z.flush()
    return z

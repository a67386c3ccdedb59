"""Reconstruction attacks of a colluding participant and the analyst against the other
participants, with decoding through ``F^+`` left to :func:`common.gdp.decode`.

The colluder ``c`` discloses its data ``X_c``, its secret state ``(O_c, Psi_c, noise)`` and the
anchor ``A``. Let ``a = A^T 1 / r``, ``Ac = A - 1 a^T``, ``b_i = B_i^T 1 / r``,
``Bc_i = B_i - 1 b_i^T``; every anchor attack estimates ``O^_i`` then
``Psi^_i = b_i - O^_i^T a`` and inverts the data upload ``Y_i``.

References: SPEC.md section 3; noisy-anchor GDP paper, Section 3 and Algorithm 3.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from noisyanchor.common.errors import InvalidInputError
from noisyanchor.common.gdp import GdpKey
from noisyanchor.common.linalg import center_rows, polar_factor
from noisyanchor.common.methods import Method
from noisyanchor.common.validation import as_matrix

#: Attack names used in every JSON and API.
ATTACK_NAMES = ("known_secret", "known_anchor", "mp", "op", "am")


@dataclass(frozen=True)
class Disclosure:
    """What the colluder hands to the analyst.

    Attributes
    ----------
    colluder : int
        Index ``c`` of the colluding participant.
    data : (n_c, d) ndarray
        ``X_c`` (in the working space).
    key : GdpKey
        ``(O_c, Psi_c)``; for C-GDP the common ``(O, Psi)``.
    anchor : (r, d) ndarray or None
        ``A`` (AA-I-GDP variants).
    """

    colluder: int
    data: np.ndarray
    key: GdpKey
    anchor: np.ndarray | None = None


def _invert(y: np.ndarray, psi: np.ndarray, o_inv: np.ndarray) -> np.ndarray:
    """``X^ = (Y - 1 Psi^T) O_inv``."""
    return (y - psi) @ o_inv


def _disclosed_anchor(anchor: np.ndarray | None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The checked disclosed anchor ``A`` with ``a`` and ``Ac`` (a disclosure without one is
    refused by the shape check)."""
    anchor = as_matrix(anchor, "anchor")
    a, ac = center_rows(anchor)
    return anchor, a, ac


def _check_upload(b: np.ndarray, anchor: np.ndarray) -> np.ndarray:
    """``B_i`` checked to have the shape of the (checked) disclosed anchor ``A``."""
    return as_matrix(b, "anchor upload", rows=anchor.shape[0], cols=anchor.shape[1])


def _anchor_parts(anchor: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, ...]:
    """``a, Ac, b_i, Bc_i`` after checking shapes."""
    anchor, a, ac = _disclosed_anchor(anchor)
    bi, bc = center_rows(_check_upload(b, anchor))
    return a, ac, bi, bc


def _rotation_attack(y: np.ndarray, a: np.ndarray, bi: np.ndarray, o_hat: np.ndarray) -> np.ndarray:
    """``X^_i = (Y_i - 1 Psi^_i^T) O^_i^T`` with ``Psi^_i = b_i - O^_i^T a``."""
    return _invert(y, bi - o_hat.T @ a, o_hat.T)


def _mp_core(y: np.ndarray, a: np.ndarray, bi: np.ndarray, o_hat: np.ndarray) -> np.ndarray:
    """``X^_i = (Y_i - 1 Psi^_i^T) (O^_i)^+`` with ``Psi^_i = b_i - O^_i^T a``."""
    return _invert(y, bi - o_hat.T @ a, np.linalg.pinv(o_hat))


def _am_calibration(colluder_rotation: np.ndarray, colluder_alignment: np.ndarray) -> np.ndarray:
    """``Q^ = Pi(O_c R_c)``."""
    return polar_factor(np.asarray(colluder_rotation) @ np.asarray(colluder_alignment))


def known_secret_attack(y: np.ndarray, key: GdpKey) -> np.ndarray:
    """C-GDP known-secret inversion ``X^_i = (Y_i - 1 Psi^T) O^T`` with the disclosed common key."""
    y = as_matrix(y, "data upload", cols=key.dim)
    return _invert(y, key.translation, key.rotation.T)


def known_anchor_attack(y: np.ndarray, b: np.ndarray, anchor: np.ndarray) -> np.ndarray:
    """Algorithm 3: ``O^_i = Ac^+ Bc_i``, ``X^_i = (Y_i - 1 Psi^_i^T) O^_i^T`` (exact w/o noise)."""
    a, ac, bi, bc = _anchor_parts(anchor, b)
    return _rotation_attack(as_matrix(y, "data upload"), a, bi, np.linalg.pinv(ac) @ bc)


def mp_attack(y: np.ndarray, b: np.ndarray, anchor: np.ndarray) -> np.ndarray:
    """Moore-Penrose: ``O^_i = Ac^+ Bc_i``, ``X^_i = (Y_i - 1 Psi^_i^T) (O^_i)^+``."""
    a, ac, bi, bc = _anchor_parts(anchor, b)
    return _mp_core(as_matrix(y, "data upload"), a, bi, np.linalg.pinv(ac) @ bc)


def op_attack(y: np.ndarray, b: np.ndarray, anchor: np.ndarray) -> np.ndarray:
    """Orthogonal Procrustes: ``O^_i = Pi(Ac^T Bc_i)``, ``X^_i = (Y_i - 1 Psi^_i^T) O^_i^T``."""
    a, ac, bi, bc = _anchor_parts(anchor, b)
    return _rotation_attack(as_matrix(y, "data upload"), a, bi, polar_factor(ac.T @ bc))


def am_attack(
    y: np.ndarray,
    b: np.ndarray,
    anchor: np.ndarray,
    *,
    colluder_rotation: np.ndarray,
    colluder_alignment: np.ndarray,
    target_alignment: np.ndarray,
) -> np.ndarray:
    """Alignment-map calibration: ``Q^ = Pi(O_c R_c)``, ``O^_i = Q^ R_i^T``,
    ``X^_i = (Y_i - 1 Psi^_i^T) O^_i^T``, using the analyst's own alignment ``R_i``.
    """
    anchor = as_matrix(anchor, "anchor")
    bi = _check_upload(b, anchor).mean(axis=-2)
    q_hat = _am_calibration(colluder_rotation, colluder_alignment)
    o_hat = q_hat @ np.asarray(target_alignment).T
    return _rotation_attack(as_matrix(y, "data upload"), anchor.mean(axis=-2), bi, o_hat)


def _anchor_attacks(
    disclosure: Disclosure,
    data: Sequence[np.ndarray],
    anchors: Sequence[np.ndarray],
    rotations: np.ndarray,
    targets: Sequence[int],
) -> dict[str, dict[int, np.ndarray]]:
    """``known_anchor``, ``mp``, ``op`` and ``am`` against every target, as the public attacks
    compute them, with the disclosed-anchor work (``a``, ``Ac``, ``Ac^+``, ``Q^``) done once and
    each target's (``Y_i`` check, ``b_i``, ``Bc_i``, ``Ac^+ Bc_i``) once.
    """
    out: dict[str, dict[int, np.ndarray]] = {"known_anchor": {}, "mp": {}, "op": {}, "am": {}}
    if not targets:
        return out
    anchor, a, ac = _disclosed_anchor(disclosure.anchor)
    ac_pinv = np.linalg.pinv(ac)
    q_hat = _am_calibration(disclosure.key.rotation, rotations[disclosure.colluder])
    for i in targets:
        bi, bc = center_rows(_check_upload(anchors[i], anchor))
        y = as_matrix(data[i], "data upload")
        o_hat = ac_pinv @ bc
        out["known_anchor"][i] = _rotation_attack(y, a, bi, o_hat)
        out["mp"][i] = _mp_core(y, a, bi, o_hat)
        out["op"][i] = _rotation_attack(y, a, bi, polar_factor(ac.T @ bc))
        out["am"][i] = _rotation_attack(y, a, bi, q_hat @ np.asarray(rotations[i]).T)
    return out


def run_attacks(
    method: Method | str,
    disclosure: Disclosure,
    data: Sequence[np.ndarray],
    anchors: Sequence[np.ndarray] | None = None,
    rotations: np.ndarray | None = None,
) -> dict[str, dict[int, np.ndarray]]:
    """Every attack that applies to ``method`` against every non-colluding participant.

    Parameters
    ----------
    method : Method or str
    disclosure : Disclosure
    data : list of p (n_i, d) ndarrays
        Uploaded ``Y_i``.
    anchors : list of p (r, d) ndarrays, optional
        Uploaded ``B_i`` (AA-I-GDP variants).
    rotations : (p, d, d) ndarray, optional
        The analyst's alignment ``R_i`` (needed by ``am``).

    Returns
    -------
    dict
        ``{attack name: {target index i: X^_i (n_i, d)}}`` (empty for I-GDP).
    """
    method = Method.parse(method)
    p = len(data)
    c = disclosure.colluder
    if not 0 <= c < p:
        raise InvalidInputError(f"colluder index {c} is not a participant index in [0, {p})")
    targets = [i for i in range(p) if i != c]
    if method.shared_key:
        return {"known_secret": {i: known_secret_attack(data[i], disclosure.key) for i in targets}}
    if method.uses_anchor:
        if disclosure.anchor is None or anchors is None or rotations is None:
            raise InvalidInputError(f"attacks on {method.value} need the disclosed anchor, the "
                                    "anchor uploads and the analyst's rotations")
        return _anchor_attacks(disclosure, data, anchors, rotations, targets)
    return {}


def relative_error(x_hat: np.ndarray, x: np.ndarray) -> float:
    """``||X^ - X||_F / ||X||_F``."""
    x = np.asarray(x, dtype=float)
    x_hat = np.asarray(x_hat, dtype=float)
    if x.shape != x_hat.shape:
        raise InvalidInputError(f"reconstruction shape {x_hat.shape} != original {x.shape}")
    return float(np.linalg.norm(x_hat - x) / np.linalg.norm(x))

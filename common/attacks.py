"""Reconstruction attacks of a colluding participant and the analyst against the other
participants, and the interface through which other packages add their own.

The colluder ``c`` discloses its data ``X_c``, its secret state ``(O_c, Psi_c, noise)`` and the
anchor ``A``. Let ``a = A^T 1 / r``, ``Ac = A - 1 a^T``, ``b_i = B_i^T 1 / r``,
``Bc_i = B_i - 1 b_i^T``; every anchor attack estimates ``O^_i`` then
``Psi^_i = b_i - O^_i^T a`` and inverts the data upload ``Y_i``. Decoding through ``F^+`` is left
to :func:`common.gdp.decode`.

Built-in attacks (:data:`ATTACK_NAMES`; formulas in SPEC.md section 3):

* ``known_secret`` (C-GDP variants): the disclosed common key inverts every upload.
* ``known_anchor`` (Algorithm 3), ``mp``, ``op``, ``am``: the paper's attacks (``mp``, ``op``
  and ``am`` are the three it evaluates against anchor noise, :data:`PAPER_ANCHOR_ATTACKS`).
* ``op_scaled``: OP divided by the expected polar shrinkage ``alpha(d, v)``.
* ``known_anchor_recentered``: known-anchor with the participant-level mean error removed by
  James-Stein shrinkage towards the colluder's record mean.
* ``ml``: the maximum-likelihood key from both uploads (:mod:`common.likelihood`).

Plug-in attacks
---------------
A package registers a callable under the entry-point group ``noisyanchor.attacks``
(:mod:`common.plugins`)::

    def my_attack(view: AttackerView, target: int) -> numpy.ndarray | None: ...

It receives everything the colluding analyst holds (:class:`AttackerView`: the method, the
disclosure, every upload, the analyst's rotations, the anchor-noise level) and one target index
``i != c``, and returns the reconstruction ``X^_i`` of that target's records in the working space
(``n_i x d``, the shape of ``Y_i``), or None when it does not apply to ``view.method``. It may
instead register an :class:`Attack` (to mark it as one of the paper's attacks, or to describe it).
The entry point's name is the attack's name; the sweep, the report and ``noisyanchor attack``
run every registered attack beside the built-in ones.

References: SPEC.md section 3; noisy-anchor GDP paper, Section 3 and Algorithm 3.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

import numpy as np

from noisyanchor.common.errors import InvalidInputError
from noisyanchor.common.gdp import GdpKey
from noisyanchor.common.likelihood import RecordPrior, ml_transform
from noisyanchor.common.linalg import center_rows, polar_factor
from noisyanchor.common.methods import Method
from noisyanchor.common.plugins import ATTACK_GROUP, load_plugins
from noisyanchor.common.theory import polar_shrinkage
from noisyanchor.common.validation import as_matrix, check_nonnegative

#: The three attacks the paper evaluates against anchor noise.
PAPER_ANCHOR_ATTACKS = ("mp", "op", "am")


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
    anchor_noise : float or None
        The anchor-noise level ``v`` when known (a public protocol parameter the colluder
        holds); None: estimated from the residuals of the uploaded anchors
        (:attr:`AttackerView.estimated_noise_level`).
    """

    colluder: int
    data: np.ndarray
    key: GdpKey
    anchor: np.ndarray | None = None
    anchor_noise: float | None = None


class NotApplicable(Exception):
    """Raised by an attack that cannot run on this view (the reason is reported)."""


class AttackerView:
    """Everything the colluding analyst holds, with the quantities several attacks share
    computed once per run (``a``, ``Ac``, ``Ac^+``, ``Q^``, ``v``, the record prior) and once per
    target (``b_i``, ``Bc_i``, ``Ac^+ Bc_i``).

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
    """

    def __init__(self, method: Method | str, disclosure: Disclosure,
                 data: Sequence[np.ndarray], anchors: Sequence[np.ndarray | None] | None = None,
                 rotations: np.ndarray | None = None) -> None:
        self.method = Method.parse(method)
        self.disclosure = disclosure
        p = len(data)
        c = disclosure.colluder
        if not 0 <= c < p:
            raise InvalidInputError(f"colluder index {c} is not a participant index in [0, {p})")
        self.data = [as_matrix(y, "data upload") for y in data]
        self.anchors: list[np.ndarray] | None = (
            None if anchors is None or any(b is None for b in anchors)
            else [np.asarray(b) for b in anchors])
        self.rotations = rotations
        self.targets = [i for i in range(p) if i != c]
        self._parts: dict[int, tuple[np.ndarray, np.ndarray, np.ndarray]] = {}
        if disclosure.anchor_noise is not None:
            check_nonnegative(disclosure.anchor_noise, "anchor noise level v")
        if self.method.uses_anchor and (disclosure.anchor is None or self.anchors is None):
            raise InvalidInputError(f"attacks on {self.method.value} need the disclosed anchor "
                                    "and the anchor uploads")

    @property
    def dim(self) -> int:
        """Working dimension ``d``."""
        return self.data[0].shape[1]

    @cached_property
    def anchor_parts(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """The checked disclosed anchor ``A`` with ``a``, ``Ac`` and ``Ac^+``."""
        anchor = as_matrix(self.disclosure.anchor, "anchor")
        a, ac = center_rows(anchor)
        return anchor, a, ac, np.linalg.pinv(ac)

    def upload_parts(self, i: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``b_i``, ``Bc_i`` and the known-anchor estimate ``Ac^+ Bc_i`` of target ``i``."""
        if i not in self._parts:
            anchor, _, _, ac_pinv = self.anchor_parts
            assert self.anchors is not None  # checked at construction for anchor methods
            b = as_matrix(self.anchors[i], "anchor upload", rows=anchor.shape[0],
                          cols=anchor.shape[1])
            bi, bc = center_rows(b)
            self._parts[i] = (bi, bc, ac_pinv @ bc)
        return self._parts[i]

    @cached_property
    def estimated_noise_level(self) -> float:
        """``v^`` from the residuals of every uploaded anchor: with ``Q`` the projector onto the
        complement of ``span(1, Ac)``, ``Q B_j = v Q W_j`` and ``E||Q W_j||_F^2 = (r - d - 1) d``,
        so ``v^2 = sum_j ||Q B_j||_F^2 / (p (r - d - 1) d)`` (unbiased for ``v^2``)."""
        anchor, _, ac, ac_pinv = self.anchor_parts
        r, d = anchor.shape
        dof = (r - d - 1) * d
        if dof <= 0:
            raise NotApplicable("v is not disclosed and r = d + 1 leaves no anchor residual "
                                "to estimate it from")
        assert self.anchors is not None
        total = 0.0
        for b in self.anchors:  # one r x d residual per upload
            _, bc = center_rows(as_matrix(b, "anchor upload", rows=r, cols=d))
            total += float(np.sum((bc - ac @ (ac_pinv @ bc)) ** 2))
        return float(np.sqrt(total / (len(self.anchors) * dof)))

    @cached_property
    def noise_level(self) -> float:
        """``v``: disclosed, else :attr:`estimated_noise_level`."""
        v = self.disclosure.anchor_noise
        return self.estimated_noise_level if v is None else float(v)

    @cached_property
    def record_prior(self) -> RecordPrior:
        """Gaussian model of the records fitted on the colluder's disclosed ``X_c``."""
        return RecordPrior.from_records(self.disclosure.data)

    @cached_property
    def am_calibration(self) -> np.ndarray:
        """``Q^ = Pi(O_c R_c)``."""
        c = self.disclosure.colluder
        return polar_factor(np.asarray(self.disclosure.key.rotation) @ self.alignment(c))

    def alignment(self, i: int) -> np.ndarray:
        """The analyst's ``R_i``."""
        if self.rotations is None:
            raise NotApplicable("the analyst's rotations R_i are not available")
        return np.asarray(self.rotations[i])

    def invert(self, i: int, o_hat: np.ndarray, psi_hat: np.ndarray | None = None,
               o_inv: np.ndarray | None = None) -> np.ndarray:
        """``X^_i = (Y_i - 1 Psi^_i^T) O_inv`` with ``Psi^_i = b_i - O^_i^T a`` unless given and
        ``O_inv = O^_i^T`` unless given."""
        if psi_hat is None:
            _, a, _, _ = self.anchor_parts
            psi_hat = self.upload_parts(i)[0] - o_hat.T @ a
        return (self.data[i] - psi_hat) @ (o_hat.T if o_inv is None else o_inv)


@dataclass(frozen=True)
class Attack:
    """A named reconstruction attack.

    Attributes
    ----------
    name : str
    reconstruct : callable
        ``(view, target) -> X^_i`` (``n_i x d``, working space) or None when the attack does not
        apply to ``view.method``; may raise :class:`NotApplicable` with a reason.
    paper : bool
        One of the attacks the paper evaluates against anchor noise.
    description : str
    """

    name: str
    reconstruct: Callable[[AttackerView, int], np.ndarray | None]
    paper: bool = False
    description: str = ""


def _known_secret(view: AttackerView, i: int) -> np.ndarray | None:
    """C-GDP known-secret inversion ``X^_i = (Y_i - 1 Psi^T) O^T`` with the disclosed key."""
    if not view.method.shared_key:
        return None
    key = view.disclosure.key
    return known_secret_attack(view.data[i], key)


def _known_anchor(view: AttackerView, i: int) -> np.ndarray | None:
    """Algorithm 3: ``O^_i = Ac^+ Bc_i``, ``X^_i = (Y_i - 1 Psi^_i^T) O^_i^T``."""
    if not view.method.uses_anchor:
        return None
    return view.invert(i, view.upload_parts(i)[2])


def _mp(view: AttackerView, i: int) -> np.ndarray | None:
    """Moore-Penrose: ``O^_i = Ac^+ Bc_i``, ``X^_i = (Y_i - 1 Psi^_i^T) (O^_i)^+``."""
    if not view.method.uses_anchor:
        return None
    o_hat = view.upload_parts(i)[2]
    return view.invert(i, o_hat, o_inv=np.linalg.pinv(o_hat))


def _op_rotation(view: AttackerView, i: int) -> np.ndarray:
    """``Pi(Ac^T Bc_i)``."""
    _, _, ac, _ = view.anchor_parts
    return polar_factor(ac.T @ view.upload_parts(i)[1])


def _op(view: AttackerView, i: int) -> np.ndarray | None:
    """Orthogonal Procrustes: ``O^_i = Pi(Ac^T Bc_i)``, ``X^_i = (Y_i - 1 Psi^_i^T) O^_i^T``."""
    if not view.method.uses_anchor:
        return None
    return view.invert(i, _op_rotation(view, i))


def _am(view: AttackerView, i: int) -> np.ndarray | None:
    """Alignment-map calibration: ``O^_i = Q^ R_i^T`` with ``Q^ = Pi(O_c R_c)``."""
    if not view.method.uses_anchor:
        return None
    return view.invert(i, view.am_calibration @ view.alignment(i).T)


def _op_scaled(view: AttackerView, i: int) -> np.ndarray | None:
    """Scale-corrected OP: ``X^_i = (Y_i - 1 Psi^_i^T) Pi(Ac^T Bc_i)^T / alpha(d, v)``, with
    ``E[Pi(Ac^T Bc_i)] = alpha O_i`` for a centred orthonormal anchor, so ``E[X^_i] = X_i``."""
    if not view.method.uses_anchor:
        return None
    return view.invert(i, _op_rotation(view, i)) / polar_shrinkage(view.dim, view.noise_level)


def _known_anchor_recentered(view: AttackerView, i: int) -> np.ndarray | None:
    """Known-anchor with the participant-level mean error shrunk away (James-Stein).

    The known-anchor estimate is unbiased (its expected shrinkage is exactly 1), but every
    record of target ``i`` shares one error in its mean row:
    ``xbar^ - xbar = v xbar O_i N^T - eta^T (O_i + v N)^T``, isotropic with
    ``E||.||^2 = e2 = v^2 d ||xbar||^2 + (d v^2 / r)(1 + v^2 d)``. The mean row is replaced by
    the positive-part James-Stein estimate towards the colluder's record mean ``mu``:
    ``mu + lambda (xbar^ - mu)``, ``lambda = max(0, 1 - (d - 2) (e2 / d) / ||xbar^ - mu||^2)``
    (``||xbar||^2`` estimated by ``||xbar^||^2 / (1 + v^2 d) - d v^2 / r``). At ``v = 0``,
    ``lambda = 1`` and this is the known-anchor attack.
    """
    if not view.method.uses_anchor:
        return None
    x_hat = _known_anchor(view, i)
    assert x_hat is not None
    d = view.dim
    v2 = view.noise_level**2
    r = view.anchor_parts[0].shape[0]
    if d < 3 or v2 == 0:  # James-Stein needs d >= 3; nothing to correct without noise
        return x_hat
    mean = x_hat.mean(axis=0)
    mu = view.record_prior.mean
    xbar2 = max(0.0, float(mean @ mean) / (1 + v2 * d) - d * v2 / r)
    e2 = v2 * d * xbar2 + d * v2 / r * (1 + v2 * d)
    gap = float(np.sum((mean - mu) ** 2))
    lam = max(0.0, 1.0 - (d - 2) * (e2 / d) / gap) if gap > 0 else 0.0
    return x_hat - (1 - lam) * (mean - mu)


def _ml(view: AttackerView, i: int) -> np.ndarray | None:
    """Maximum-likelihood key from ``B_i`` and ``Y_i`` (:func:`common.likelihood.ml_transform`)
    and ``X^_i = (Y_i - 1 Psi^_i^T) O^_i^T``."""
    if not view.method.uses_anchor:
        return None
    anchor = view.anchor_parts[0]
    assert view.anchors is not None
    est = ml_transform(view.data[i], view.anchors[i], anchor, view.noise_level,
                       view.record_prior)
    return view.invert(i, est.rotation, est.translation)


#: Built-in attacks, in report order.
BUILTIN_ATTACKS: tuple[Attack, ...] = (
    Attack("known_secret", _known_secret, description="disclosed common key (C-GDP)"),
    Attack("known_anchor", _known_anchor, description="Algorithm 3: O^ = Ac^+ Bc"),
    Attack("mp", _mp, paper=True, description="Moore-Penrose inverse of Ac^+ Bc"),
    Attack("op", _op, paper=True, description="orthogonal Procrustes Pi(Ac^T Bc)"),
    Attack("am", _am, paper=True, description="alignment map Pi(O_c R_c) R_i^T"),
    Attack("op_scaled", _op_scaled, description="OP divided by alpha(d, v)"),
    Attack("known_anchor_recentered", _known_anchor_recentered,
           description="known-anchor, James-Stein mean towards the colluder's"),
    Attack("ml", _ml, description="maximum likelihood from B_i and Y_i"),
)
#: Names of the built-in attacks (JSON keys everywhere).
ATTACK_NAMES = tuple(a.name for a in BUILTIN_ATTACKS)


def available_attacks(*, plugins: bool = True) -> dict[str, Attack]:
    """Built-in attacks, then every plug-in of the ``noisyanchor.attacks`` entry-point group
    (module docstring), by name."""
    out = {a.name: a for a in BUILTIN_ATTACKS}
    if plugins:
        for name, obj in load_plugins(ATTACK_GROUP, reserved=ATTACK_NAMES).items():
            if isinstance(obj, Attack):
                out[name] = Attack(name, obj.reconstruct, obj.paper, obj.description)
            elif callable(obj):
                out[name] = Attack(name, obj, description=(obj.__doc__ or "").strip()
                                   .split("\n")[0])
            else:
                raise InvalidInputError(f"plug-in attack {name!r} is neither callable nor an "
                                        "Attack")
    return out


@dataclass
class AttackRun:
    """Reconstructions of every attack that applied, and why the others did not run.

    Attributes
    ----------
    reconstructions : dict
        ``{attack name: {target index i: X^_i (n_i, d)}}``.
    skipped : dict
        ``{attack name: reason}`` for attacks that raised :class:`NotApplicable`.
    noise_level : float or None
        ``v`` the anchor attacks used (None without anchors).
    estimated_noise_level : float or None
        ``v^`` from the anchor residuals (None when not estimable or without anchors).
    """

    reconstructions: dict[str, dict[int, np.ndarray]] = field(default_factory=dict)
    skipped: dict[str, str] = field(default_factory=dict)
    noise_level: float | None = None
    estimated_noise_level: float | None = None


def _checked(name: str, x_hat: Any, y: np.ndarray) -> np.ndarray:
    x_hat = np.asarray(x_hat, dtype=float)
    if x_hat.shape != y.shape:
        raise InvalidInputError(f"attack {name!r} returned shape {x_hat.shape}; the target's "
                                f"upload has shape {y.shape}")
    if not np.isfinite(x_hat).all():
        raise InvalidInputError(f"attack {name!r} returned NaN or Inf")
    return x_hat


def attack_all(view: AttackerView, attacks: Mapping[str, Attack] | None = None) -> AttackRun:
    """Run every attack in ``attacks`` (default :func:`available_attacks`) against every target
    of ``view``; an attack returning None for the method is left out."""
    attacks = available_attacks() if attacks is None else attacks
    run = AttackRun()
    for name, attack in attacks.items():
        try:
            per_target: dict[int, np.ndarray] = {}
            for i in view.targets:
                x_hat = attack.reconstruct(view, i)
                if x_hat is None:
                    break
                per_target[i] = _checked(name, x_hat, view.data[i])
            else:
                if view.targets:
                    run.reconstructions[name] = per_target
        except NotApplicable as why:
            run.skipped[name] = str(why)
    if view.method.uses_anchor:
        for attr in ("noise_level", "estimated_noise_level"):
            try:
                setattr(run, attr, getattr(view, attr))
            except NotApplicable:
                pass
    return run


def run_attacks(
    method: Method | str,
    disclosure: Disclosure,
    data: Sequence[np.ndarray],
    anchors: Sequence[np.ndarray | None] | None = None,
    rotations: np.ndarray | None = None,
    *,
    attacks: Mapping[str, Attack] | None = None,
) -> dict[str, dict[int, np.ndarray]]:
    """Every attack that applies to ``method`` against every non-colluding participant.

    Parameters
    ----------
    method, disclosure, data, anchors, rotations
        As for :class:`AttackerView`.
    attacks : mapping, optional
        The attacks to run (default: built-ins and plug-ins, :func:`available_attacks`).

    Returns
    -------
    dict
        ``{attack name: {target index i: X^_i (n_i, d)}}`` (empty for I-GDP unless a plug-in
        applies to it).
    """
    view = AttackerView(method, disclosure, data, anchors, rotations)
    return attack_all(view, attacks).reconstructions


def known_secret_attack(y: np.ndarray, key: GdpKey) -> np.ndarray:
    """C-GDP known-secret inversion ``X^_i = (Y_i - 1 Psi^T) O^T`` with the disclosed common key."""
    y = as_matrix(y, "data upload", cols=key.dim)
    return (y - key.translation) @ key.rotation.T


def known_anchor_attack(y: np.ndarray, b: np.ndarray, anchor: np.ndarray) -> np.ndarray:
    """Algorithm 3 against one target: ``O^_i = Ac^+ Bc_i``,
    ``X^_i = (Y_i - 1 Psi^_i^T) O^_i^T`` (exact without noise)."""
    anchor = as_matrix(anchor, "anchor")
    a, ac = center_rows(anchor)
    bi, bc = center_rows(as_matrix(b, "anchor upload", rows=anchor.shape[0],
                                   cols=anchor.shape[1]))
    o_hat = np.linalg.pinv(ac) @ bc
    return (as_matrix(y, "data upload", cols=anchor.shape[1]) - (bi - o_hat.T @ a)) @ o_hat.T


def relative_error(x_hat: np.ndarray, x: np.ndarray) -> float:
    """``||X^ - X||_F / ||X||_F``."""
    x = np.asarray(x, dtype=float)
    x_hat = np.asarray(x_hat, dtype=float)
    if x.shape != x_hat.shape:
        raise InvalidInputError(f"reconstruction shape {x_hat.shape} != original {x.shape}")
    return float(np.linalg.norm(x_hat - x) / np.linalg.norm(x))

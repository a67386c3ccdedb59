"""Reconstruction attacks against the participants: of the analyst with a colluding participant,
of the analyst alone with a little side knowledge, and the interface through which other
packages add their own.

Each attack declares its threat (:data:`THREATS`): what the attacker holds besides the uploads
and the analyst's alignment. ``colluder``: a colluding participant's disclosure (the paper's
Definition 2.2). ``analyst``: the analyst alone, knowing ``m`` records of the target (not where
they are). ``public``: the analyst alone with a public sample of the population. ``uploads``:
the analyst alone with the uploads and nothing else (allowed under every other threat too).
Side knowledge comes in :class:`SideKnowledge`.

The colluder ``c`` discloses its data ``X_c``, its secret state ``(O_c, Psi_c, noise)`` and the
anchor ``A``; several colluders disclose jointly (:class:`AttackerView` takes their
disclosures: the record prior pools their records, ``am`` calibrates on all their keys).
Let ``a = A^T 1 / r``, ``Ac = A - 1 a^T``, ``b_i = B_i^T 1 / r``, ``Bc_i = B_i - 1 b_i^T``;
every anchor attack estimates ``O^_i`` then ``Psi^_i = b_i - O^_i^T a`` and inverts the data
upload ``Y_i``. Decoding through ``F^+`` is left to :func:`common.gdp.decode`.

Built-in attacks (:data:`ATTACK_NAMES`; formulas in SPEC.md section 3):

* ``known_secret`` (C-GDP variants): the disclosed common key inverts every upload.
* ``known_anchor`` (Algorithm 3), ``mp``, ``op``, ``am``: the paper's attacks (``mp``, ``op``
  and ``am`` are the three it evaluates against anchor noise, :data:`PAPER_ANCHOR_ATTACKS`).
* ``op_scaled``: OP divided by the expected polar shrinkage ``alpha(d, v)``.
* ``known_anchor_recentered``: known-anchor with the participant-level mean error removed by
  James-Stein shrinkage towards the colluder's record mean.
* ``ml``: the maximum-likelihood key from both uploads (:mod:`common.likelihood`), multi-start;
  its convergence per target is in :attr:`AttackRun.diagnostics`.

Built-in attacks without a colluder (:mod:`common.analyst_attacks`; every method, I-GDP
included, because they read only the data uploads):

* ``known_input_<m>`` (threat ``analyst``): ``m`` known records of the target located among
  its upload's rows by the pairwise distances GDP preserves, then centred Procrustes; exact from
  ``m = d + 1`` records without data noise (:data:`DEFAULT_KNOWN_RECORDS` sizes unless chosen).
* ``known_input_label_<m>`` (threat ``analyst``): the same, each known record placed only in a
  row with its own label (labels travel in the clear with every upload).
* ``known_input_label_spectral_<m>`` (threat ``analyst``): the same, decoded from the upload's
  spectral filter (the principal directions above the private-data noise's edge).
* ``distance_match_<m>`` (threat ``analyst``): a pool of candidate records placed among the
  target's rows by their distances to its ``m`` located known records (within labels when
  known), then the known-input decoder from every placed record: the exact key from few
  known records under anchor noise, which leaves every distance exact.
* ``ica`` (threat ``uploads``): FastICA on the target's upload alone, exact up to estimation
  error when the attributes are independent and skewed (a heuristic on pixels). It needs no
  side knowledge, so it is offered only when asked (:func:`available_attacks` ``uploads``; the
  bench's sweeps ask).
* ``known_sample`` (threat ``public``): principal axes of the target's upload matched with a
  public sample's, signs by skewness, refined by Wasserstein-Procrustes.
* ``known_sample_pooled`` (threat ``public``): the same fitted on every participant's rows in the
  analyst's common frame (the stacked uploads for C-GDP, ``Z`` for AA-I-GDP; none for I-GDP),
  then applied to the target's rows.

Plug-in attacks
---------------
A package registers a callable under the entry-point group ``noisyanchor.attacks``
(:mod:`common.plugins`)::

    def my_attack(view: AttackerView, target: int) -> numpy.ndarray | None: ...

It receives everything the analyst holds (:class:`AttackerView`: the method, the colluder's
disclosure when there is one, every upload, the analyst's rotations, the anchor-noise level,
side knowledge) and one target index ``i``, and returns the reconstruction ``X^_i`` of that
target's records in the working space (``n_i x d``, the shape of ``Y_i``), or None when it
does not apply to ``view.method``. It may instead register an :class:`Attack` (to mark it as one
of the paper's attacks, to describe it, or to declare a threat other than ``colluder``). An
attack that needs what the view lacks raises :class:`NotApplicable` (``view.colluder``,
``view.known_records`` and ``view.public_sample`` do).
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

from noisyanchor.common.analyst_attacks import (
    decode_located,
    distance_match_attack,
    ica_attack,
    known_sample_attack,
    locate_known_records,
    spectral_filter,
)
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
#: What an attack needs besides the uploads and the analyst's alignment, by threat name.
THREATS = {
    "colluder": "the analyst with a colluding participant's disclosure (records, key, anchor)",
    "analyst": "the analyst alone, knowing m records of the target (not where they are)",
    "public": "the analyst alone, with a public sample of the population",
    "uploads": "the analyst alone, with the uploads only (allowed under every threat above)",
}
#: Known-record counts ``m`` of the built-in known-input attacks unless a caller chooses.
DEFAULT_KNOWN_RECORDS = (2, 8, 17)
#: Name of the known-input attack with ``m`` known records.
KNOWN_INPUT_PREFIX = "known_input_"
#: Name of the distance-matching attack with ``m`` known records.
DISTANCE_MATCH_PREFIX = "distance_match_"


@dataclass(frozen=True)
class SideKnowledge:
    """What an attacker holds without any colluder, beyond the uploads.

    Attributes
    ----------
    known_records : mapping of int to (m_i, d) ndarray
        Records of target ``i`` the attacker knows, in the working space (``X_i F``), in no
        particular order and not knowing their rows; the known-input attack with ``m`` uses the
        first ``m``.
    public : (N, d) ndarray or None
        A public sample of the population in the working space, disjoint from the targets'.
    data_noise : float
        ``sigma`` of private-data noise (a public protocol parameter; 0 without).
    labels : mapping of int to (n_i,) ndarray
        Labels of target ``i``'s upload rows, in upload order: they travel in the clear with
        every upload.
    known_labels : mapping of int to (m_i,) ndarray
        Labels of the known records (the attacker knows the records, hence their labels).
    candidates : (N, d) ndarray or None
        A pool of records the attacker holds without knowing whose they are (working space):
        some are members of a target, some of no one's upload.
    candidate_labels : (N,) ndarray or None
        Their labels.
    """

    known_records: Mapping[int, np.ndarray] = field(default_factory=dict)
    public: np.ndarray | None = None
    data_noise: float = 0.0
    labels: Mapping[int, np.ndarray] = field(default_factory=dict)
    known_labels: Mapping[int, np.ndarray] = field(default_factory=dict)
    candidates: np.ndarray | None = None
    candidate_labels: np.ndarray | None = None


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
    """Everything the analyst holds (with a colluder's disclosure, or alone), with the quantities
    several attacks share computed once per run (``a``, ``Ac``, ``Ac^+``, ``Q^``, ``v``, the
    record prior, the pooled known-sample decoder) and once per target (``b_i``, ``Bc_i``,
    ``Ac^+ Bc_i``).

    Parameters
    ----------
    method : Method or str
    disclosure : Disclosure, sequence of Disclosure, or None
        The colluder's disclosure, or those of ``k`` colluders used jointly (every one is left
        out of the targets; their records pool into the record prior, their keys into the
        alignment-map calibration ``Q^ = Pi(sum_c O_c R_c)``); None: the analyst alone (every
        participant is a target and colluder attacks are skipped).
    data : list of p (n_i, d) ndarrays
        Uploaded ``Y_i``.
    anchors : list of p (r, d) ndarrays, optional
        Uploaded ``B_i`` (AA-I-GDP variants).
    rotations : (p, d, d) ndarray, optional
        The analyst's alignment ``R_i`` (needed by ``am`` and the pooled known-sample attack).
    side : SideKnowledge, optional
        Known records and a public sample (the attacks without a colluder).
    """

    def __init__(self, method: Method | str,
                 disclosure: Disclosure | Sequence[Disclosure] | None,
                 data: Sequence[np.ndarray], anchors: Sequence[np.ndarray | None] | None = None,
                 rotations: np.ndarray | None = None, *,
                 side: SideKnowledge | None = None) -> None:
        self.method = Method.parse(method)
        #: Every colluder's disclosure (empty for the analyst alone).
        self.disclosures: tuple[Disclosure, ...] = (
            () if disclosure is None else (disclosure,) if isinstance(disclosure, Disclosure)
            else tuple(disclosure))
        #: The first colluder's disclosure (None for the analyst alone).
        self.disclosure = self.disclosures[0] if self.disclosures else None
        self.side = SideKnowledge() if side is None else side
        p = len(data)
        colluders = [dc.colluder for dc in self.disclosures]
        for c in colluders:
            if not 0 <= c < p:
                raise InvalidInputError(f"colluder index {c} is not a participant index in "
                                        f"[0, {p})")
        if len(set(colluders)) != len(colluders):
            raise InvalidInputError(f"colluder indices {colluders} repeat a participant")
        self.data = [as_matrix(y, "data upload") for y in data]
        self.anchors: list[np.ndarray] | None = (
            None if anchors is None or any(b is None for b in anchors)
            else [np.asarray(b) for b in anchors])
        self.rotations = rotations
        self.targets = [i for i in range(p) if i not in colluders]
        self._parts: dict[int, tuple[np.ndarray, np.ndarray, np.ndarray]] = {}
        #: ``{attack name: {target: JSON-ready facts}}`` attacks leave with :meth:`note`.
        self.diagnostics: dict[str, dict[int, dict[str, Any]]] = {}
        #: Scratch space an attack may fill once and reuse for every target, by attack name.
        self.cache: dict[str, Any] = {}
        check_nonnegative(self.side.data_noise, "data noise sigma")
        for dc in self.disclosures:
            if dc.anchor_noise is not None:
                check_nonnegative(dc.anchor_noise, "anchor noise level v")
        if self.method.uses_anchor and self.disclosures:
            if any(dc.anchor is None for dc in self.disclosures) or self.anchors is None:
                raise InvalidInputError(f"attacks on {self.method.value} need the disclosed "
                                        "anchor and the anchor uploads")
            first = np.asarray(self.disclosures[0].anchor)
            differ = [dc.colluder for dc in self.disclosures[1:]
                      if not np.array_equal(np.asarray(dc.anchor), first)]
            if differ:
                raise InvalidInputError(f"colluder(s) {differ} disclosed another anchor than "
                                        f"colluder {colluders[0]}")

    @property
    def colluder(self) -> Disclosure:
        """The colluder's disclosure (:class:`NotApplicable` for the analyst alone)."""
        if self.disclosure is None:
            raise NotApplicable("needs a colluder's disclosure; the analyst is alone")
        return self.disclosure

    def known_records(self, i: int, m: int) -> np.ndarray:
        """The first ``m`` records of target ``i`` the attacker knows (working space)."""
        known = self.side.known_records.get(i)
        if known is None or len(known) < m:
            have = 0 if known is None else len(known)
            raise NotApplicable(f"needs {m} known records of participant {i}; the attacker "
                                f"knows {have}")
        return as_matrix(known, "known records", cols=self.dim)[:m]

    def record_labels(self, i: int, m: int) -> tuple[np.ndarray, np.ndarray]:
        """Labels of target ``i``'s upload rows and of its first ``m`` known records."""
        labels, known = self.side.labels.get(i), self.side.known_labels.get(i)
        if labels is None or known is None or len(known) < m:
            raise NotApplicable(f"needs the labels of participant {i}'s upload and of its {m} "
                                "known records")
        return np.asarray(labels), np.asarray(known)[:m]

    @property
    def candidate_pool(self) -> np.ndarray:
        """The pool of candidate records (working space)."""
        if self.side.candidates is None:
            raise NotApplicable("needs a pool of candidate records")
        return as_matrix(self.side.candidates, "candidate pool", cols=self.dim)

    @property
    def public_sample(self) -> np.ndarray:
        """The public sample of the population (working space)."""
        if self.side.public is None:
            raise NotApplicable("needs a public sample of the population")
        return as_matrix(self.side.public, "public sample", cols=self.dim)

    def note(self, attack: str, i: int, facts: dict[str, Any]) -> None:
        """Record JSON-ready facts of ``attack`` on target ``i`` (e.g. convergence)."""
        self.diagnostics.setdefault(attack, {})[i] = facts

    @cached_property
    def common_frame(self) -> list[np.ndarray] | None:
        """Every participant's rows in the analyst's common frame, or None when the method has
        none (I-GDP): the uploads themselves for C-GDP (one key), ``(Y_j - 1 b_j^T) R_j`` for
        AA-I-GDP (the rows of ``Z`` up to a common shift)."""
        if self.method.shared_key:
            return self.data
        if not self.method.uses_anchor:
            return None
        if self.rotations is None or self.anchors is None:
            raise NotApplicable("needs the analyst's alignment R_i and the anchor uploads")
        return [(y - np.asarray(b).mean(axis=0)) @ np.asarray(r)
                for y, b, r in zip(self.data, self.anchors, self.rotations, strict=True)]

    @property
    def dim(self) -> int:
        """Working dimension ``d``."""
        return self.data[0].shape[1]

    @cached_property
    def anchor_parts(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """The checked disclosed anchor ``A`` with ``a``, ``Ac`` and ``Ac^+``."""
        anchor = as_matrix(self.colluder.anchor, "anchor")
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
        """``v``: disclosed (by the first colluder that discloses it), else
        :attr:`estimated_noise_level`."""
        self.colluder  # noqa: B018 (raises NotApplicable for the analyst alone)
        v = next((dc.anchor_noise for dc in self.disclosures if dc.anchor_noise is not None),
                 None)
        return self.estimated_noise_level if v is None else float(v)

    @cached_property
    def record_prior(self) -> RecordPrior:
        """Gaussian model of the records fitted on every colluder's disclosed ``X_c``, pooled."""
        self.colluder  # noqa: B018 (raises NotApplicable for the analyst alone)
        return RecordPrior.from_records(np.vstack([dc.data for dc in self.disclosures]))

    @cached_property
    def am_calibration(self) -> np.ndarray:
        """``Q^ = Pi(sum_c O_c R_c)`` over the colluders: each ``O_c R_c`` is the common frame's
        map up to colluder ``c``'s own alignment error, and the sum averages the ``k`` errors
        (one colluder: ``Pi(O_c R_c)``)."""
        self.colluder  # noqa: B018 (raises NotApplicable for the analyst alone)
        return polar_factor(sum(np.asarray(dc.key.rotation) @ self.alignment(dc.colluder)
                                for dc in self.disclosures))

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
    threat : str
        What it needs besides the uploads: a key of :data:`THREATS`.
    """

    name: str
    reconstruct: Callable[[AttackerView, int], np.ndarray | None]
    paper: bool = False
    description: str = ""
    threat: str = "colluder"

    def __post_init__(self) -> None:
        if self.threat not in THREATS:
            raise InvalidInputError(f"attack {self.name!r}: threat {self.threat!r} is not one "
                                    f"of {', '.join(THREATS)}")


def _known_secret(view: AttackerView, i: int) -> np.ndarray | None:
    """C-GDP known-secret inversion ``X^_i = (Y_i - 1 Psi^T) O^T`` with the disclosed key."""
    if not view.method.shared_key:
        return None
    return known_secret_attack(view.data[i], view.colluder.key)


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
    view.note("ml", i, est.diagnostics())
    return view.invert(i, est.rotation, est.translation)


def known_input(m: int, *, by_label: bool = False, spectral: bool = False) -> Attack:
    """The known-input attack with ``m`` known records of the target, named
    ``known_input_<m>`` (:mod:`common.analyst_attacks.known_input`).

    Side information: the upload's rows (the distances between them) and ``m`` known records;
    with ``by_label`` (named ``known_input_label_<m>``) also the labels every upload carries in
    the clear, each known record placed only in a row with its label; with ``spectral`` (named
    ``known_input_label_spectral_<m>`` with ``by_label``) the records are located in the raw
    upload and decoded from its spectral filter against private-data noise
    (:mod:`common.analyst_attacks.spectral`; ``sigma`` is a public parameter)."""
    if m < 2:
        raise InvalidInputError(f"the known-input attack needs m >= 2 known records, got {m}")
    name = f"{KNOWN_INPUT_PREFIX}{'label_' if by_label else ''}{'spectral_' if spectral else ''}{m}"

    def reconstruct(view: AttackerView, i: int) -> np.ndarray:
        """``m`` known records located by distances (and labels), then centred Procrustes
        (of the spectrally filtered upload when asked)."""
        labels, known_labels = view.record_labels(i, m) if by_label else (None, None)
        y, known, sigma = view.data[i], view.known_records(i, m), view.side.data_noise
        loc = locate_known_records(y, known, data_noise=sigma, labels=labels,
                                   known_labels=known_labels)
        facts: dict[str, Any] = {"location_score": loc.score, "runner_up_score": loc.runner_up}
        if spectral:
            filt = spectral_filter(y, sigma)
            y = filt.filtered
            facts["kept_directions"] = filt.kept
        res = decode_located(y, known, loc)
        view.note(name, i, {"rank": res.rank, **facts})
        return res.reconstruction

    how = "distances within labels" if by_label else "distances"
    then = "Procrustes on the spectrally filtered upload" if spectral else "Procrustes"
    return Attack(name, reconstruct, threat="analyst",
                  description=f"{m} known records located by {how}, then {then}")


def distance_match(m: int) -> Attack:
    """Distance matching with ``m`` known records of the target, named
    ``distance_match_<m>`` (:mod:`common.analyst_attacks.distance_match`).

    Side information: the upload's rows, ``m`` known records, the candidate pool
    (:attr:`SideKnowledge.candidates`), and the labels of the rows, the known records and the
    candidates when the attacker has all three (every upload carries its labels in the
    clear)."""
    if m < 2:
        raise InvalidInputError(f"distance matching needs m >= 2 known records, got {m}")
    name = f"{DISTANCE_MATCH_PREFIX}{m}"

    def reconstruct(view: AttackerView, i: int) -> np.ndarray:
        """Candidates placed by their distances to ``m`` located known records, then the
        known-input decoder from every placed record."""
        known, pool, side = view.known_records(i, m), view.candidate_pool, view.side
        by_label = (side.candidate_labels is not None and i in side.labels
                    and i in side.known_labels)
        labels, known_labels = view.record_labels(i, m) if by_label else (None, None)
        res = distance_match_attack(view.data[i], known, pool, data_noise=side.data_noise,
                                    labels=labels, known_labels=known_labels,
                                    candidate_labels=side.candidate_labels if by_label else None)
        view.note(name, i, {"placed": int(np.sum(res.rows >= 0)), "rank": res.decoded.rank,
                            "threshold": res.threshold})
        return res.decoded.reconstruction

    return Attack(name, reconstruct, threat="analyst",
                  description=f"a candidate pool placed by distances to {m} known records")


def _known_sample(view: AttackerView, i: int) -> np.ndarray:
    """Principal axes of ``Y_i`` matched with the public sample's (signs by skewness), refined
    by Wasserstein-Procrustes (:mod:`common.analyst_attacks.known_sample`)."""
    res = known_sample_attack(view.data[i], view.public_sample)
    view.note("known_sample", i, _sample_facts(res))
    return res.decode(view.data[i])


def _ica(view: AttackerView, i: int) -> np.ndarray:
    """FastICA on ``Y_i`` alone (:mod:`common.analyst_attacks.ica`); seeded by the target's
    index so that a draw's reconstruction does not depend on the order targets are attacked."""
    res = ica_attack(view.data[i], np.random.default_rng(i))
    view.note("ica", i, {"kept_directions": res.kept})
    return res.reconstruction


def _sample_facts(res: Any) -> dict[str, Any]:
    return {"cost": res.cost, "pca_cost": res.pca_cost, "chosen_start": res.chosen_start,
            "iterations": res.iterations, "ambiguous_signs": res.ambiguous_signs,
            "unidentified_axes": res.unidentified_axes}


def _known_sample_pooled(view: AttackerView, i: int) -> np.ndarray | None:
    """The known-sample decoder fitted on every participant's rows in the analyst's common
    frame (:attr:`AttackerView.common_frame`), applied to target ``i``'s rows."""
    frame = view.common_frame
    if frame is None:
        return None
    if "known_sample_pooled" not in view.cache:  # one decoder for every target
        # p times the rows of one target: skewness signs are surer, so one flip is tried.
        view.cache["known_sample_pooled"] = known_sample_attack(np.vstack(frame),
                                                                view.public_sample, flips=1)
    res = view.cache["known_sample_pooled"]
    view.note("known_sample_pooled", i, _sample_facts(res))
    return res.decode(frame[i])


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
    Attack("ml", _ml, description="maximum likelihood from B_i and Y_i (multi-start)"),
)
#: Names of the built-in colluder attacks (JSON keys everywhere).
ATTACK_NAMES = tuple(a.name for a in BUILTIN_ATTACKS)
#: Built-in attacks of the analyst with public data, in report order.
SAMPLE_ATTACKS: tuple[Attack, ...] = (
    Attack("known_sample", _known_sample, threat="public",
           description="principal axes and skewness vs a public sample, Wasserstein-Procrustes"),
    Attack("known_sample_pooled", _known_sample_pooled, threat="public",
           description="known-sample fitted on the analyst's common frame"),
)
#: Built-in attacks of the analyst with the uploads only.
UPLOAD_ATTACKS: tuple[Attack, ...] = (
    Attack("ica", _ica, threat="uploads",
           description="FastICA on the target's upload alone (independent attributes)"),
)


def available_attacks(*, plugins: bool = True,
                      known_records: Sequence[int] = DEFAULT_KNOWN_RECORDS,
                      uploads: bool = False) -> dict[str, Attack]:
    """Built-in attacks (the colluder's, ``known_input_<m>`` for every ``m`` in
    ``known_records``, the known-sample ones, and with ``uploads`` those on the uploads alone:
    ICA, which needs no side knowledge and so would run wherever it is offered), then every
    plug-in of the ``noisyanchor.attacks`` entry-point group (module docstring), by name."""
    out = {a.name: a for a in BUILTIN_ATTACKS}
    sizes = sorted(set(known_records))
    out.update((a.name, a) for a in (*(known_input(m) for m in sizes),
                                     *(known_input(m, by_label=True) for m in sizes),
                                     *(known_input(m, by_label=True, spectral=True)
                                       for m in sizes),
                                     *(distance_match(m) for m in sizes),
                                     *SAMPLE_ATTACKS, *(UPLOAD_ATTACKS if uploads else ())))
    if plugins:
        reserved = (*ATTACK_NAMES, *(a.name for a in (*SAMPLE_ATTACKS, *UPLOAD_ATTACKS)))
        for name, obj in load_plugins(ATTACK_GROUP, reserved=reserved).items():
            if name.startswith((KNOWN_INPUT_PREFIX, DISTANCE_MATCH_PREFIX)):
                raise InvalidInputError(f"plug-in attack {name!r}: names starting with "
                                        f"{KNOWN_INPUT_PREFIX!r} or {DISTANCE_MATCH_PREFIX!r} "
                                        "are the built-in attacks' with known records")
            if isinstance(obj, Attack):
                out[name] = Attack(name, obj.reconstruct, obj.paper, obj.description, obj.threat)
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
    diagnostics : dict
        ``{attack name: {target index i: facts}}`` the attacks recorded (the ML attack's starts
        and convergence, the known-input location scores, the known-sample costs).
    """

    reconstructions: dict[str, dict[int, np.ndarray]] = field(default_factory=dict)
    skipped: dict[str, str] = field(default_factory=dict)
    noise_level: float | None = None
    estimated_noise_level: float | None = None
    diagnostics: dict[str, dict[int, dict[str, Any]]] = field(default_factory=dict)


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
    of ``view``; an attack returning None for the method is left out. An attack that is not
    applicable to some targets only (e.g. known records of one participant) keeps the others'
    reconstructions, and ``skipped`` says which targets it left and why."""
    attacks = available_attacks() if attacks is None else attacks
    run = AttackRun()
    for name, attack in attacks.items():
        per_target: dict[int, np.ndarray] = {}
        missed: dict[int, str] = {}
        for i in view.targets:
            try:
                x_hat = attack.reconstruct(view, i)
            except NotApplicable as why:
                missed[i] = str(why)
                continue
            if x_hat is None:
                break
            per_target[i] = _checked(name, x_hat, view.data[i])
        else:
            if per_target:
                run.reconstructions[name] = per_target
            if missed and per_target:
                run.skipped[name] = "; ".join(f"participant {i}: {why}"
                                              for i, why in missed.items())
            elif missed:
                run.skipped[name] = next(iter(missed.values()))
    run.diagnostics = {a: facts for a, facts in view.diagnostics.items()
                       if a in run.reconstructions}
    if view.method.uses_anchor and view.disclosure is not None:
        for attr in ("noise_level", "estimated_noise_level"):
            try:
                setattr(run, attr, getattr(view, attr))
            except NotApplicable:
                pass
    return run


def run_attacks(
    method: Method | str,
    disclosure: Disclosure | None,
    data: Sequence[np.ndarray],
    anchors: Sequence[np.ndarray | None] | None = None,
    rotations: np.ndarray | None = None,
    *,
    attacks: Mapping[str, Attack] | None = None,
    side: SideKnowledge | None = None,
) -> dict[str, dict[int, np.ndarray]]:
    """Every attack that applies to ``method`` against every non-colluding participant.

    Parameters
    ----------
    method, disclosure, data, anchors, rotations, side
        As for :class:`AttackerView`.
    attacks : mapping, optional
        The attacks to run (default: built-ins and plug-ins, :func:`available_attacks`).

    Returns
    -------
    dict
        ``{attack name: {target index i: X^_i (n_i, d)}}`` (empty for I-GDP unless a plug-in
        applies to it).
    """
    view = AttackerView(method, disclosure, data, anchors, rotations, side=side)
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

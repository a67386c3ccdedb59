"""Centered generalized orthogonal Procrustes (GOPP): spectral initialisation, generalized power
method (GPM) and a certificate of global optimality.

The analyst maximises ``tr(R^T G R)`` over stacked ``R = [R_1; ...; R_p]``, ``R_i in O(d)``, where
``G_ij = Bc_i^T Bc_j`` is built from the centered uploaded anchors ``Bc_i = B_i - 1 b_i^T``.

``G`` is never formed: with the ``m x pd`` factor ``K`` (``K = [Bc_1, ..., Bc_p]`` when
``r <= pd``, else the triangular factor of its thin QR), ``G = K^T K`` and
``G R = K^T (K R)``; the top-``d`` eigenvectors of ``G`` come from the ``m x m`` problem ``K K^T``.
Each GPM step splits the blocks across worker threads (one per core, BLAS held to one thread
each); the certificate takes the cheapest exact path, matrix-free (products with ``K`` and
``K^T`` only) for large ``m`` (:mod:`common.gopp_certificate`). For large problems, once the
steps are small, ``G R`` is carried forward by float32 increments ``K^T (K Delta)`` within a
drift budget, with exact float64 refreshes (:class:`_GpmStep`). The default stopping rule ends
the iterations once the objective still to gain is predicted to be negligible, no later than the
relative step rule (:class:`_StoppingRule`). The extrapolated GPM (:class:`_Momentum`) cuts
iterations without lowering the objective: opt-in from the start
(``accelerate``), and by default (``method="auto"``) once the plain GPM is seen to contract
slowly, as it does above ``v_PT``, where it then carries ``G R`` by float32 increments too and
the default rule also stops once the objective rises by less than ``10 eps`` of itself per
step over 20 steps.

References: SPEC.md section 2; noisy-anchor GDP paper, Algorithm 4 and Section 4.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

# scipy is imported where it is used: it costs a process's start a second (issue 22).
from noisyanchor.common.blas import (
    available_cpus,
    blas_threads,
    eigh_threads,
    gemm_threads,
    once,
    worker_budget,
)
from noisyanchor.common.errors import InvalidInputError
from noisyanchor.common.gopp_certificate import (
    LOBPCG_BLOCK,
    Certificate,
    certificate_path,
    certify,
)
from noisyanchor.common.linalg import (
    POLAR_ROUTES,
    BlockWorkers,
    center_rows,
    extreme_eigh,
    polar_factor,
    polar_route,
)
from noisyanchor.common.validation import (
    check_anchor_rows,
    check_choice,
    check_count,
    check_positive,
    stack_blocks,
)

#: Consecutive plain GPM steps whose last ratio estimates the contraction rate (accelerated GPM).
MOMENTUM_WARMUP = 3

#: Largest contraction rate the accelerated GPM assumes (``beta`` stays below about 0.98).
MOMENTUM_MAX_RATE = 0.9999

#: ``method="auto"`` switches the extrapolated steps on once two consecutive ratios of plain step
#: sizes are at least this: the plain GPM then contracts so slowly (about 0.99 per step above
#: ``v_PT`` at the CelebA size; 0.2-0.5 below it, where nothing changes) that the paper's cap of
#: 500 iterations ends far from the fixed point (issue 24).
SLOW_CONTRACTION_RATE = 0.9

#: Plain steps ``method="auto"`` always takes first (the spectral start's transient).
SLOW_MIN_STEPS = 5

#: Accepted values of ``solve_gopp(..., method=...)``.
METHODS = ("auto", "gpm")

#: Steps per window of the gain rule (:class:`_StoppingRule`): once ``method="auto"`` has
#: switched, the objective gained over the last window of steps says how fast it still rises.
GAIN_WINDOW = 20

#: The gain rule stops once the objective rose, on average over the last ``GAIN_WINDOW`` steps,
#: by at most this many times ``eps`` (``tol``) of itself per step: 1e-6 at the default
#: ``eps = 1e-7``. A rate, not a bound on what is left: above ``v_PT`` the GPM converges
#: sublinearly at the CelebA size and keeps rising slowly. Measured (issue 31, traces of the
#: default's steps run on to a fixed point or 200 steps): at p=10, d=400, r=1600, 1.5 v_PT it
#: stops after 112 steps, 1.6e-5 relative above the paper's 500-iteration GPM and 3.9e-5 below
#: where it stands after 200 steps; on 13 smaller draws above v_PT (p=5-30, d=10-60) at most
#: 5.2e-6 below the capped GPM and 5.3e-6 below the fixed point. It replaced a prediction of
#: what is left from the decay of the gains (``S_2 q / (1 - q)`` at 1e-5), which on the same
#: traces stopped after 149 steps at the CelebA size and 6.9e-5 below the capped GPM at p=10,
#: d=50.
GAIN_RATE_PER_TOL = 10.0

#: The gain rule applies only while the iterates still move: the median of the last 5 step sizes
#: ``||R^(t+1) - R^(t)||_F`` of its window at least this fraction of the median of its first 5
#: (measured 0.6-1.0 from step 40 on at the CelebA size above ``v_PT``). A run contracting
#: faster heads for a fixed point, which the step and objective rules reach (at p=3, d=16,
#: r=200, 0.9 v_PT, the steps shrink 60-fold over 20 steps while the objective already rises
#: less than 1e-6 per step, 3e-5 away from the fixed point entrywise).
GAIN_STALL_RATIO = 0.5

#: While the extrapolated steps run (a slow contraction, far from the fixed point), the carried
#: ``G R`` may drift by this fraction of the relative step ``||Delta||_F / ||R||_F`` before an
#: exact refresh (the fixed budget ``PRODUCT_DRIFT_BUDGET`` is for small steps): an error of
#: 1e-4 of a step moves the next polar factor by less than a thousandth of a step, and the gain
#: that decides whether an extrapolation overshot is still exact to a few digits.
SLOW_DRIFT_PER_STEP = 1e-4

#: Smallest estimated flop count of one GPM step that is split across worker threads.
PARALLEL_MIN_FLOPS = 5e7

#: Relative tolerance (times ``||G||_2``) of the certificate ``lambda_min(Lambda - G) >= -tol``.
CERTIFICATE_RTOL = 1e-6

#: Smallest flop count of one exact product ``G R`` for which ``precision="auto"`` carries
#: ``G R`` forward by float32 increments (below it the float64 product is cheap anyway).
MIXED_MIN_FLOPS = 1e9

#: Estimated relative error ``||E||_F / ||G R||_F`` that one float32 increment ``K^T (K Delta)``
#: adds, per unit of relative step ``||Delta||_F / ||R||_F``: 16 float32 unit roundoffs, four
#: times the largest rate measured (1.8 to 3.9 roundoffs from p=10, d=400, r=1600 to p=50,
#: d=100, r=400, below and well above v_PT, and on pure-noise anchors).
INCREMENT_ERROR_RATE = 16 * 2.0**-24

#: Largest estimated relative drift of the carried ``G R`` before an exact float64 refresh.
PRODUCT_DRIFT_BUDGET = 1e-10

#: Accepted values of ``solve_gopp(..., precision=...)``.
PRECISIONS = ("auto", "double", "mixed")

#: Steps within this factor of the step rule's bound use the exact product, so that the step
#: rule is only ever met on a step computed from an exact ``G R``.
EXACT_NEAR_TOL = 10.0

#: Accepted values of ``solve_gopp(..., stopping=...)`` (:class:`_StoppingRule`).
STOPPING_RULES = ("objective", "relative", "absolute")

#: The objective rule stops once the objective still to gain is predicted at most this fraction
#: of the objective: 100 times below the 1e-10 relative agreement with the paper's rule that
#: issue 14 asks for (measured 5e-13 and 5e-14 at the two benchmark sizes, benchmarks/bench_gopp).
OBJECTIVE_GAP_RTOL = 1e-12


@dataclass(frozen=True)
class GoppResult:
    """Solution and diagnostics of the centered GOPP (SPEC.md section 2).

    Attributes
    ----------
    rotations : (p, d, d) ndarray
        ``R_i``; the map is ``N_i(T) = (T - 1 b_i^T) R_i``.
    means : (p, d) ndarray
        ``b_i = B_i^T 1 / r``.
    iterations : int
        GPM iterations run after the spectral initialisation.
    converged : bool
        The stopping rule was met before ``max_iter``.
    objective : float
        ``tr(R^T G R)`` at the returned ``R``.
    fixed_point_residual : float
        ``||R^(T) - R^(T-1)||_F``.
    gopp_residual : float
        ``sum_i ||Bc_i||_F^2 - tr(R^T G R) / p`` (the GOPP loss at the solution).
    certificate_min_eig : float or None
        ``lambda_min(Lambda - G)`` with ``Lambda_ii = sym((G R)_i R_i^T)``; None if not computed;
        a proven upper bound of it, below ``-certificate_tol``, when the certificate stopped
        early (``certificate_early_exit``).
    certificate_tol : float
        Tolerance used: certified when ``certificate_min_eig >= -certificate_tol``.
    certified : bool
    seconds : float
        Wall time of initialisation, iterations and certificate.
    objective_trace : (iterations + 1,) ndarray
        Objective at the spectral start and after every GPM step.
    rejected_extrapolations : int
        Extrapolated steps replaced by the plain GPM step (``accelerate=True`` only; each cost
        one extra product with ``G``).
    certificate_seconds : float
        Wall time of the certificate alone (included in ``seconds``; 0 when not computed).
    mixed_precision_steps : int
        Steps whose product ``G R`` was carried forward by a float32 increment.
    product_drift : float
        Measured ``||G R_carried - G R||_F / ||G R||_F`` at the last iterate, before the exact
        final product replaced it (0 when the last product was exact).
    product_drift_estimate : float
        The solver's running estimate of that drift (the quantity held below
        ``PRODUCT_DRIFT_BUDGET``); tests check it bounds the measured drift.
    stopped_by : str
        ``"step"`` (a step rule), ``"objective"`` (the objective rule), ``"gain"`` (the gain
        rule of the extrapolated steps, :class:`_StoppingRule`) or ``"max_iter"``.
    stop_reason : str
        Why the iterations ended, with the measured quantity and its bound.
    blas_threads : dict
        Threads chosen (:mod:`common.blas`): ``workers`` (GPM block workers), and the BLAS threads
        of the ``start``, of the ``steps`` (each worker's) and of the ``certificate``.
    trace_seconds : (iterations + 1,) ndarray
        Seconds from the call's start at which each objective of ``objective_trace`` was known
        (a carried one; the last is made exact afterwards).
    certificate_path : str
        How the certificate was computed (:data:`common.gopp_certificate.CERTIFICATE_PATHS`;
        empty when not computed).
    method : str
        What ran: ``"gpm"`` (plain steps throughout) or ``"gpm+momentum"`` (extrapolated steps:
        ``accelerate=True``, or ``method="auto"`` after a slow contraction).
    switched_at : int or None
        Iteration after which ``method="auto"`` switched the extrapolated steps on.
    switch_reason : str
        Why (the measured contraction rate), empty when it did not.
    certificate_early_exit : str
        Why the certificate stopped before computing ``lambda_min`` (the bound that proved it
        below ``-certificate_tol``, :func:`common.gopp_certificate.certify`); empty when it ran
        to the end.
    polar_route : str
        How the polar factors were computed: ``"eigh"`` or ``"newton-schulz"``, the faster
        measured on this machine at this ``d`` (:func:`common.linalg.polar_route`).
    """

    rotations: np.ndarray
    means: np.ndarray
    iterations: int
    converged: bool
    objective: float
    fixed_point_residual: float
    gopp_residual: float
    certificate_min_eig: float | None
    certificate_tol: float
    certified: bool
    seconds: float
    objective_trace: np.ndarray
    rejected_extrapolations: int = 0
    certificate_seconds: float = 0.0
    mixed_precision_steps: int = 0
    product_drift: float = 0.0
    product_drift_estimate: float = 0.0
    stopped_by: str = "max_iter"
    blas_threads: dict[str, int] = field(default_factory=dict)
    certificate_path: str = ""
    trace_seconds: np.ndarray = field(default_factory=lambda: np.zeros(0))
    method: str = "gpm"
    switched_at: int | None = None
    switch_reason: str = ""
    stop_reason: str = ""
    certificate_early_exit: str = ""
    polar_route: str = "eigh"


class _GramOperator:
    """``G = K^T K`` in factored form; ``apply`` computes ``G R`` for stacked ``R``."""

    def __init__(self, bc: np.ndarray, idle: Callable[[], int] | None = None) -> None:
        import scipy.linalg

        p, r, d = bc.shape
        self.p, self.d = p, d
        k = np.ascontiguousarray(bc.transpose(1, 0, 2).reshape(r, p * d))
        if r > p * d:
            # A tall factor is compressed by QR: same Gram, fewer rows to multiply by.
            with blas_threads(gemm_threads(2.0 * r * (p * d) ** 2, idle)):
                k = scipy.linalg.qr(k, mode="r", check_finite=False)[0][: p * d]
        self.k = k

    @property
    def product_flops(self) -> float:
        """Flops of one exact product ``G R = K^T (K R)`` (two ``m x pd`` by ``pd x d`` GEMMs)."""
        return 4.0 * self.k.shape[0] * self.p * self.d * self.d

    def apply(self, r_blocks: np.ndarray) -> np.ndarray:
        """``(G R)_i = Bc_i^T sum_j Bc_j R_j`` for ``R`` given as ``(p, d, d)``."""
        s = self.k @ r_blocks.reshape(self.p * self.d, self.d)
        return (self.k.T @ s).reshape(self.p, self.d, self.d)

    def top_eigvecs(self) -> tuple[np.ndarray, float]:
        """Top-``d`` eigenvectors ``U`` (``pd x d``) of ``G`` and ``lambda_1(G)``, via ``K K^T``."""
        kkt = self.k @ self.k.T
        w, v = extreme_eigh(kkt, self.d, largest=True)
        w = np.clip(w, np.finfo(float).tiny, None)
        return (self.k.T @ v) / np.sqrt(w), float(w[-1])


def _objective(r_blocks: np.ndarray, gr: np.ndarray) -> float:
    """``tr(R^T G R) = sum_i <R_i, (G R)_i>``."""
    return float(np.vdot(r_blocks, gr))


def certificate_min_eig(op: _GramOperator, r_blocks: np.ndarray, gr: np.ndarray) -> float:
    """``lambda_min(Lambda - G)`` with ``Lambda_ii = sym((G R)_i R_i^T)`` (block diagonal), by
    the cheapest exact path (:mod:`common.gopp_certificate`)."""
    return _certify(op, r_blocks, gr).min_eig


def _certify(op: _GramOperator, r_blocks: np.ndarray, gr: np.ndarray,
             tol: float | None = None, threads: int | None = None) -> Certificate:
    with blas_threads(threads or _certificate_threads(op)):
        return certify(op.k, r_blocks, gr, tol=tol)


def _certificate_threads(op: _GramOperator, idle: Callable[[], int] | None = None) -> int:
    """BLAS threads of the certificate: by the order of its eigenproblems (``pd`` dense, ``m``
    secular), or by the size of one block product with ``K`` and ``K^T`` (matrix-free)."""
    m = op.k.shape[0]
    path = certificate_path(op.p, op.d, m)
    if path == "secular-matrix-free":
        return gemm_threads(4.0 * m * op.p * op.d * LOBPCG_BLOCK, idle)
    return eigh_threads(op.p * op.d if path == "dense" else m, idle)


def _worker_count(op: _GramOperator) -> int:
    """Worker threads wanted for one GPM step: one per CPU (at most ``p``) when the step (product
    plus ``p`` polar factors) is large enough, else 1 (:func:`common.blas.worker_budget` then
    fits them with the BLAS threads into the CPUs)."""
    flops = op.product_flops + 12.0 * op.p * op.d**3
    if flops < PARALLEL_MIN_FLOPS:
        return 1
    return min(available_cpus(), op.p)


@dataclass(frozen=True)
class _Step:
    """Outcome of one GPM step: ``R'``, the carried ``G R'``, ``||R' - R||_F``,
    ``tr(R'^T G R')``, the gain ``tr(R'^T G R') - tr(R^T G R)`` and the estimated relative drift
    of the carried ``G R'`` (0 when exact)."""

    rotations: np.ndarray
    gr: np.ndarray
    size: float
    objective: float
    gain: float
    drift: float


class _GpmStep:
    """One (extrapolated) generalized power step ``R' = Pi(M)`` blockwise, then ``G R'``,
    ``tr(R'^T G R')`` and the gain over ``R``.

    The ``p`` blocks are split in contiguous groups, one per worker thread: each worker takes
    the polar factors of its blocks, then its share ``K_g X_g`` of ``S = K X``; after the partial
    sums are added in a fixed order, each worker computes its rows ``K_g^T S``.

    The gain is ``<R' - R, G R' + G R>`` (``G`` symmetric), not the difference of two
    objectives: near a fixed point that difference cancels all but a few digits, while the
    inner product with the small step keeps them, even on carried products.

    With ``mixed=True`` the step may carry ``G R`` forward instead of recomputing it:
    ``G R' = G R + K^T (K Delta)`` with ``Delta = R' - R``, the increment in float32 (twice the
    GEMM rate of float64). The increment's error is proportional to ``||Delta||``, so once the
    steps are small it is far below float64's own when measured against ``G R``. The estimated
    drift (``INCREMENT_ERROR_RATE`` per unit relative step, summed) is held below
    ``PRODUCT_DRIFT_BUDGET``; past it, and for steps of size at most ``exact_below``, the
    float64 product is recomputed exactly (a "reliable update", as in mixed-precision Krylov
    solvers). Hand-written because no library offers a mixed-precision power method.
    """

    def __init__(self, op: _GramOperator, workers: BlockWorkers, *, mixed: bool,
                 exact_below: float, polar: Callable[[np.ndarray], np.ndarray]) -> None:
        self.op = op
        self.workers = workers
        self.polar = polar
        self.k32 = op.k.astype(np.float32) if mixed else None
        self.exact_below = exact_below
        #: Drift allowed per unit of relative step on top of ``PRODUCT_DRIFT_BUDGET`` (set while
        #: the extrapolated steps of ``method="auto"`` run: ``SLOW_DRIFT_PER_STEP``).
        self.drift_per_step = 0.0

    def __call__(self, rot: np.ndarray, gr: np.ndarray, gr_prev: np.ndarray, beta: float,
                 drift: float) -> _Step:
        """Step from ``M = G R + beta (G R - G R_prev)`` (``beta = 0``: the plain GPM step);
        ``drift`` is the estimated relative drift of the carried ``gr``."""
        d = self.op.d
        new = np.empty_like(gr)
        delta = np.empty_like(gr)  # R' - R: the step's size, and the increment's input
        gr_new = np.empty_like(gr)

        def polar_part(g: slice) -> float:
            m = gr[g] if beta == 0.0 else gr[g] + beta * (gr[g] - gr_prev[g])
            new[g] = self.polar(m)
            np.subtract(new[g], rot[g], out=delta[g])
            return float(np.sum(delta[g] ** 2))

        size = float(np.sqrt(sum(self.workers.map(polar_part))))
        # ||R||_F = sqrt(p d) for orthogonal blocks.
        relative_step = size / float(np.sqrt(rot.shape[0] * d))
        growth = INCREMENT_ERROR_RATE * relative_step
        budget = max(PRODUCT_DRIFT_BUDGET, self.drift_per_step * relative_step)
        increment = (self.k32 is not None and size > self.exact_below
                     and drift + growth <= budget)
        k = self.k32 if increment and self.k32 is not None else self.op.k

        def share_part(g: slice) -> np.ndarray:
            x = delta[g].astype(np.float32) if increment else new[g]
            return k[:, g.start * d:g.stop * d] @ x.reshape(-1, d)

        parts = self.workers.map(share_part)
        s = parts[0]
        for share in parts[1:]:
            s = s + share

        def gram_part(g: slice) -> tuple[float, float]:
            rows = gr_new[g].reshape(-1, d)
            np.matmul(k[:, g.start * d:g.stop * d].T, s, out=rows, casting="same_kind")
            if increment:
                gr_new[g] += gr[g]
            return float(np.vdot(new[g], gr_new[g])), float(np.vdot(delta[g], gr_new[g] + gr[g]))

        objective, gain = (float(sum(x)) for x in zip(*self.workers.map(gram_part), strict=True))
        return _Step(new, gr_new, size, objective, gain, drift + growth if increment else 0.0)


class _StoppingRule:
    """When the GPM stops (SPEC.md section 2, stopping rules), checked after every step.

    ``"absolute"`` is the paper's rule ``||R^(t+1) - R^(t)||_F <= eps``, ``"relative"`` the plain
    rule ``||R^(t+1) - R^(t)||_F <= eps ||R||_F`` (``||R||_F = sqrt(p d)``). Both are met only
    on a plain step computed from an exact ``G R``.

    ``"objective"`` (the default) stops at the relative rule or earlier, once the objective is
    known: near a fixed point the GPM contracts linearly, ``||R^(t+1) - R^(t)||_F`` shrinking
    by a rate ``rho`` per step, and the objective, quadratic in the distance to the fixed
    point, gains ``rho^2`` times less each step. The gain still to come after a step of gain
    ``g`` is then ``g rho^2 / (1 - rho^2)``; the rule stops once that is at most
    ``OBJECTIVE_GAP_RTOL |f|``. ``rho`` is the larger of the last two step ratios, from three
    consecutive plain steps, and both must be below 1 (a linear contraction under way). As a
    guard, the step itself must be within ``sqrt(eps) ||R||_F``, so that the estimate is only
    trusted near the fixed point, and ``eps -> 0`` switches this rule off like the others.

    The objective rule also watches the gains once ``method="auto"`` has switched to the
    extrapolated steps (:meth:`watch_gains`), which a rule on plain steps never sees: the gain
    rule stops once the objective gained over the last ``GAIN_WINDOW`` steps is at most
    ``GAIN_WINDOW * GAIN_RATE_PER_TOL * eps |f|``, i.e. the objective rose by at most
    ``GAIN_RATE_PER_TOL eps`` of itself per step on average (1e-6 at ``eps = 1e-7``), while
    the iterates still move (the median of the window's last 5 step sizes at least
    ``GAIN_STALL_RATIO`` times the median of its first 5): a stalled ascent on a flat
    landscape, not a contraction to a fixed point, which is left to the step rules. Each
    step's objective is at least the one before (an overshooting extrapolation is replaced by
    the plain step), so stopping never costs objective already reached. It bounds the rate, not
    what is left: under the sublinear convergence above ``v_PT`` the objective keeps rising
    slowly (measured in ``GAIN_RATE_PER_TOL``'s comment).
    """

    def __init__(self, rule: str, tol: float, p: int, d: int) -> None:
        norm_r = float(np.sqrt(p * d))
        #: The absolute step bound of the step rules.
        self.step_tol = tol if rule == "absolute" else tol * norm_r
        self._objective_rule = rule == "objective"
        self._objective_max_step = float(np.sqrt(tol)) * norm_r
        self._steps: list[float] = []
        self._gain_rtol = GAIN_RATE_PER_TOL * tol
        #: Gains and sizes of the steps since :meth:`watch_gains` (None: the gain rule is off).
        self._gains: list[float] | None = None
        self._gain_sizes: list[float] = []
        #: Which rule stopped the iterations: "step", "objective", "gain", or "max_iter" (none
        #: yet), and why.
        self.stopped_by = "max_iter"
        self.reason = ""

    def watch_gains(self) -> None:
        """Switch the gain rule on (the objective rule only), from the next step on."""
        if self._objective_rule:
            self._gains, self._gain_sizes = [], []

    def met(self, step: _Step, *, plain: bool, exact_input: bool) -> bool:
        """Whether to stop after ``step`` (``plain``: not extrapolated; ``exact_input``: computed
        from an exact ``G R``)."""
        if self._gains is not None:
            self._gains.append(step.gain)
            self._gain_sizes.append(step.size)
            rate = self._gain_rate()
            # A mean gain below 0 is rounding at a fixed point: left to the step rules (so that
            # eps -> 0 switches this rule off like them).
            if rate is not None and 0.0 <= rate <= self._gain_rtol * abs(step.objective):
                self.stopped_by = "gain"
                self.reason = (f"objective rose {rate / abs(step.objective):.1e} of itself per "
                               f"step over the last {GAIN_WINDOW} steps (<= "
                               f"{self._gain_rtol:.0e})")
                return True
        if not plain:
            self._steps.clear()
            return False
        self._steps = [*self._steps[-2:], step.size]
        if step.size <= self.step_tol and exact_input:
            self.stopped_by = "step"
            self.reason = (f"plain step ||R' - R||_F = {step.size:.1e} <= {self.step_tol:.1e}")
        elif self._objective_rule and self._objective_known(step):
            self.stopped_by = "objective"
            self.reason = (f"objective still to gain predicted at most {OBJECTIVE_GAP_RTOL:.0e} "
                           "of the objective from the contraction of the last 3 plain steps")
        return self.stopped_by != "max_iter"

    def _gain_rate(self) -> float | None:
        """Mean gain per step over the last ``GAIN_WINDOW`` steps, or None (fewer steps, or the
        steps contracting: shrunk below ``GAIN_STALL_RATIO`` over the window)."""
        gains, sizes = self._gains, self._gain_sizes[-GAIN_WINDOW:]
        if gains is None or len(gains) < GAIN_WINDOW:
            return None
        if np.median(sizes[-5:]) < GAIN_STALL_RATIO * np.median(sizes[:5]):
            return None
        return float(sum(gains[-GAIN_WINDOW:])) / GAIN_WINDOW

    def _objective_known(self, step: _Step) -> bool:
        if len(self._steps) < 3 or step.size > self._objective_max_step:
            return False
        a, b, c = self._steps
        if not (a > 0.0 and b > 0.0):
            return False
        rho = max(b / a, c / b)
        if not rho < 1.0:
            return False
        return abs(step.gain) * rho**2 / (1.0 - rho**2) <= OBJECTIVE_GAP_RTOL * abs(step.objective)


class _Momentum:
    """Extrapolation weight ``beta`` of the accelerated GPM (always 0 when disabled).

    Near a fixed point the plain GPM contracts linearly at a rate ``rho``, first estimated as the
    ratio of the last two of ``MOMENTUM_WARMUP`` consecutive plain steps. The extrapolated step
    ``Pi(G (R + beta (R - R_prev)))`` uses the heavy-ball optimum
    ``beta = (1 - sqrt(1 - rho))^2 / rho``, which on a linear map with spectrum in ``[0, rho]``
    contracts at ``1 - sqrt(1 - rho)`` per step instead of ``rho``. While extrapolating, the
    observed rate ``z`` (geometric mean over ``MOMENTUM_WARMUP`` steps) is the dominant root of
    ``z^2 - (1 + beta) rho z + beta rho = 0``, so ``rho = z^2 / ((1 + beta) z - beta)``; a larger
    ``rho`` than assumed raises ``beta``. A restart (an overshoot, or a step below the tolerance
    that a plain step must confirm) returns to plain steps.
    """

    def __init__(self, enabled: bool) -> None:
        self.enabled = enabled
        self.beta = 0.0
        self._rho = 0.0
        self._steps: list[float] = []

    def _set_rate(self, rho: float) -> None:
        if rho > self._rho:
            self._rho = min(rho, MOMENTUM_MAX_RATE)
            self.beta = (1.0 - np.sqrt(1.0 - self._rho)) ** 2 / self._rho
            self._steps = self._steps[-1:]

    def start(self, steps: list[float]) -> None:
        """Switch on, with the sizes of the last consecutive plain steps as the warm-up."""
        self.enabled = True
        self._steps = []
        for size in steps:
            self.record(size, extrapolated=False, restart=False)

    def record(self, step: float, *, extrapolated: bool, restart: bool) -> None:
        """Update after a step of size ``||R^(t+1) - R^(t)||_F``."""
        if not self.enabled:
            return
        if restart:
            self.beta = self._rho = 0.0
            self._steps = [] if extrapolated else [step]
            return
        self._steps.append(step)
        if not extrapolated and len(self._steps) >= MOMENTUM_WARMUP:
            rho = self._steps[-1] / self._steps[-2]
            if 0.0 < rho < 1.0:
                self._set_rate(rho)
        elif extrapolated and len(self._steps) > MOMENTUM_WARMUP:
            z = (self._steps[-1] / self._steps[-1 - MOMENTUM_WARMUP]) ** (1.0 / MOMENTUM_WARMUP)
            denominator = (1.0 + self.beta) * z - self.beta
            if 0.0 < z < 1.0 and denominator > 0.0:
                self._set_rate(z * z / denominator)


@dataclass
class _PowerRun:
    """Where the GPM iterations stand: ``R``, the carried ``G R`` (with its estimated relative
    drift), the objective after each step, and counters for the diagnostics."""

    rotations: np.ndarray
    gr: np.ndarray
    trace: list[float]
    #: ``time.perf_counter()`` when each objective of ``trace`` was known.
    times: list[float] = field(default_factory=list)
    iterations: int = 0
    step: float = np.inf
    drift: float = 0.0
    rejected: int = 0
    mixed_steps: int = 0
    #: Iteration after which ``method="auto"`` switched the extrapolated steps on (None: never).
    switched_at: int | None = None
    #: Why it did (empty when it did not).
    switch_reason: str = ""

    def advance(self, step: _Step) -> None:
        """Move to the outcome of ``step``."""
        self.rotations, self.gr, self.drift, self.step = (step.rotations, step.gr, step.drift,
                                                          step.size)
        self.mixed_steps += int(step.drift > 0.0)
        self.trace.append(step.objective)
        self.times.append(time.perf_counter())
        self.iterations += 1

    def make_exact(self, op: _GramOperator) -> float:
        """Replace a carried ``G R`` by the exact product (the returned objective and the
        certificate use no increments); returns the measured relative drift (0 if exact)."""
        if self.drift == 0.0:
            return 0.0
        exact = op.apply(self.rotations)
        drift = float(np.linalg.norm(exact - self.gr) / np.linalg.norm(exact))
        self.gr = exact
        self.trace[-1] = _objective(self.rotations, exact)
        return drift


def _spectral_start(u: np.ndarray, workers: BlockWorkers,
                    polar: Callable[[np.ndarray], np.ndarray]) -> np.ndarray:
    """``R^(0)``: blockwise ``Pi(U_i)`` of the top-``d`` eigenvectors ``U`` (``pd x d``) of
    ``G``, by the route ``polar``."""
    d = u.shape[1]
    rot = np.empty((u.shape[0] // d, d, d))

    def start_part(g: slice) -> None:
        rot[g] = polar(u[g.start * d:g.stop * d].reshape(-1, d, d))

    workers.map(start_part)
    return rot


def _power_iterations(op: _GramOperator, workers: BlockWorkers, rot: np.ndarray, *,
                      max_iter: int, rule: _StoppingRule, accelerate: bool, mixed: bool,
                      polar: Callable[[np.ndarray], np.ndarray],
                      auto: bool = False) -> _PowerRun:
    """The (optionally extrapolated) GPM from ``R^(0) = rot`` until ``rule`` or ``max_iter``.

    ``auto``: plain steps until the plain GPM is seen to contract slowly (two consecutive step
    ratios of at least ``SLOW_CONTRACTION_RATE`` after ``SLOW_MIN_STEPS`` steps), then the
    extrapolated steps of ``accelerate`` with float32 increments of ``G R`` allowed a drift of
    ``SLOW_DRIFT_PER_STEP`` of each step (when ``mixed``), and the gain rule of ``rule`` on."""
    gr = op.apply(rot)
    run = _PowerRun(rot, gr, [_objective(rot, gr)], [time.perf_counter()])
    gr_prev = gr
    momentum = _Momentum(accelerate)
    gpm_step = _GpmStep(op, workers, mixed=mixed, exact_below=EXACT_NEAR_TOL * rule.step_tol,
                        polar=polar)
    plain_sizes: list[float] = []
    while run.iterations < max_iter:
        beta = momentum.beta
        overshot = False
        if beta > 0.0:
            nxt = gpm_step(run.rotations, run.gr, gr_prev, beta, run.drift)
            overshot = nxt.gain < 0.0
        if beta == 0.0 or overshot:  # the plain step, also replacing an overshooting one
            run.rejected += overshot
            beta = 0.0
            nxt = gpm_step(run.rotations, run.gr, gr_prev, 0.0, run.drift)
        exact_input = run.drift == 0.0
        gr_prev = run.gr
        run.advance(nxt)
        if rule.met(nxt, plain=beta == 0.0, exact_input=exact_input):
            break
        momentum.record(nxt.size, extrapolated=beta > 0.0,
                        restart=overshot or nxt.size <= rule.step_tol)
        if auto and not momentum.enabled:
            plain_sizes = [*plain_sizes[-2:], nxt.size]
            rate = _slow_contraction(plain_sizes, run.iterations)
            if rate is not None:
                run.switched_at = run.iterations
                run.switch_reason = (f"plain GPM contracting at {rate:.4f} per step (>= "
                                     f"{SLOW_CONTRACTION_RATE}) after {run.iterations} steps")
                momentum.start(plain_sizes)
                gpm_step.drift_per_step = SLOW_DRIFT_PER_STEP
                rule.watch_gains()
    if rule.stopped_by == "max_iter":
        rule.reason = f"max_iter = {max_iter} steps reached"
    return run


def _slow_contraction(sizes: list[float], iterations: int) -> float | None:
    """The smaller of the last two step ratios when both are at least
    ``SLOW_CONTRACTION_RATE`` (and below 1: a contraction) after ``SLOW_MIN_STEPS`` steps, else
    None."""
    if iterations < SLOW_MIN_STEPS or len(sizes) < 3 or not (sizes[0] > 0.0 and sizes[1] > 0.0):
        return None
    rate = min(sizes[1] / sizes[0], sizes[2] / sizes[1])
    top = max(sizes[1] / sizes[0], sizes[2] / sizes[1])
    return rate if rate >= SLOW_CONTRACTION_RATE and top < 1.0 else None


def check_precision(precision: str) -> str:
    """``precision`` if it is one of :data:`PRECISIONS` (used by :func:`solve_gopp` and the
    analyst config)."""
    return check_choice(precision, "precision", PRECISIONS)


def check_method(method: str) -> str:
    """``method`` if it is one of :data:`METHODS` (used by :func:`solve_gopp` and the analyst
    config)."""
    return check_choice(method, "method", METHODS)


def check_stopping(stopping: str) -> str:
    """``stopping`` if it is one of :data:`STOPPING_RULES` (used by :func:`solve_gopp` and the
    analyst config)."""
    return check_choice(stopping, "stopping", STOPPING_RULES)


def solve_gopp(
    anchors: Sequence[np.ndarray],
    *,
    max_iter: int = 500,
    tol: float = 1e-7,
    certify: bool = True,
    accelerate: bool = False,
    precision: str = "auto",
    stopping: str = "objective",
    method: str = "auto",
    certificate_early_exit: bool = True,
) -> GoppResult:
    """Solve the centered GOPP by spectral initialisation and the generalized power method.

    Parameters
    ----------
    anchors : list of p (r, d) ndarrays
        The uploaded anchor representations ``B_i`` (``p >= 2``, ``r >= d + 1``).
    max_iter : int
        ``T_max``, the cap on GPM iterations (paper: 500).
    tol : float
        ``eps`` of the step rules: ``||R^(t+1) - R^(t)||_F <= eps ||R||_F`` (``"relative"``
        and ``"objective"``) or ``<= eps`` (``"absolute"``, the paper's rule; paper: 1e-7).
    certify : bool
        Compute the certificate of global optimality ``lambda_min(Lambda - G)``.
    accelerate : bool
        Opt-in extrapolated GPM: step ``R^(t+1) = Pi(G Y)`` from
        ``Y = R^(t) + beta (R^(t) - R^(t-1))``, with ``beta`` set from the observed contraction
        rate (:class:`_Momentum`). A step that lowers the objective is replaced by the plain GPM
        step, so the objective never decreases; convergence is declared only on a plain step, so
        the stopping rules and the fixed points are the paper's. Off (default): exactly the
        paper's iteration.
    precision : {"auto", "double", "mixed"}
        ``"double"``: every product ``G R`` in float64. ``"mixed"``: small steps carry ``G R``
        forward by float32 increments within a drift budget of ``PRODUCT_DRIFT_BUDGET`` relative
        (:class:`_GpmStep`); the step rules are met only on an exact product, and the returned
        objective and certificate use an exact final product. ``"auto"`` (default): mixed when
        one product costs at least ``MIXED_MIN_FLOPS``.
    stopping : {"objective", "relative", "absolute"}
        The stopping rule (:class:`_StoppingRule`). ``"objective"`` (default): the relative
        step rule, or earlier once the objective still to gain is predicted below
        ``OBJECTIVE_GAP_RTOL`` relative from the plain steps' contraction, or (after
        ``method="auto"`` switched) once the objective rose by at most
        ``GAIN_RATE_PER_TOL * tol`` of itself per step over the last ``GAIN_WINDOW`` steps (the
        gain rule). ``"relative"``: the step rule relative to
        ``||R||_F``. ``"absolute"``: the paper's rule.
    method : {"auto", "gpm"}
        ``"gpm"``: the paper's GPM (extrapolated only with ``accelerate``), for reproducing its
        protocol with its cap. ``"auto"`` (default): the same plain steps while they contract
        fast (below ``v_PT``: identical to ``"gpm"``); once two consecutive step ratios are at
        least ``SLOW_CONTRACTION_RATE`` the extrapolated steps of ``accelerate`` take over
        (never lowering the objective, converging only on a plain step), with float32
        increments of ``G R`` where ``precision`` allows them, stopped by the gain rule of
        ``stopping="objective"`` (:class:`_StoppingRule`). ``GoppResult.method`` and
        ``switch_reason`` say what ran, ``stopped_by`` and ``stop_reason`` why it stopped.
    certificate_early_exit : bool
        Stop the certificate, not certified, once a proven upper bound of ``lambda_min`` is
        below ``-EARLY_EXIT_MARGIN`` times its tolerance (default; the verdict is the full
        certificate's, :func:`common.gopp_certificate.certify`). False: ``lambda_min`` in full.

    Returns
    -------
    GoppResult

    References
    ----------
    SPEC.md section 2 (Algorithm 4 of the noisy-anchor GDP paper, plus the certificate).
    """
    start = time.perf_counter()
    b = stack_blocks(anchors, "anchors")
    p, r, d = b.shape
    check_anchor_rows(r, d, "anchors need")
    max_iter = check_count(max_iter, "max_iter", minimum=0)
    tol = check_positive(tol, "tol")
    precision = check_precision(precision)
    method = check_method(method)
    rule = _StoppingRule(check_stopping(stopping), tol, p, d)
    means, bc = center_rows(b)
    # One measure of the idle CPUs per solve, at its first operation large enough to ask.
    idle = once()
    op = _GramOperator(bc, idle)
    mixed = precision == "mixed" or (precision == "auto" and op.product_flops >= MIXED_MIN_FLOPS)
    n_workers, worker_blas = worker_budget(_worker_count(op))
    workers = BlockWorkers(p, n_workers)
    # BLAS threads per phase (common.blas): the start's K K^T and eigensolve by the order m;
    # the steps one BLAS thread per worker (or, unsplit, by the product's size).
    threads = {"workers": len(workers.groups),
               "start": eigh_threads(op.k.shape[0], idle),
               "steps": (worker_blas if len(workers.groups) > 1
                         else gemm_threads(op.product_flops, idle))}
    with blas_threads(threads["start"]):
        u, lambda_1 = op.top_eigvecs()
    with blas_threads(threads["steps"]), workers:
        route = polar_route(d, threads["steps"])
        rot = _spectral_start(u, workers, POLAR_ROUTES[route])
        run = _power_iterations(op, workers, rot, max_iter=max_iter, rule=rule,
                                accelerate=accelerate, mixed=mixed, polar=POLAR_ROUTES[route],
                                auto=method == "auto")
    drift_estimate = run.drift
    with blas_threads(gemm_threads(op.product_flops, idle)):
        product_drift = run.make_exact(op)
    objective = run.trace[-1]

    cert_start = time.perf_counter()
    cert = None
    cert_tol = CERTIFICATE_RTOL * max(lambda_1, 1.0)
    if certify:
        threads["certificate"] = _certificate_threads(op, idle)
        cert = _certify(op, run.rotations, run.gr, cert_tol if certificate_early_exit else None,
                        threads["certificate"])
    min_eig = None if cert is None else cert.min_eig
    cert_seconds = time.perf_counter() - cert_start if certify else 0.0
    return GoppResult(
        rotations=run.rotations,
        means=means,
        iterations=run.iterations,
        converged=rule.stopped_by != "max_iter",
        objective=objective,
        fixed_point_residual=float(run.step),
        gopp_residual=float((bc**2).sum() - objective / p),
        certificate_min_eig=min_eig,
        certificate_tol=cert_tol,
        certified=bool(min_eig is not None and min_eig >= -cert_tol),
        seconds=time.perf_counter() - start,
        objective_trace=np.asarray(run.trace),
        trace_seconds=np.asarray(run.times) - start,
        rejected_extrapolations=run.rejected,
        certificate_seconds=cert_seconds,
        mixed_precision_steps=run.mixed_steps,
        product_drift=product_drift,
        product_drift_estimate=drift_estimate,
        stopped_by=rule.stopped_by,
        blas_threads=threads,
        certificate_path="" if cert is None else cert.path,
        certificate_early_exit="" if cert is None else cert.early_exit,
        method="gpm+momentum" if accelerate or run.switched_at is not None else "gpm",
        switched_at=run.switched_at,
        switch_reason=run.switch_reason,
        stop_reason=rule.reason,
        polar_route=route,
    )


def rotational_error(true_rotations: np.ndarray, rotations: np.ndarray) -> float:
    """``E = max_i ||O_i R_i - Q||_F`` with ``Q = Pi(sum_i O_i R_i)`` (gauge-fixed error).

    Parameters
    ----------
    true_rotations : (p, d, d) ndarray
        The participants' secret ``O_i`` (known in simulations only).
    rotations : (p, d, d) ndarray
        The analyst's ``R_i``.
    """
    o = np.asarray(true_rotations, dtype=float)
    rr = np.asarray(rotations, dtype=float)
    if o.shape != rr.shape or o.ndim != 3:
        raise InvalidInputError(f"true_rotations {o.shape} and rotations {rr.shape} must both be "
                                "(p, d, d)")
    prod = o @ rr
    q = polar_factor(prod.sum(axis=0))
    return float(np.linalg.norm(prod - q, axis=(1, 2)).max())

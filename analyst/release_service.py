"""The analyst's differentially private similarity release (ScoreShield) over gRPC.

What the collection rows are. The analyst holds the collaboration matrix ``Z`` and, per
participant ``i``, the alignment map ``N_i(T) = (T - 1 b_i^T) R_i + 1 c^T`` (SPEC.md section 2;
``rotations.npy``, ``means.npy``, ``shift.npy`` of the store's result). The shared anchor is
centred (``1^T A = 0``), so the anchor mean ``b_i`` is where participant ``i``'s GDP map sends the
origin of the working space, and ``c`` is where the alignment sends it in ``Z``'s frame
(``c = b_s`` for reference Procrustes, ``0`` for GOPP). The collection rows are therefore

    ``e_k = (z_k - c) / ||z_k - c||``  (``E``, ``n x d``),

the records seen from the working space's origin: with noiseless anchors ``z_k - c = x_k O_s``
exactly, so ``<e_k, e_l>`` is the cosine of the working records ``x_k F, x_l F`` themselves; with
anchor noise it is that cosine up to the residual rotation and translation of the alignment. A
query record in participant ``i``'s frame, ``t = (x F) O_i + Psi_i``, is treated identically:

    ``q = (N_i(t) - c) / ||N_i(t) - c|| = (t - b_i) R_i / ||(t - b_i) R_i||``.

This origin comes from the anchor, not from the records, so replacing one record changes one row
of ``E`` and nothing else: the record-replacement sensitivities of SPEC.md section 5 (2 for a score
vector, ``2 sqrt(2 (n - 1))`` for the Gram) hold as stated. Centring by the records' own mean
would make every row depend on every record and void those bounds. The price is signal on data
far from the origin: on digits (non-negative pixels) the clean scores of one query spread with a
standard deviation of 0.095 from the anchor origin against 0.26 from the training mean (measured,
n = 1,797), so at epsilon = 100 (sigma = 0.19) a released vector correlates only ~0.45 with the
clean one. Methods without an anchor have no such origin (``Z = X O + 1 Psi^T`` with a secret
``Psi`` that dominates every cosine), so their federations are refused.

Regimes (:class:`common.scoreshield.Regime`; the sensitivity is derived here from the regime and
the collection's ``n``, never taken from a request): a query's score vector (sensitivity 2), one
collection record's row of similarities (``2 sqrt(n - 1)``, paper App. D) and the Gram
(``2 sqrt(2 (n - 1))``), each at record level or, with the operator's identity column
(``[release] identities`` and its public bound ``max_records_per_identity = k``, checked before
any identity-level release), at identity level; score vectors and rows optionally with a public
margin ``a`` enforced by clipping the clean scores to ``[a, 1]`` before the noise (``1 - a``).
Every Gram release carries its data-free baseline (:mod:`common.scoreshield.baseline`): whether
it is expected to be closer to the truth than the identity matrix, and from which epsilon.

Every release is charged to the dataset's privacy ledger and the caller's quota before any
noise is drawn; a release a budget cannot afford is refused (RESOURCE_EXHAUSTED, naming the
budget and what is left) and nothing is released. The noise applied is the ``sigma`` charged: one
:class:`common.scoreshield.Calibration` goes from the charge to the release. Releases are
paid-once jobs keyed by the caller's request id (:mod:`analyst.release_jobs`): Gram releases are
submitted, polled and fetched, so no RPC holds a connection through a projection. What a release
may cost the analyst is bounded by ``[release]`` (:class:`analyst.config.ReleaseLimits`): a
minimum epsilon, the computations at once and queued per participant, the working memory of one
Gram, the bytes kept per participant, and a send timeout on every fetch stream. Top-k is
post-processing of the privatised scores.

References
----------
SPEC.md sections 2 and 5; ScoreShield paper Algorithms 1-2; issues 5 (item 3), 9 (item 3) and 11.
"""

from __future__ import annotations

import hashlib
import json
import logging
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import grpc
import numpy as np

from noisyanchor.analyst.config import ReleaseLimits
from noisyanchor.analyst.edge import caller_id, grpc_edge
from noisyanchor.analyst.federation import Federation
from noisyanchor.analyst.privacy_budget import LEDGER_HEAD, Account, Charge, PrivacyLedger
from noisyanchor.analyst.release_jobs import Job, ReleaseJobs, gram_working_bytes
from noisyanchor.analyst.send_timeout import SendTimeouts
from noisyanchor.common.errors import (
    InvalidInputError,
    NotFoundError,
    PreconditionError,
    ResourceLimitError,
)
from noisyanchor.common.files import open_under
from noisyanchor.common.npy_files import load_npy
from noisyanchor.common.scoreshield import (
    GRAM_PROJECTORS,
    Calibration,
    GramBaseline,
    Regime,
    calibrate,
    release_gram,
    release_record_row,
    release_score_vector,
)
from noisyanchor.common.scoreshield.regimes import identity_regime_bound
from noisyanchor.common.wire import ArraySpec, array_header, array_spec_of, decode_array
from noisyanchor.protos.v1 import release_pb2 as pb
from noisyanchor.protos.v1 import release_pb2_grpc as pb_grpc

log = logging.getLogger(__name__)

#: Projector of a Gram release when the query names none: semismooth Newton, the metric
#: projection in ~10 eigendecompositions (AAP and Dykstra need hundreds).
DEFAULT_PROJECTOR = GRAM_PROJECTORS[0]

#: Projection iterations of a Gram release when the query sets no cap, and the largest cap
#: (the paper's T_max). Each iteration costs about one n x n eigendecomposition (~1.4 s at
#: n = 1,797 on one loaded core); Newton needs ~10, alternating projections hundreds.
DEFAULT_GRAM_ITERATIONS, MAX_GRAM_ITERATIONS = 100, 500

#: Bytes per message of a fetched Gram: small, so a client that stops reading leaves little in
#: the analyst's transport buffers (measured with 20 stalled readers of an 11.5 MB Gram: ~4.7 MB
#: held per stream with 1 MiB messages).
FETCH_CHUNK = 64 << 10

#: Relative feasibility gap a Gram projection stops at.
GRAM_TOLERANCE = 1e-6

#: Largest full score vector returned in one message (bytes); larger collections need top_k.
MAX_SCORE_BYTES = 3 << 20

#: Rows (and queries) with a norm at or below this cannot be unit-normalised.
MIN_NORM = 1e-12


def unit_rows(x: np.ndarray, what: str) -> np.ndarray:
    """Rows of ``x`` divided by their Euclidean norms.

    Raises
    ------
    PreconditionError
        A row has norm ``<= MIN_NORM`` (it sits on the origin and has no direction).
    """
    norms = np.linalg.norm(x, axis=-1, keepdims=True)
    small = int(np.count_nonzero(norms <= MIN_NORM))
    if small:
        raise PreconditionError(f"{small} row(s) of {what} have norm <= {MIN_NORM:g}: no cosine "
                                "direction")
    return x / norms


def collection_rows(z: np.ndarray, shift: np.ndarray) -> np.ndarray:
    """``E``: rows ``e_k = (z_k - c) / ||z_k - c||`` of the collaboration matrix ``Z``.

    Parameters
    ----------
    z : (n, d) ndarray
        ``Z``.
    shift : (d,) ndarray
        ``c``, the image of the working space's origin in ``Z``'s frame.
    """
    return unit_rows(np.asarray(z, dtype=np.float64) - shift, "the collaboration matrix")


def query_direction(t: np.ndarray, rotation: np.ndarray, mean: np.ndarray) -> np.ndarray:
    """``q = (t - b_i) R_i / ||(t - b_i) R_i||``: a query in participant ``i``'s GDP frame, mapped
    by ``N_i`` minus the shift ``c`` and unit-normalised like the collection rows.

    Parameters
    ----------
    t : (d,) ndarray
        Query ``t = (x F) O_i + Psi_i``.
    rotation : (d, d) ndarray
        ``R_i``.
    mean : (d,) ndarray
        ``b_i``.
    """
    return unit_rows((np.asarray(t, dtype=np.float64) - mean) @ rotation, "the query")


@dataclass(frozen=True)
class Collection:
    """The unit-normalised collection and the maps into its frame.

    Attributes
    ----------
    rows : (n, d) ndarray
        ``E`` (:func:`collection_rows`).
    participants : tuple of str
        Participant ids in the order of ``rotations`` and ``means``.
    rotations : (p, d, d) ndarray
        ``R_i``.
    means : (p, d) ndarray
        ``b_i``.
    identities : (n,) ndarray or None
        The identity column, checked against its public bound (None: no identity-level
        releases; ``identity_error`` says why when one was configured).
    identity_error : str
        Why a configured identity column cannot be used ("" when it can, or none is set).
    """

    rows: np.ndarray
    participants: tuple[str, ...]
    rotations: np.ndarray
    means: np.ndarray
    identities: np.ndarray | None = None
    identity_error: str = ""

    def scores(self, pid: str, t: np.ndarray) -> np.ndarray:
        """Clean cosine scores ``s = E q`` of participant ``pid``'s query ``t``."""
        if pid not in self.participants:
            raise PreconditionError(f"{pid!r} has no rows in the aligned result: the analyst's "
                                    "screening excluded it before alignment")
        i = self.participants.index(pid)
        return self.rows @ query_direction(t, self.rotations[i], self.means[i])


def load_identities(path: Path) -> np.ndarray:
    """An identity column: a 1-D ``.npy`` array (no pickles) or a text file, one label a line."""
    if path.suffix == ".npy":
        labels = load_npy(path, str(path), kinds="iuUb", ndim=1)
    else:
        labels = np.array(path.read_text(encoding="utf-8").splitlines())
    if labels.ndim != 1:
        raise InvalidInputError(f"{path}: an identity column is one label per record, got shape "
                                f"{labels.shape}")
    return labels


def checked_identities(limits: ReleaseLimits, n: int) -> tuple[np.ndarray | None, str]:
    """The configured identity column if it has ``n`` labels and no identity above the bound;
    else ``(None, why)`` (logged: the reasons name the operator's data, not sent to callers)."""
    if limits.identities is None or limits.max_records_per_identity is None:
        return None, ""
    try:
        labels = load_identities(limits.identities)
        if labels.shape != (n,):
            raise InvalidInputError(f"{limits.identities} has {labels.size} labels for the {n} "
                                    "records of the collaboration matrix")
        identity_regime_bound(labels, limits.max_records_per_identity)
    except (OSError, ValueError, InvalidInputError) as err:
        log.error("identity-level releases disabled: [release] identities: %s", err)
        return None, str(err)
    return labels, ""


def load_collection(federation: Federation,
                    limits: ReleaseLimits | None = None) -> Collection:
    """:class:`Collection` from the aligned result in the federation's store (with the identity
    column of ``limits``, when it sets one)."""
    load = federation.store.result_array  # verified against the result's manifest

    rows = collection_rows(load("z.npy"), load("shift.npy"))
    labels, why = checked_identities(limits or ReleaseLimits(), rows.shape[0])
    # The sites aligned (result.json): under the exclude screening policy, not every one.
    aligned = json.loads(federation.store.read_result("result.json"))["participants"]
    return Collection(rows=rows, participants=tuple(aligned),
                      rotations=load("rotations.npy"), means=load("means.npy"),
                      identities=labels, identity_error=why)


def regime_params(regime: Regime) -> dict:
    """A regime as the JSON a job's parameters keep (so a recomputation rebuilds it)."""
    return {"kind": regime.kind, "n": regime.n, "adjacency": regime.adjacency,
            "max_records_per_identity": regime.max_records_per_identity,
            "margin": regime.margin, "radius": regime.radius}


def baseline_message(b: GramBaseline) -> pb.GramBaseline:
    """The wire form of a Gram release's data-free baseline."""
    msg = pb.GramBaseline(
        noisy_distance=b.noisy_distance, projected_bound=b.projected_bound,
        identity_estimate=b.identity_estimate, identity_stderr=b.identity_stderr,
        identity_max=b.identity_max, identity_floor=b.identity_floor,
        no_better_than_identity=b.no_better_than_identity,
        useful_epsilon_basis=b.useful_epsilon_basis, warning=b.warning or "")
    for name in ("projected_estimate", "projected_stderr", "useful_epsilon"):
        value = getattr(b, name)
        if value is not None:
            setattr(msg, name, value)
    return msg


def decode_record(header, data: bytes, d: int) -> np.ndarray:
    """The query record of a :class:`ScoreQuery`: one ``(d,)`` little-endian float64 row.

    Checks dtype and shape against the collection's width before looking at the bytes, then
    the byte count, the SHA-256 (:func:`common.wire.decode_array`) and finiteness.
    """
    spec = array_spec_of(header)
    if spec.dtype != "<f8" or spec.shape != (d,):
        raise InvalidInputError(f"the query record must be a '<f8' array of shape ({d},), got "
                                f"{spec.dtype!r} {spec.shape}")
    t = decode_array(header, data)
    if not np.isfinite(t).all():
        raise InvalidInputError("the query record contains NaN or Inf values")
    return t


def top_k(noisy: np.ndarray, k: int) -> np.ndarray:
    """Row ids of the ``k`` highest privatised scores, highest first (post-processing).

    Ranked by the unclipped noisy scores, which are equally private: the clip is monotone, so
    the order agrees with the released scores and ties at 1 are broken by the noise.
    """
    return np.argsort(-noisy, kind="stable")[:k]


def account_message(account: Account) -> pb.Account:
    """The wire form of a budget account."""
    return pb.Account(name=account.name, budget_epsilon=account.budget_epsilon,
                      spent_epsilon=account.spent_epsilon, left_epsilon=account.left_epsilon,
                      releases=account.releases, max_releases=account.max_releases or 0)


class ReleaseServicer(pb_grpc.ReleaseServicer):
    """Thin adapter from the Release wire contract to :mod:`common.scoreshield`, the ledger and
    the release jobs.

    Parameters
    ----------
    federation : Federation
        The analyst's federation (its config, state and store).
    ledger : PrivacyLedger or None
        The budget accountant; None when the config has no ``[privacy]`` table (every release
        is refused).
    limits : ReleaseLimits
        ``[release]`` bounds.
    """

    def __init__(self, federation: Federation, ledger: PrivacyLedger | None,
                 limits: ReleaseLimits) -> None:
        self.fed = federation
        self.ledger = ledger
        self.limits = limits
        self.dataset = federation.config.federation_id
        self._lock = threading.Lock()
        self._collection: Collection | None = None
        self._sends = SendTimeouts(limits.send_timeout)
        self.jobs: ReleaseJobs | None = None
        if ledger is not None:
            self.jobs = ReleaseJobs(federation.store.root / "releases", ledger, self.dataset,
                                    limits, GRAM_TOLERANCE).open(self._compute_gram)

    # -- checks shared by every release ---------------------------------------------------------
    def _caller(self, context, federation_id: str, dataset: str) -> tuple[str, PrivacyLedger,
                                                                          ReleaseJobs]:
        """Caller id, the ledger and the jobs, after the checks that need no aligned result."""
        pid, _ = caller_id(context, self.fed.ca_pems)
        self.fed.check_caller(pid, federation_id)
        if dataset not in ("", self.dataset):
            raise NotFoundError(f"no dataset {dataset!r}: this analyst releases from "
                                f"{self.dataset!r} (its collaboration matrix)")
        if not self.fed.method.uses_anchor:
            raise PreconditionError(f"method {self.fed.method.value} has no anchor, so the "
                                    "collaboration frame has no record-independent origin for "
                                    "cosine similarities; releases need an AA-I-GDP method")
        if self.ledger is None or self.jobs is None:
            raise PreconditionError("the analyst config has no [privacy] table (epsilon_budget, "
                                    "delta_budget): DP releases are disabled")
        return pid, self.ledger, self.jobs

    def _prepare(self, context, federation_id: str, dataset: str
                 ) -> tuple[str, PrivacyLedger, ReleaseJobs, Collection]:
        """As :meth:`_caller`, and the collection of the aligned result."""
        pid, ledger, jobs = self._caller(context, federation_id, dataset)
        state = self.fed.state  # no store listing: this runs on every release
        if state != "done":
            raise PreconditionError(f"federation {self.dataset!r} is {state}; releases need "
                                    "the aligned collaboration matrix")
        return pid, ledger, jobs, self._loaded_collection()

    def _loaded_collection(self) -> Collection:
        with self._lock:
            if self._collection is None:
                self._collection = load_collection(self.fed, self.limits)
            return self._collection

    def _regime(self, coll: Collection, kind: str, adjacency: str,
                margin: float | None) -> tuple[Regime, np.ndarray | None]:
        """The regime of a release asked with ``adjacency`` ("" is record) and ``margin``, and
        the identity column it needs (identity level only)."""
        n = coll.rows.shape[0]
        adjacency = adjacency or "record"
        if adjacency == "record":
            return Regime(kind, n, margin=margin), None
        if adjacency != "identity":
            raise InvalidInputError(f"adjacency must be 'record' or 'identity', got "
                                    f"{adjacency!r}")
        if coll.identities is None:
            raise PreconditionError(
                "identity-level releases are not available here: " +
                ("the operator's identity column does not validate (see the analyst's log)"
                 if coll.identity_error else "the analyst config sets no [release] identities "
                 "and max_records_per_identity"))
        k = self.limits.max_records_per_identity
        assert k is not None
        return Regime(kind, n, adjacency="identity", max_records_per_identity=k,
                      margin=margin), coll.identities

    def _calibration(self, ledger: PrivacyLedger, epsilon: float, delta: float,
                     regime: Regime) -> Calibration:
        """The release's noise for ``regime``, after the checks of its epsilon against
        ``[release] min_epsilon`` and the dataset budget (INVALID_ARGUMENT: no budget could
        ever serve it)."""
        if not epsilon >= self.limits.min_epsilon:  # also NaN
            raise InvalidInputError(
                f"epsilon={epsilon!r} is below this analyst's minimum {self.limits.min_epsilon:g} "
                "([release] min_epsilon): such a release carries no signal and would cost the "
                "analyst a computation for nothing")
        if epsilon > ledger.epsilon_budget:
            raise InvalidInputError(
                f"epsilon={epsilon!r} exceeds the whole budget of dataset {self.dataset!r} "
                f"(epsilon={ledger.epsilon_budget:g} at delta={ledger.delta_budget:g}): no "
                "release can ever spend that much")
        return calibrate(epsilon, delta, regime)

    def _spend(self, charge: Charge, cal: Calibration, *, repeated: bool) -> pb.Spend:
        ledger = self.ledger
        assert ledger is not None
        dataset = ledger.account(charge.dataset)
        regime = cal.regime
        return pb.Spend(dataset=charge.dataset, sigma=charge.sigma,
                        regime=regime.name if regime else "",
                        guarantee=regime.guarantee() if regime else "",
                        record_epsilon=(cal.epsilon_under(regime.record_sensitivity)
                                        if regime else cal.epsilon),
                        sensitivity=charge.sensitivity, epsilon=cal.epsilon, delta=cal.delta,
                        charged_epsilon=charge.epsilon, spent_epsilon=charge.spent_epsilon,
                        remaining_epsilon=dataset.left_epsilon,
                        budget_epsilon=ledger.epsilon_budget, budget_delta=ledger.delta_budget,
                        participant=account_message(ledger.account(charge.dataset,
                                                                   charge.participant)),
                        request_id=charge.request_id, repeated=repeated)

    # -- score vectors --------------------------------------------------------------------------
    @grpc_edge
    def ReleaseScores(self, request: pb.ScoreQuery, context) -> pb.ScoreRelease:
        """Regime (i): ``clip(E q + N(0, sigma^2 I), -1, 1)`` or its top-k, charged first, once
        per request id."""
        pid, ledger, jobs, coll = self._prepare(context, request.federation_id,
                                                request.dataset)
        n, d = coll.rows.shape
        t = decode_record(request.record_header, request.record, d)
        k = int(request.top_k)
        if k > n:
            raise InvalidInputError(f"top_k = {k} exceeds the {n} records of the collection")
        if k == 0 and 8 * n > MAX_SCORE_BYTES:
            raise InvalidInputError(f"the full score vector of {n} records exceeds "
                                    f"{MAX_SCORE_BYTES} bytes; ask for top_k")
        margin = request.margin if request.HasField("margin") else None
        regime, labels = self._regime(coll, "scores", request.adjacency, margin)
        cal = self._calibration(ledger, request.epsilon, request.delta, regime)
        params = {"epsilon": cal.epsilon, "delta": cal.delta, "top_k": k,
                  "calibration": cal.method, "regime": regime_params(regime),
                  "record_sha256": hashlib.sha256(t.astype("<f8").tobytes()).hexdigest()}

        def compute(charge: Charge, record: np.ndarray) -> pb.ScoreRelease:
            rel = release_score_vector(
                coll.scores(pid, record), cal, rng=np.random.default_rng(), margin=margin,
                identities=labels, max_records_per_identity=(
                    regime.max_records_per_identity if labels is not None else None))
            return self._score_reply(pid, charge, cal, rel, top_k(rel.noisy, k) if k else None)

        reply, _ = jobs.scores(pid, request.request_id, params, cal,
                               f"{regime.kind}/{pid}", t, compute)
        return reply

    def _score_reply(self, pid: str, charge: Charge, cal: Calibration, rel,
                     ids: np.ndarray | None) -> pb.ScoreRelease:
        """The wire form of a released score vector or row (or its top ``len(ids)``)."""
        scores = rel.scores if ids is None else rel.scores[ids]
        n = rel.scores.size
        log.info("released %s %s entries to %s (request %s, sigma=%.4g, spent epsilon=%.4g)",
                 n if ids is None else len(ids), rel.regime.name, pid, charge.request_id,
                 rel.sigma, charge.spent_epsilon)
        return pb.ScoreRelease(
            spend=self._spend(charge, cal, repeated=False),
            scores_header=array_header(ArraySpec.of("scores", scores)),
            scores=scores.astype("<f8").tobytes(),
            top_ids=[] if ids is None else ids.tolist(), records=n, clipped=rel.n_clipped,
            noise_dominated=rel.noise_dominated, useful_epsilon=rel.useful_epsilon)

    # -- one record's row -----------------------------------------------------------------------
    @grpc_edge
    def ReleaseRow(self, request: pb.RowQuery, context) -> pb.ScoreRelease:
        """Regime (iii): record ``row``'s similarities to every collection row,
        ``clip(E e_k + N(0, sigma^2), lo, 1)`` with ``sigma`` for ``2 sqrt(n - 1)`` (its own
        entry released as 1), or its top k, charged first, once per request id."""
        pid, ledger, jobs, coll = self._prepare(context, request.federation_id,
                                                request.dataset)
        n = coll.rows.shape[0]
        row, k = int(request.row), int(request.top_k)
        if row >= n:
            raise InvalidInputError(f"row {row} is outside the {n} records of the collection")
        if k >= n:
            raise InvalidInputError(f"top_k = {k} must be below the {n} records of the "
                                    "collection (the reference record itself is not ranked)")
        if k == 0 and 8 * n > MAX_SCORE_BYTES:
            raise InvalidInputError(f"the full row of {n} records exceeds {MAX_SCORE_BYTES} "
                                    "bytes; ask for top_k")
        margin = request.margin if request.HasField("margin") else None
        regime, _ = self._regime(coll, "row", "", margin)
        cal = self._calibration(ledger, request.epsilon, request.delta, regime)
        params = {"epsilon": cal.epsilon, "delta": cal.delta, "top_k": k, "row": row,
                  "calibration": cal.method, "regime": regime_params(regime)}

        def compute(charge: Charge, record: np.ndarray) -> pb.ScoreRelease:
            rel = release_record_row(coll.rows @ coll.rows[row], row, cal,
                                     rng=np.random.default_rng(), margin=margin)
            ranked = rel.noisy.copy()
            ranked[row] = -np.inf  # the reference record is not its own neighbour
            return self._score_reply(pid, charge, cal, rel, top_k(ranked, k) if k else None)

        reply, _ = jobs.scores(pid, request.request_id, params, cal, f"row/{pid}",
                               np.array([float(row)]), compute)
        return reply

    # -- Gram matrices --------------------------------------------------------------------------
    @grpc_edge
    def SubmitGram(self, request: pb.GramQuery, context) -> pb.GramJob:
        """Regime (ii) as a job: charge once per request id, queue, answer with the state."""
        pid, ledger, jobs, coll = self._prepare(context, request.federation_id,
                                                request.dataset)
        projector = request.projector or DEFAULT_PROJECTOR
        if projector not in GRAM_PROJECTORS:
            raise InvalidInputError(f"projector must be one of {GRAM_PROJECTORS}, got "
                                    f"{projector!r}")
        max_iter = int(request.max_iterations) or DEFAULT_GRAM_ITERATIONS
        if max_iter > MAX_GRAM_ITERATIONS:
            raise InvalidInputError(f"max_iterations must be <= {MAX_GRAM_ITERATIONS}, got "
                                    f"{max_iter}")
        n = coll.rows.shape[0]
        need = gram_working_bytes(n)
        if need > self.limits.max_memory_bytes:
            raise ResourceLimitError(
                f"a Gram release of the {n} records needs about {need / 2**30:.2f} GiB of "
                f"working memory, above [release] max_memory_bytes = "
                f"{self.limits.max_memory_bytes / 2**30:.2f} GiB; nothing was charged")
        regime, _ = self._regime(coll, "gram", request.adjacency, None)
        cal = self._calibration(ledger, request.epsilon, request.delta, regime)
        params = {"epsilon": cal.epsilon, "delta": cal.delta, "projector": projector,
                  "max_iterations": max_iter, "calibration": cal.method,
                  "expected_bytes": 8 * n * n, "regime": regime_params(regime)}
        job, repeated = jobs.submit_gram(pid, request.request_id, params, cal,
                                         f"gram/{projector}")
        if not repeated:
            log.info("Gram release %s/%s charged and queued (sigma=%.4g)", pid,
                     request.request_id, cal.sigma)
        return self._job_message(jobs, job, repeated)

    @grpc_edge
    def GetGram(self, request: pb.ReleaseRef, context) -> pb.GramJob:
        """The state and progress of the caller's Gram release."""
        pid, _, jobs = self._caller(context, request.federation_id, "")
        return self._job_message(jobs, jobs.gram(pid, request.request_id), True)

    @grpc_edge
    def FetchGram(self, request: pb.ReleaseRef, context) -> Iterator[pb.GramPart]:
        """A computed Gram release: header, then chunks of :data:`FETCH_CHUNK` bytes read from
        the kept file (never held whole), under the send timeout."""
        pid, _, jobs = self._caller(context, request.federation_id, "")
        job = jobs.gram(pid, request.request_id)
        if job.state != pb.GramJob.DONE or job.header is None:
            raise PreconditionError(f"Gram release {job.request_id!r} is "
                                    f"{pb.GramJob.State.Name(job.state)}"
                                    + (f": {job.error}; submit it again to compute it again at "
                                       "no charge" if job.error else
                                       " (GetGram reports its progress)"))
        return self._parts(job, job.header, context)

    def _parts(self, job: Job, header: pb.GramHeader, context) -> Iterator[pb.GramPart]:
        what = f"Gram release {job.pid}/{job.request_id}"
        with self._sends.watch(context, what) as touch, open_under(
                self.jobs.root, job.folder / "gram.npy") as fh:
            version = np.lib.format.read_magic(fh)
            if version == (1, 0):
                np.lib.format.read_array_header_1_0(fh)
            else:
                np.lib.format.read_array_header_2_0(fh)
            yield pb.GramPart(header=header)
            while True:
                touch()  # the previous message was taken: the client is reading
                piece = fh.read(FETCH_CHUNK)
                if not piece:
                    return
                yield pb.GramPart(chunk=piece)

    def _job_message(self, jobs: ReleaseJobs, job: Job, repeated: bool) -> pb.GramJob:
        assert job.charge is not None
        msg = pb.GramJob(request_id=job.request_id, state=job.state,
                         spend=self._spend(job.charge, job.calibration, repeated=repeated),
                         queue_position=jobs.queue_position(job), iterations=job.iterations,
                         relative_residual=job.relative_residual, tolerance=GRAM_TOLERANCE,
                         seconds=job.seconds, error=job.error)
        if job.header is not None:
            msg.header.CopyFrom(job.header)
        return msg

    def _compute_gram(self, job: Job, progress: Callable[[int, float], None]
                      ) -> tuple[pb.GramHeader, np.ndarray]:
        """Noise and projection of a paid Gram job (run by a release worker)."""
        assert job.charge is not None
        start = time.monotonic()
        coll = self._loaded_collection()
        cal = job.calibration  # the charged sigma, by construction
        identity = cal.regime is not None and cal.regime.adjacency == "identity"
        if identity and coll.identities is None:
            raise PreconditionError("the identity column no longer validates (see the log)")
        gram = coll.rows @ coll.rows.T
        np.fill_diagonal(gram, 1.0)  # unit rows: exactly 1, up to rounding
        rel = release_gram(gram, cal, rng=np.random.default_rng(),
                           projector=job.params["projector"], tol=GRAM_TOLERANCE,
                           max_iter=int(job.params["max_iterations"]), progress=progress,
                           identities=coll.identities if identity else None,
                           max_records_per_identity=(cal.regime.max_records_per_identity
                                                     if identity and cal.regime else None),
                           dimension=coll.rows.shape[1])
        proj = rel.projection
        header = pb.GramHeader(
            spend=self._spend(job.charge, cal, repeated=False),
            matrix=array_header(ArraySpec.of("gram", rel.matrix)), projector=rel.projector,
            iterations=proj.iterations if proj else 0, converged=bool(proj and proj.converged),
            min_eigenvalue=proj.min_eigenvalue if proj else 0.0,
            max_diag_error=proj.max_diag_error if proj else 0.0,
            eigendecompositions=proj.eigendecompositions if proj else 0,
            relative_residual=proj.relative_residual if proj else 0.0,
            seconds=time.monotonic() - start, baseline=baseline_message(rel.baseline))
        if rel.baseline.warning:
            log.info("Gram release %s/%s: %s", job.pid, job.request_id, rel.baseline.warning)
        return header, rel.matrix

    # -- budgets --------------------------------------------------------------------------------
    @grpc_edge
    def Budget(self, request: pb.BudgetQuery, context) -> pb.BudgetReport:
        """What is spent and left of the dataset's budget and of the caller's own quota (another
        participant's spending is its own business: :mod:`common.visibility`)."""
        pid, ledger, _ = self._caller(context, request.federation_id, request.dataset)
        return pb.BudgetReport(
            budget_delta=ledger.delta_budget,
            dataset=account_message(ledger.account(self.dataset)),
            participants=[account_message(ledger.account(self.dataset, pid))],
            min_epsilon=self.limits.min_epsilon)


def add_release_servicer(server: grpc.Server, federation: Federation) -> ReleaseServicer:
    """Open the ledger named by the config's ``[privacy]`` table, index the release jobs (and
    queue the paid ones a crash left unfinished), and serve Release on ``server``.

    Raises
    ------
    common.errors.LedgerError
        The existing ledger is unreadable or carries another budget (the analyst must not
        start with an unknown spent budget).
    """
    cfg = federation.config
    privacy = cfg.privacy
    ledger = None if privacy is None else PrivacyLedger(
        cfg.ledger_path, privacy.epsilon_budget, privacy.delta_budget,
        participants=cfg.participants,
        participant_epsilon_budget=privacy.participant_epsilon_budget,
        participant_max_releases=privacy.participant_max_releases,
        head_path=federation.store.root / LEDGER_HEAD)  # the head stays with the store
    servicer = ReleaseServicer(federation, ledger, cfg.release)
    pb_grpc.add_ReleaseServicer_to_server(servicer, server)
    return servicer

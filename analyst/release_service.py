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

Every release is charged to the dataset's privacy ledger before any noise is drawn; a release the
budget cannot afford is refused (RESOURCE_EXHAUSTED) and nothing is released. Top-k is
post-processing of the privatised scores.

References
----------
SPEC.md sections 2 and 5; ScoreShield paper Algorithms 1-2; issue 5, item 3.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator
from dataclasses import dataclass

import grpc
import numpy as np

from noisyanchor.analyst.edge import caller_id, grpc_edge
from noisyanchor.analyst.federation import Federation
from noisyanchor.analyst.privacy_budget import Charge, PrivacyLedger
from noisyanchor.common.errors import InvalidInputError, NotFoundError, PreconditionError
from noisyanchor.common.scoreshield import (
    GRAM_PROJECTORS,
    calibrate,
    gram_record_sensitivity,
    release_gram,
    release_score_vector,
    score_vector_sensitivity,
)
from noisyanchor.common.wire import ArraySpec, decode_array, iter_chunks
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
    """

    rows: np.ndarray
    participants: tuple[str, ...]
    rotations: np.ndarray
    means: np.ndarray

    def scores(self, pid: str, t: np.ndarray) -> np.ndarray:
        """Clean cosine scores ``s = E q`` of participant ``pid``'s query ``t``."""
        i = self.participants.index(pid)
        return self.rows @ query_direction(t, self.rotations[i], self.means[i])


def load_collection(federation: Federation) -> Collection:
    """:class:`Collection` from the aligned result in the federation's store."""
    result = federation.store.result

    def load(name: str) -> np.ndarray:
        return np.load(result / name, allow_pickle=False)

    return Collection(rows=collection_rows(load("z.npy"), load("shift.npy")),
                      participants=tuple(federation.config.participants),
                      rotations=load("rotations.npy"), means=load("means.npy"))


def decode_record(header, data: bytes, d: int) -> np.ndarray:
    """The query record of a :class:`ScoreQuery`: one ``(d,)`` little-endian float64 row.

    Checks dtype and shape against the collection's width before looking at the bytes, then
    the byte count, the SHA-256 (:func:`common.wire.decode_array`) and finiteness.
    """
    spec = ArraySpec.from_proto(header)
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


class ReleaseServicer(pb_grpc.ReleaseServicer):
    """Thin adapter from the Release wire contract to :mod:`common.scoreshield` and the ledger.

    Parameters
    ----------
    federation : Federation
        The analyst's federation (its config, state and store).
    ledger : PrivacyLedger or None
        The budget accountant; None when the config has no ``[privacy]`` table (every release
        is refused).
    """

    def __init__(self, federation: Federation, ledger: PrivacyLedger | None) -> None:
        self.fed = federation
        self.ledger = ledger
        self._lock = threading.Lock()
        self._collection: Collection | None = None

    # -- checks shared by both releases ---------------------------------------------------------
    def _prepare(self, context, federation_id: str, dataset: str) -> tuple[str, str, Collection]:
        """Caller id, dataset name and the collection, after every precondition."""
        pid, _ = caller_id(context)
        self.fed.check_caller(pid, federation_id)
        name = self.fed.config.federation_id
        if dataset not in ("", name):
            raise NotFoundError(f"no dataset {dataset!r}: this analyst releases from {name!r} "
                                "(its collaboration matrix)")
        if not self.fed.method.uses_anchor:
            raise PreconditionError(f"method {self.fed.method.value} has no anchor, so the "
                                    "collaboration frame has no record-independent origin for "
                                    "cosine similarities; releases need an AA-I-GDP method")
        if self.ledger is None:
            raise PreconditionError("the analyst config has no [privacy] table (epsilon_budget, "
                                    "delta_budget): DP releases are disabled")
        state = self.fed.state  # no store listing: this runs on every release
        if state != "done":
            raise PreconditionError(f"federation {name!r} is {state}; releases need the aligned "
                                    "collaboration matrix")
        with self._lock:
            if self._collection is None:
                self._collection = load_collection(self.fed)
            return pid, name, self._collection

    def _spend(self, charge: Charge, epsilon: float, delta: float) -> pb.Spend:
        ledger = self.ledger
        return pb.Spend(dataset=charge.dataset, sigma=charge.sigma,
                        sensitivity=charge.sensitivity, epsilon=epsilon, delta=delta,
                        charged_epsilon=charge.epsilon, spent_epsilon=charge.spent_epsilon,
                        remaining_epsilon=ledger.remaining(charge.dataset),
                        budget_epsilon=ledger.epsilon_budget, budget_delta=ledger.delta_budget)

    # -- RPCs -----------------------------------------------------------------------------------
    @grpc_edge
    def ReleaseScores(self, request: pb.ScoreQuery, context) -> pb.ScoreRelease:
        """Regime (i): ``clip(E q + N(0, sigma^2 I), -1, 1)`` or its top-k, charged first."""
        pid, dataset, coll = self._prepare(context, request.federation_id, request.dataset)
        n, d = coll.rows.shape
        t = decode_record(request.record_header, request.record, d)
        k = int(request.top_k)
        if k > n:
            raise InvalidInputError(f"top_k = {k} exceeds the {n} records of the collection")
        if k == 0 and 8 * n > MAX_SCORE_BYTES:
            raise InvalidInputError(f"the full score vector of {n} records exceeds "
                                    f"{MAX_SCORE_BYTES} bytes; ask for top_k")
        s = coll.scores(pid, t)
        cal = calibrate(request.epsilon, request.delta, score_vector_sensitivity())
        charge = self.ledger.charge(dataset, cal.sigma, cal.sensitivity, label=f"scores/{pid}")
        rel = release_score_vector(s, cal, rng=np.random.default_rng())
        ids = top_k(rel.noisy, k) if k else None
        scores = rel.scores if ids is None else rel.scores[ids]
        log.info("released %s scores to %s (sigma=%.4g, spent epsilon=%.4g)",
                 k or n, pid, rel.sigma, charge.spent_epsilon)
        return pb.ScoreRelease(
            spend=self._spend(charge, rel.epsilon, rel.delta),
            scores_header=ArraySpec.of("scores", scores).to_proto(),
            scores=scores.astype("<f8").tobytes(), top_ids=[] if ids is None else ids.tolist(),
            records=n, clipped=rel.n_clipped)

    @grpc_edge
    def ReleaseGram(self, request: pb.GramQuery, context) -> Iterator[pb.GramPart]:
        """Regime (ii): the projected noisy Gram ``P(E E^T + (N + N^T)/2)``, charged first and
        streamed as a header and chunks of at most :data:`common.wire.CHUNK_SIZE` bytes."""
        pid, dataset, coll = self._prepare(context, request.federation_id, request.dataset)
        projector = request.projector or DEFAULT_PROJECTOR
        if projector not in GRAM_PROJECTORS:
            raise InvalidInputError(f"projector must be one of {GRAM_PROJECTORS}, got "
                                    f"{projector!r}")
        max_iter = int(request.max_iterations) or DEFAULT_GRAM_ITERATIONS
        if max_iter > MAX_GRAM_ITERATIONS:
            raise InvalidInputError(f"max_iterations must be <= {MAX_GRAM_ITERATIONS}, got "
                                    f"{max_iter}")
        n = coll.rows.shape[0]
        cal = calibrate(request.epsilon, request.delta, gram_record_sensitivity(n))
        charge = self.ledger.charge(dataset, cal.sigma, cal.sensitivity,
                                    label=f"gram/{projector}/{pid}")
        rel = release_gram(coll.rows @ coll.rows.T, cal, rng=np.random.default_rng(),
                           projector=projector, max_iter=max_iter)
        proj = rel.projection
        header = pb.GramHeader(
            spend=self._spend(charge, rel.epsilon, rel.delta),
            matrix=ArraySpec.of("gram", rel.matrix).to_proto(), projector=projector,
            iterations=proj.iterations if proj else 0, converged=bool(proj and proj.converged),
            min_eigenvalue=proj.min_eigenvalue if proj else 0.0,
            max_diag_error=proj.max_diag_error if proj else 0.0)
        log.info("released the %d x %d Gram (%s) to %s (sigma=%.4g, spent epsilon=%.4g)",
                 n, n, projector, pid, rel.sigma, charge.spent_epsilon)
        return _gram_parts(header, rel.matrix)


def _gram_parts(header: pb.GramHeader, matrix: np.ndarray) -> Iterator[pb.GramPart]:
    yield pb.GramPart(header=header)
    for piece in iter_chunks({"gram": matrix}):
        yield pb.GramPart(chunk=bytes(piece))


def add_release_servicer(server: grpc.Server, federation: Federation) -> ReleaseServicer:
    """Open the ledger named by the config's ``[privacy]`` table and serve Release on ``server``.

    Raises
    ------
    analyst.privacy_budget.LedgerError
        The existing ledger is unreadable or carries another budget (the analyst must not
        start with an unknown spent budget).
    """
    cfg = federation.config
    ledger = None if cfg.privacy is None else PrivacyLedger(
        cfg.ledger_path, cfg.privacy.epsilon_budget, cfg.privacy.delta_budget)
    servicer = ReleaseServicer(federation, ledger)
    pb_grpc.add_ReleaseServicer_to_server(servicer, server)
    return servicer

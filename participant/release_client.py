"""``noisyanchor release scores|row|gram|budget``: ask the analyst for differentially private
similarities, and see what is left of the budgets.

A score query is one of this participant's records ``x`` (a ``.npy`` file, or a row of its local
data), projected by the public ``F`` and sent through the participant's own GDP map,
``t = (x F) O_i + Psi_i``; the analyst maps it into the collaboration frame with this
participant's alignment map and returns privatised cosine scores against every collection row
(or the top k). The GDP key ``(O_i, Psi_i)`` is read from ``state_dir``, where it exists only when
the upload ran with ``keep_secrets = true``; without it the query is refused here, before any
connection. A row query names a collection record by its index (regime (iii): that record is
itself private, so the row carries ``sqrt(n - 1)`` times the noise of a score vector). A Gram
query needs no key. Score and Gram queries may ask for identity-level privacy (the analyst's
identity column and public bound), score and row queries for a public margin ``a`` (scores
clipped to ``[a, 1]`` before the noise: less noise for the same epsilon). Every Gram release
states its data-free baseline: whether it is expected to be closer to the truth than the
identity matrix (releasing nothing), and from which epsilon it would be.

What a release is charged. The analyst's ledger composes every release of a dataset exactly, as
one Gaussian mechanism (``mu``-GDP), and states every epsilon at the budget's delta: a release
asked at ``(epsilon, delta)`` is charged its epsilon at the budget's delta (smaller than
``epsilon`` when the budget's delta is larger), and what is left is the largest epsilon one more
release could have, not the budget minus the sum (composition is not additive).

Every release carries a request id (``--request-id``; a fresh random one by default). The
analyst charges an id once, computes it once and keeps the output, so asking again with the same
id (after a dropped connection, an interrupted wait, or on purpose) returns the same release at
no charge. A Gram release is submitted, then polled with progress until the analyst has computed
it, then fetched: no call stays open through the projection, and an interrupted wait loses
nothing (the command says how to fetch the release later).

Exit status 0 when the analyst released, 1 on any refusal (e.g. RESOURCE_EXHAUSTED when the
release would exceed the dataset's budget or this participant's quota; the message names which
and what is left; nothing is released or charged then).

References: SPEC.md section 5; ``protos/v1/release.proto``; issues 5 (item 3) and 11.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import uuid
from collections.abc import Callable
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from noisyanchor.common.errors import InvalidInputError, PreconditionError
from noisyanchor.common.gdp import GdpKey, gdp_map
from noisyanchor.common.npy_files import load_npy, load_npz
from noisyanchor.common.scoreshield.baseline import GramBaseline
from noisyanchor.common.wire import array_header, array_spec_of
from noisyanchor.participant.config import ParticipantConfig

#: Seconds between two polls of a Gram release's progress, at most; the first poll comes
#: sooner (FIRST_POLL_SECONDS, then 1.5 times longer each time) so that a release computed in a
#: fraction of a second is not waited for a whole second.
POLL_SECONDS, FIRST_POLL_SECONDS = 1.0, 0.05


@dataclass(frozen=True)
class Account:
    """One budget, as ``noisyanchor.v1.Account``: a dataset's, or a participant's quota on it.
    Every epsilon is at the budget's delta; ``left_epsilon`` is the largest epsilon one more
    release could still have."""

    name: str
    budget_epsilon: float
    spent_epsilon: float
    left_epsilon: float
    releases: int
    max_releases: int

    @classmethod
    def from_proto(cls, msg) -> Account:
        """From a ``noisyanchor.v1.Account`` message."""
        return cls(**{name: getattr(msg, name) for name in cls.__dataclass_fields__})


@dataclass(frozen=True)
class Spend:
    """What a release cost: noise, sensitivity, guarantee, and the budgets after it.

    Attributes mirror ``noisyanchor.v1.Spend``: ``charged_epsilon`` is this release alone at the
    budget's delta, ``spent_epsilon`` the composition of every release charged to the dataset,
    ``remaining_epsilon`` what is left of it, ``participant`` this participant's quota, and
    ``repeated`` says the answer repeats a release charged before (nothing charged now).
    """

    dataset: str
    sigma: float
    sensitivity: float
    epsilon: float
    delta: float
    charged_epsilon: float
    spent_epsilon: float
    remaining_epsilon: float
    budget_epsilon: float
    budget_delta: float
    participant: Account
    request_id: str
    repeated: bool
    regime: str = ""
    guarantee: str = ""
    record_epsilon: float = 0.0

    @classmethod
    def from_proto(cls, msg) -> Spend:
        """From a ``noisyanchor.v1.Spend`` message."""
        values: dict[str, Any] = {name: getattr(msg, name) for name in cls.__dataclass_fields__}
        values["participant"] = Account.from_proto(msg.participant)
        return cls(**values)


@dataclass(frozen=True)
class ScoreResult:
    """A released score vector (or its top k).

    Attributes
    ----------
    spend : Spend
    records : int
        ``n``, rows of the collection.
    clipped : int
        Coordinates the clip to ``[-1, 1]`` changed.
    scores : (n,) or (k,) ndarray
        Privatised scores (in the order of ``ids`` for a top-k release).
    ids : (k,) ndarray or None
        Collection rows of a top-k release, highest privatised score first.
    seconds : float
        Round-trip wall time of the RPC.
    noise_dominated : bool
        The analyst's statement that the noise swamps the scores at this epsilon.
    useful_epsilon : float
        The epsilon (same regime and delta) at which it would not.
    """

    spend: Spend
    records: int
    clipped: int
    scores: np.ndarray
    ids: np.ndarray | None
    seconds: float
    noise_dominated: bool = False
    useful_epsilon: float = 0.0


@dataclass(frozen=True)
class GramResult:
    """A released Gram matrix with the projection diagnostics the analyst reported.

    ``seconds`` is the wall time from submitting to holding the matrix; ``compute_seconds``
    the analyst's time computing it.
    """

    spend: Spend
    matrix: np.ndarray
    projector: str
    iterations: int
    converged: bool
    min_eigenvalue: float
    max_diag_error: float
    eigendecompositions: int
    relative_residual: float
    compute_seconds: float
    seconds: float
    baseline: GramBaseline | None = None


@dataclass(frozen=True)
class BudgetReport:
    """What is spent and left: the dataset's budget and every participant's quota."""

    delta: float
    dataset: Account
    participants: tuple[Account, ...]
    min_epsilon: float


# -- the query record --------------------------------------------------------------------------
def load_key(cfg: ParticipantConfig) -> GdpKey:
    """The participant's GDP key ``(O_i, Psi_i)`` kept in ``state_dir`` at upload time."""
    from noisyanchor.participant.run import SECRETS_FILE

    path = cfg.state_dir / SECRETS_FILE
    if not path.is_file():
        raise PreconditionError(
            f"no kept secret state at {path}: score queries are sent through this "
            "participant's own GDP map, whose key is kept only when the upload ran with "
            "keep_secrets = true ([participant] keep_secrets or --keep-secrets)")
    with cfg.open_state(path) as fh:
        kept = load_npz(fh, str(path), kinds="f")
    try:
        return GdpKey(kept["rotation"], kept["translation"])
    except KeyError as err:
        raise InvalidInputError(f"{path} holds no array {err}; not this site's kept secrets") \
            from None


def query_record(cfg: ParticipantConfig, record: Path | None, row_index: int | None) -> np.ndarray:
    """The raw query record ``x`` (``d_in``,): from a ``.npy`` file or row ``K`` of local data."""
    if (record is None) == (row_index is None):
        raise InvalidInputError("give exactly one of --record FILE.npy and --row-index K")
    if record is not None:
        x = load_npy(record, f"the query record {record}")
        if x.ndim == 2 and x.shape[0] == 1:
            x = x[0]
        if x.ndim != 1 or x.dtype.kind not in "iuf":
            raise InvalidInputError(f"{record}: a query record is one numeric row, got shape "
                                    f"{x.shape} and dtype {x.dtype}")
        return x.astype(np.float64)
    from noisyanchor.participant.run import local_data

    data = local_data(cfg)
    if not 0 <= row_index < len(data.x):
        raise InvalidInputError(f"--row-index {row_index} is outside the {len(data.x)} local "
                                "records")
    return data.x[row_index]


def transform_query(cfg: ParticipantConfig, x: np.ndarray, key: GdpKey) -> np.ndarray:
    """``t = (x F) O_i + Psi_i``: the record as this participant's upload would carry it."""
    from noisyanchor.participant.run import working_data

    return gdp_map(working_data(cfg, np.asarray(x, dtype=np.float64)[None, :]), key)[0]


# -- the RPCs ----------------------------------------------------------------------------------
def new_request_id() -> str:
    """A fresh random request id (UUID4, 32 hex digits)."""
    return uuid.uuid4().hex


def release_scores(cfg: ParticipantConfig, t: np.ndarray, epsilon: float, delta: float, *,
                   top_k: int = 0, dataset: str = "", request_id: str | None = None,
                   adjacency: str = "", margin: float | None = None) -> ScoreResult:
    """Send query ``t`` (already in this participant's GDP frame) and receive the release.

    ``adjacency`` ``"identity"`` asks for identity-level privacy; ``margin`` for the public
    margin ``[margin, 1]``. The call is retried while the analyst is unavailable: with one
    request id it is charged at most once.
    """
    from noisyanchor.common.wire import ArraySpec
    from noisyanchor.protos.v1 import release_pb2 as pb

    t = np.ascontiguousarray(t, dtype="<f8")
    query = pb.ScoreQuery(federation_id=cfg.federation_id, dataset=dataset,
                          record_header=array_header(ArraySpec.of("record", t)), record=t.tobytes(),
                          epsilon=epsilon, delta=delta, top_k=top_k,
                          request_id=request_id or new_request_id(), adjacency=adjacency,
                          margin=margin)
    return _score_call(cfg, "score release", "ReleaseScores", query, top_k)


def release_row(cfg: ParticipantConfig, row: int, epsilon: float, delta: float, *,
                top_k: int = 0, dataset: str = "", request_id: str | None = None,
                margin: float | None = None) -> ScoreResult:
    """Record ``row``'s privatised similarities to every collection record (regime (iii),
    sensitivity ``2 sqrt(n - 1)``), charged once per request id."""
    from noisyanchor.protos.v1 import release_pb2 as pb

    query = pb.RowQuery(federation_id=cfg.federation_id, dataset=dataset, row=row,
                        epsilon=epsilon, delta=delta, top_k=top_k,
                        request_id=request_id or new_request_id(), margin=margin)
    return _score_call(cfg, "row release", "ReleaseRow", query, top_k)


def _score_call(cfg: ParticipantConfig, what: str, rpc: str, query, top_k: int) -> ScoreResult:
    """One score-vector or row RPC, retried while the analyst is unavailable."""
    from noisyanchor.common.wire import decode_array
    from noisyanchor.participant.run import analyst_client
    from noisyanchor.protos.v1 import release_pb2_grpc as pb_grpc

    with analyst_client(cfg) as client:
        stub = pb_grpc.ReleaseStub(client.channel)
        start = time.perf_counter()
        reply = client.call(what, lambda: getattr(stub, rpc)(query))
        seconds = time.perf_counter() - start
    scores = decode_array(reply.scores_header, reply.scores)
    return ScoreResult(Spend.from_proto(reply.spend), reply.records, reply.clipped, scores,
                       np.array(reply.top_ids, dtype=np.int64) if top_k else None, seconds,
                       reply.noise_dominated, reply.useful_epsilon)


def baseline_from_proto(msg, n: int, sigma: float) -> GramBaseline:
    """A :class:`common.scoreshield.GramBaseline` from a ``noisyanchor.v1.GramBaseline``."""
    def opt(name: str) -> float | None:
        return getattr(msg, name) if msg.HasField(name) else None

    return GramBaseline(
        n=n, sigma=sigma, noisy_distance=msg.noisy_distance,
        projected_bound=msg.projected_bound, projected_estimate=opt("projected_estimate"),
        projected_stderr=opt("projected_stderr"), identity_estimate=msg.identity_estimate,
        identity_stderr=msg.identity_stderr, identity_max=msg.identity_max,
        identity_floor=msg.identity_floor, no_better_than_identity=msg.no_better_than_identity,
        useful_epsilon=opt("useful_epsilon"), useful_epsilon_basis=msg.useful_epsilon_basis,
        warning=msg.warning or None)


def _receive_gram(parts) -> tuple[Any, np.ndarray]:
    """Header and matrix of a FetchGram stream, checked by size and SHA-256 as it arrives."""
    from noisyanchor.common.wire import BundleDigester, BundleSpec, wire_dtype

    first = next(parts, None)
    if first is None or first.WhichOneof("part") != "header":
        raise InvalidInputError("a Gram release stream must start with its header")
    header = first.header
    spec = array_spec_of(header.matrix)
    if spec.dtype != "<f8" or len(spec.shape) != 2 or spec.shape[0] != spec.shape[1]:
        raise InvalidInputError(f"the released Gram must be a square '<f8' matrix, got "
                                f"{spec.dtype!r} {spec.shape}")
    digester = BundleDigester(BundleSpec("", "", (spec,)))
    buf = bytearray(spec.nbytes)
    for part in parts:
        if part.WhichOneof("part") != "chunk":
            raise InvalidInputError("only chunks may follow the header of a Gram release")
        start = digester.received
        digester.feed(part.chunk)  # refuses bytes beyond the declared size before they land
        buf[start:digester.received] = part.chunk
    digester.finish()
    return header, np.frombuffer(buf, dtype=wire_dtype(spec.dtype)).reshape(spec.shape)


#: ``progress(job)`` with a ``noisyanchor.v1.GramJob``, after every poll.
GramProgress = Callable[[Any], None]


def release_gram(cfg: ParticipantConfig, epsilon: float, delta: float, *,
                 projector: str = "newton", max_iterations: int = 0, dataset: str = "",
                 request_id: str | None = None, progress: GramProgress | None = None,
                 poll: float = POLL_SECONDS, adjacency: str = "") -> GramResult:
    """Submit a Gram release (charged once per ``request_id``), wait for it, fetch it.

    ``max_iterations`` caps the analyst's projection (0: its default). Waiting is bounded by the
    config's ``timeout`` when it sets one (then the release stays paid and kept on the analyst:
    call again with the same ``request_id`` to fetch it). Every RPC is short and retried while
    the analyst is unavailable; the matrix streams in bounded chunks, checked by its SHA-256.
    """
    from noisyanchor.participant.run import analyst_client
    from noisyanchor.protos.v1 import release_pb2 as pb
    from noisyanchor.protos.v1 import release_pb2_grpc as pb_grpc

    rid = request_id or new_request_id()
    query = pb.GramQuery(federation_id=cfg.federation_id, dataset=dataset, epsilon=epsilon,
                         delta=delta, projector=projector, max_iterations=max_iterations,
                         request_id=rid, adjacency=adjacency)
    ref = pb.ReleaseRef(federation_id=cfg.federation_id, request_id=rid)
    start = time.perf_counter()
    pause = min(poll, FIRST_POLL_SECONDS)
    with analyst_client(cfg) as client:
        stub = pb_grpc.ReleaseStub(client.channel)
        job = client.call("Gram release", lambda: stub.SubmitGram(query))
        repeated = job.spend.repeated
        while job.state in (pb.GramJob.QUEUED, pb.GramJob.RUNNING):
            if progress is not None:
                progress(job)
            if cfg.timeout is not None and time.perf_counter() - start > cfg.timeout:
                raise PreconditionError(
                    f"Gram release {rid!r} is still {pb.GramJob.State.Name(job.state)} after "
                    f"{cfg.timeout:g} s ([participant] timeout): it is paid and kept on the "
                    f"analyst; fetch it later with --request-id {rid}")
            time.sleep(pause)
            pause = min(poll, pause * 1.5)
            job = client.call("Gram release progress", lambda: stub.GetGram(ref))
        if progress is not None:
            progress(job)
        if job.state == pb.GramJob.FAILED:
            raise PreconditionError(f"the analyst failed to compute Gram release {rid!r}: "
                                    f"{job.error}; it is paid: ask again with --request-id "
                                    f"{rid} to compute it again at no charge")
        header, matrix = client.call("Gram release fetch", lambda: _receive_gram(
            iter(stub.FetchGram(ref))))
    spend = replace(Spend.from_proto(header.spend), repeated=repeated)
    baseline = (baseline_from_proto(header.baseline, matrix.shape[0], spend.sigma)
                if header.HasField("baseline") else None)
    return GramResult(spend, matrix, header.projector, header.iterations, header.converged,
                      header.min_eigenvalue, header.max_diag_error, header.eigendecompositions,
                      header.relative_residual, header.seconds, time.perf_counter() - start,
                      baseline)


def release_budget(cfg: ParticipantConfig, dataset: str = "") -> BudgetReport:
    """The dataset's budget and every participant's quota: spent and left."""
    from noisyanchor.participant.run import analyst_client
    from noisyanchor.protos.v1 import release_pb2 as pb
    from noisyanchor.protos.v1 import release_pb2_grpc as pb_grpc

    query = pb.BudgetQuery(federation_id=cfg.federation_id, dataset=dataset)
    with analyst_client(cfg) as client:
        stub = pb_grpc.ReleaseStub(client.channel)
        report = client.call("budget query", lambda: stub.Budget(query))
    return BudgetReport(report.budget_delta, Account.from_proto(report.dataset),
                        tuple(Account.from_proto(a) for a in report.participants),
                        report.min_epsilon)


# -- command line ------------------------------------------------------------------------------
def register(sub: argparse._SubParsersAction) -> None:
    """Add the ``release`` group (``scores``, ``row``, ``gram``, ``budget``) to the top-level
    parser."""
    from noisyanchor.common.cliargs import (
        int_at_least,
        open_unit_float,
        positive_float,
        seconds,
    )
    from noisyanchor.participant.cli import COMMANDS

    group = sub.add_parser("release", help=COMMANDS["release"])
    inner = group.add_subparsers(dest="release_command", required=True, metavar="ACTION")
    sc = inner.add_parser("scores", help="privatised cosine scores of one of your records "
                          "against every collection row (needs keep_secrets at upload)")
    ro = inner.add_parser("row", help="privatised similarities of one collection record to "
                          "every other (that record is private too: sensitivity 2 sqrt(n - 1))")
    gr = inner.add_parser("gram", help="privatised, projected cosine Gram matrix of the "
                          "collection (submitted, polled with progress, fetched), with its "
                          "data-free baseline")
    bu = inner.add_parser("budget", help="what is spent and left of the dataset's budget and "
                          "of every participant's quota")
    for p in (sc, ro, gr, bu):
        p.add_argument("--config", type=Path, required=True, help="participant TOML file")
        p.add_argument("--dataset", default="", help="dataset (default: the federation's)")
        p.add_argument("--analyst", default=None, help="override [participant] analyst host:port")
        p.add_argument("--timeout", type=seconds, default=None,
                       help="override [participant] timeout (seconds: retries while the "
                       "analyst is unavailable, and the wait for a Gram release)")
        p.add_argument("--json", action="store_true", help="print the outcome as JSON")
    for p in (sc, ro, gr):
        p.add_argument("--epsilon", type=positive_float, required=True,
                       help="epsilon of this release")
        p.add_argument("--delta", type=open_unit_float, required=True, help="delta of this release")
        p.add_argument("--request-id", default=None,
                       help="id of this release (default: a fresh random one); the same id "
                       "again returns the same release at no charge")
    which = sc.add_mutually_exclusive_group(required=True)
    which.add_argument("--record", type=Path, help=".npy file with one raw record (d_in,)")
    which.add_argument("--row-index", type=int_at_least(0),
                       help="row K of this participant's local data")
    for p in (sc, ro):
        p.add_argument("--top-k", type=int_at_least(0), default=0,
                       help="return only the K highest scores")
        p.add_argument("--margin", type=float, default=None, metavar="A",
                       help="public margin: clip the clean scores to [A, 1] before the noise "
                       "(sensitivity 1 - A instead of 2; ScoreShield paper App. H.1)")
    for p in (sc, gr):
        p.add_argument("--identity", action="store_true",
                       help="identity-level privacy: all records of one identity (the "
                       "analyst's identity column, at most k each) may change")
    ro.add_argument("--row", type=int_at_least(0), required=True,
                    help="index K of the reference record in the collaboration matrix")
    gr.add_argument("--projector", choices=("newton", "aap", "dykstra", "none"),
                    default="newton", help="post-processing onto correlation matrices: "
                    "semismooth Newton (the nearest correlation matrix), averaged alternating "
                    "projections (the paper's), Dykstra, or none")
    gr.add_argument("--max-iter", type=int_at_least(0), default=0,
                    help="cap on the projection's iterations (default: the analyst's, 100)")
    gr.add_argument("--poll", type=seconds, default=POLL_SECONDS,
                    help="seconds between two progress polls, at most (the first "
                         "come sooner)")
    gr.add_argument("--out", type=Path, required=True, help="where to save the matrix (.npy)")
    sc.set_defaults(handler=_scores)
    ro.set_defaults(handler=_row)
    gr.set_defaults(handler=_gram)
    bu.set_defaults(handler=_budget)


def _config(args: argparse.Namespace) -> ParticipantConfig:
    from noisyanchor.participant.config import load_participant_config

    return load_participant_config(args.config).with_overrides(analyst=args.analyst,
                                                                timeout=args.timeout)


def _account_line(a: Account, delta: float) -> str:
    quota = f", {a.releases} of {a.max_releases} releases" if a.max_releases else ""
    return (f"spent epsilon={a.spent_epsilon:.4g} of {a.budget_epsilon:.4g}, left "
            f"{a.left_epsilon:.4g} at delta={delta:g}{quota}")


def _spend_line(s: Spend) -> str:
    """What a release cost, in words: the charge, the composed spend, what is left, and why the
    charge is not simply the epsilon asked for."""
    if s.repeated:
        paid = "a repeat of an earlier release: nothing charged now"
    else:
        paid = (f"charged epsilon={s.charged_epsilon:.4g}: this release alone, stated at the "
                f"budget's delta={s.budget_delta:g} (the ledger composes all releases exactly as "
                "one Gaussian mechanism, mu-GDP, and states every epsilon at that delta"
                + ("" if s.delta == s.budget_delta else f"; asked at delta={s.delta:g}") + ")")
    record = ("" if not s.record_epsilon or abs(s.record_epsilon - s.epsilon) <= 1e-9 * s.epsilon
              else f"; record-level epsilon of this noise {s.record_epsilon:.4g}")
    regime = f" [{s.regime}]" if s.regime else ""
    return (f"sigma={s.sigma:.4g} (sensitivity {s.sensitivity:.4g}{regime}) for "
            f"epsilon={s.epsilon:g}, delta={s.delta:g}{record}, request {s.request_id}, {paid}; "
            f"dataset {s.dataset!r}: spent epsilon={s.spent_epsilon:.4g} of "
            f"{s.budget_epsilon:g} (every release composed), left {s.remaining_epsilon:.4g} (the "
            "largest epsilon one more release could have; composition is not additive, so "
            "this is not budget minus spent); your quota: "
            f"{_account_line(s.participant, s.budget_delta)}")


def score_warning(res: ScoreResult, what: str = "scores") -> str | None:
    """The warning printed when the analyst reports that the noise dominates, or None."""
    if not res.noise_dominated:
        return None
    n = max(res.records, 2)
    top = res.spend.sigma * np.sqrt(2 * np.log(n))
    return (f"these {what} are dominated by noise at this epsilon: sigma={res.spend.sigma:.3g}, "
            f"so the largest of the {n} noise draws (~{top:.2g}) exceeds half the range of a "
            "score and the ranking reflects the noise, not the "
            f"query; for {res.records} records a useful signal needs epsilon >= "
            f"{res.useful_epsilon:.3g} at delta={res.spend.delta:g}")


def _print_scores(args: argparse.Namespace, res: ScoreResult, what: str) -> int:
    ids = res.ids if res.ids is not None else np.arange(len(res.scores))
    warning = score_warning(res, what)
    if args.json:
        print(json.dumps({"spend": asdict(res.spend), "sigma": res.spend.sigma,
                          "noise_dominated": res.noise_dominated,
                          "useful_epsilon": res.useful_epsilon,
                          "warning": warning, "records": res.records,
                          "clipped": res.clipped, "top_k": args.top_k,
                          "ids": ids.tolist(), "scores": res.scores.tolist(),
                          "seconds": res.seconds}, indent=2))
        return 0
    print(f"released {len(res.scores)} of {res.records} privatised {what} in "
          f"{res.seconds:.3f} s: {_spend_line(res.spend)}")
    if res.spend.guarantee:
        print(f"guarantee: {res.spend.guarantee}")
    if warning:
        print(f"warning: {warning}")
    if res.ids is None:  # clipped ties make a ranking of the full vector misleading
        print(f"  {res.clipped} of {res.records} {what} clipped to the score range; --json "
              "prints the vector, --top-k K ranks the rows (by the unclipped noisy scores)")
        return 0
    for row, score in zip(res.ids, res.scores, strict=True):
        print(f"  row {row}: {score:+.4f}")
    return 0


def _scores(args: argparse.Namespace) -> int:
    cfg = _config(args)
    key = load_key(cfg)
    t = transform_query(cfg, query_record(cfg, args.record, args.row_index), key)
    res = release_scores(cfg, t, args.epsilon, args.delta, top_k=args.top_k,
                         dataset=args.dataset, request_id=args.request_id,
                         adjacency="identity" if args.identity else "", margin=args.margin)
    return _print_scores(args, res, "scores")


def _row(args: argparse.Namespace) -> int:
    cfg = _config(args)
    res = release_row(cfg, args.row, args.epsilon, args.delta, top_k=args.top_k,
                      dataset=args.dataset, request_id=args.request_id, margin=args.margin)
    return _print_scores(args, res, f"similarities of record {args.row}")


def baseline_lines(b: GramBaseline) -> list[str]:
    """The data-free baseline of a Gram release, in words."""
    est = ("" if b.projected_estimate is None else
           f", estimated {max(b.projected_estimate, 0.0):.4g} +- {b.projected_stderr:.2g}")
    lines = [f"baseline (squared Frobenius distance to the true Gram): this release at most "
             f"{b.projected_bound:.4g} expected{est}; the identity matrix (releasing nothing) "
             f"{b.identity_estimate:.4g} +- {b.identity_stderr:.2g} (DP estimate from the same "
             f"noise, no extra privacy; at most {b.identity_max:.4g} for any data)"]
    if b.warning:
        lines.append(f"warning: {b.warning}")
    else:
        lines.append("this release is expected to be closer to the true Gram than the identity")
    return lines


def _show_progress(job) -> None:
    """One line per poll on stderr (stdout carries the result)."""
    from noisyanchor.protos.v1 import release_pb2 as pb

    state = pb.GramJob.State.Name(job.state).lower()
    if job.state == pb.GramJob.QUEUED:
        detail = f"{job.queue_position} ahead of it"
    elif job.state == pb.GramJob.RUNNING:
        detail = (f"iteration {job.iterations}, feasibility gap {job.relative_residual:.1e} "
                  f"-> {job.tolerance:.0e}, {job.seconds:.0f} s")
    else:
        detail = f"{job.seconds:.1f} s"
    print(f"Gram release {job.request_id}: {state} ({detail})", file=sys.stderr, flush=True)


def _gram(args: argparse.Namespace) -> int:
    cfg = _config(args)
    rid = args.request_id or new_request_id()
    try:
        res = release_gram(cfg, args.epsilon, args.delta, projector=args.projector,
                           max_iterations=args.max_iter, dataset=args.dataset, request_id=rid,
                           progress=None if args.json else _show_progress, poll=args.poll,
                           adjacency="identity" if args.identity else "")
    except KeyboardInterrupt:
        print(f"interrupted: Gram release {rid} is paid and kept on the analyst; fetch it "
              f"with the same command and --request-id {rid} (no further charge)",
              file=sys.stderr)
        raise
    args.out.parent.mkdir(parents=True, exist_ok=True)
    np.save(args.out, res.matrix, allow_pickle=False)
    if args.json:
        print(json.dumps({"spend": asdict(res.spend), "request_id": rid,
                          "repeated": res.spend.repeated, "n": res.matrix.shape[0],
                          "projector": res.projector, "iterations": res.iterations,
                          "eigendecompositions": res.eigendecompositions,
                          "converged": res.converged, "relative_residual": res.relative_residual,
                          "min_eigenvalue": res.min_eigenvalue,
                          "max_diag_error": res.max_diag_error, "out": str(args.out),
                          "compute_seconds": res.compute_seconds, "seconds": res.seconds,
                          "baseline": res.baseline.as_dict() if res.baseline else None,
                          "no_better_than_identity": bool(res.baseline and
                                                          res.baseline.no_better_than_identity),
                          "useful_epsilon": res.baseline.useful_epsilon if res.baseline
                          else None,
                          "warning": res.baseline.warning if res.baseline else None},
                         indent=2))
        return 0
    n = res.matrix.shape[0]
    print(f"released the {n} x {n} Gram ({res.projector}, {res.iterations} iterations, "
          f"{res.eigendecompositions} eigendecompositions, computed in "
          f"{res.compute_seconds:.1f} s) in {res.seconds:.1f} s to {args.out}: "
          f"{_spend_line(res.spend)}")
    if res.spend.guarantee:
        print(f"guarantee: {res.spend.guarantee}")
    if res.baseline is not None:
        print("\n".join(baseline_lines(res.baseline)))
    return 0


def _budget(args: argparse.Namespace) -> int:
    cfg = _config(args)
    rep = release_budget(cfg, args.dataset)
    if args.json:
        print(json.dumps({"delta": rep.delta, "min_epsilon": rep.min_epsilon,
                          "dataset": asdict(rep.dataset),
                          "participants": [asdict(a) for a in rep.participants]}, indent=2))
        return 0
    print(f"dataset {rep.dataset.name!r}: {_account_line(rep.dataset, rep.delta)} "
          f"({rep.dataset.releases} releases)")
    for a in rep.participants:
        print(f"  participant {a.name!r}: {_account_line(a, rep.delta)}")
    print(f"releases asking for epsilon < {rep.min_epsilon:g} are refused")
    return 0

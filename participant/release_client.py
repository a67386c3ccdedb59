"""``noisyanchor release scores|gram``: ask the analyst for differentially private similarities.

A score query is one of this participant's records ``x`` (a ``.npy`` file, or a row of its local
data), projected by the public ``F`` and sent through the participant's own GDP map,
``t = (x F) O_i + Psi_i``; the analyst maps it into the collaboration frame with this
participant's alignment map and returns privatised cosine scores against every collection row
(or the top k). The GDP key ``(O_i, Psi_i)`` is read from ``state_dir``, where it exists only when
the upload ran with ``keep_secrets = true``; without it the query is refused here, before any
connection. A Gram query needs no key.

Exit status 0 when the analyst released, 1 on any refusal (e.g. RESOURCE_EXHAUSTED when the
release would exceed the dataset's privacy budget; nothing is released then).

References: SPEC.md section 5; ``protos/v1/release.proto``; issue 5, item 3.
"""

from __future__ import annotations

import argparse
import json
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from noisyanchor.common.errors import InvalidInputError, PreconditionError
from noisyanchor.common.gdp import GdpKey, gdp_map
from noisyanchor.participant.config import ParticipantConfig


@dataclass(frozen=True)
class Spend:
    """What a release cost: noise, sensitivity, guarantee, and the dataset's budget after it.

    Attributes mirror ``noisyanchor.v1.Spend``: ``charged_epsilon`` is this release alone at the
    budget's delta, ``spent_epsilon`` the composition of every release charged to the dataset.
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

    @classmethod
    def from_proto(cls, msg) -> Spend:
        """From a ``noisyanchor.v1.Spend`` message."""
        return cls(**{name: getattr(msg, name) for name in cls.__dataclass_fields__})


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
    """

    spend: Spend
    records: int
    clipped: int
    scores: np.ndarray
    ids: np.ndarray | None
    seconds: float


@dataclass(frozen=True)
class GramResult:
    """A released Gram matrix with the projection diagnostics the analyst reported."""

    spend: Spend
    matrix: np.ndarray
    projector: str
    iterations: int
    converged: bool
    min_eigenvalue: float
    max_diag_error: float
    seconds: float


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
    with np.load(path, allow_pickle=False) as kept:
        return GdpKey(kept["rotation"], kept["translation"])


def query_record(cfg: ParticipantConfig, record: Path | None, row_index: int | None) -> np.ndarray:
    """The raw query record ``x`` (``d_in``,): from a ``.npy`` file or row ``K`` of local data."""
    if (record is None) == (row_index is None):
        raise InvalidInputError("give exactly one of --record FILE.npy and --row-index K")
    if record is not None:
        try:
            x = np.load(record, allow_pickle=False)
        except (OSError, ValueError) as err:
            raise InvalidInputError(f"cannot read the query record {record}: {err}") from None
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
def release_scores(cfg: ParticipantConfig, t: np.ndarray, epsilon: float, delta: float, *,
                   top_k: int = 0, dataset: str = "") -> ScoreResult:
    """Send query ``t`` (already in this participant's GDP frame) and receive the release."""
    from noisyanchor.common.wire import ArraySpec, decode_array
    from noisyanchor.participant.run import analyst_client
    from noisyanchor.protos.v1 import release_pb2 as pb
    from noisyanchor.protos.v1 import release_pb2_grpc as pb_grpc

    t = np.ascontiguousarray(t, dtype="<f8")
    query = pb.ScoreQuery(federation_id=cfg.federation_id, dataset=dataset,
                          record_header=ArraySpec.of("record", t).to_proto(), record=t.tobytes(),
                          epsilon=epsilon, delta=delta, top_k=top_k)
    with analyst_client(cfg) as client:
        stub = pb_grpc.ReleaseStub(client.channel)
        start = time.perf_counter()
        reply = client.call("score release", lambda: stub.ReleaseScores(query,
                                                                        timeout=cfg.wait_seconds))
        seconds = time.perf_counter() - start
    scores = decode_array(reply.scores_header, reply.scores)
    return ScoreResult(Spend.from_proto(reply.spend), reply.records, reply.clipped, scores,
                       np.array(reply.top_ids, dtype=np.int64) if top_k else None, seconds)


def _receive_gram(parts) -> tuple[object, np.ndarray]:
    """Header and matrix of a ReleaseGram stream, checked by size and SHA-256 as it arrives."""
    from noisyanchor.common.wire import ArraySpec, BundleDigester, BundleSpec, wire_dtype

    first = next(parts, None)
    if first is None or first.WhichOneof("part") != "header":
        raise InvalidInputError("a Gram release stream must start with its header")
    header = first.header
    spec = ArraySpec.from_proto(header.matrix)
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


def release_gram(cfg: ParticipantConfig, epsilon: float, delta: float, *,
                 projector: str = "newton", max_iterations: int = 0,
                 dataset: str = "") -> GramResult:
    """Receive the privatised Gram matrix of the collection (streamed in bounded chunks).

    ``max_iterations`` caps the analyst's projection (0: its default). The RPC deadline is the
    config's ``timeout``: at n = 1,797 one projection iteration takes about a second.
    """
    from noisyanchor.participant.run import analyst_client
    from noisyanchor.protos.v1 import release_pb2 as pb
    from noisyanchor.protos.v1 import release_pb2_grpc as pb_grpc

    query = pb.GramQuery(federation_id=cfg.federation_id, dataset=dataset, epsilon=epsilon,
                         delta=delta, projector=projector, max_iterations=max_iterations)
    with analyst_client(cfg) as client:
        stub = pb_grpc.ReleaseStub(client.channel)
        start = time.perf_counter()
        header, matrix = client.call("Gram release", lambda: _receive_gram(
            iter(stub.ReleaseGram(query, timeout=cfg.wait_seconds))))
        seconds = time.perf_counter() - start
    return GramResult(Spend.from_proto(header.spend), matrix, header.projector, header.iterations,
                      header.converged, header.min_eigenvalue, header.max_diag_error, seconds)


# -- command line ------------------------------------------------------------------------------
def register(sub: argparse._SubParsersAction) -> None:
    """Add the ``release`` group (``scores``, ``gram``) to the top-level parser."""
    from noisyanchor.common.cliargs import int_at_least, open_unit_float, positive_float
    from noisyanchor.participant.cli import COMMANDS

    group = sub.add_parser("release", help=COMMANDS["release"])
    inner = group.add_subparsers(dest="release_command", required=True, metavar="ACTION")
    sc = inner.add_parser("scores", help="privatised cosine scores of one of your records "
                          "against every collection row (needs keep_secrets at upload)")
    gr = inner.add_parser("gram", help="privatised, projected cosine Gram matrix of the "
                          "collection")
    for p in (sc, gr):
        p.add_argument("--config", type=Path, required=True, help="participant TOML file")
        p.add_argument("--epsilon", type=positive_float, required=True,
                       help="epsilon of this release")
        p.add_argument("--delta", type=open_unit_float, required=True, help="delta of this release")
        p.add_argument("--dataset", default="", help="dataset (default: the federation's)")
        p.add_argument("--analyst", default=None, help="override [participant] analyst host:port")
        p.add_argument("--timeout", type=positive_float, default=None,
                       help="override [participant] timeout (seconds, also the RPC deadline)")
        p.add_argument("--json", action="store_true", help="print the outcome as JSON")
    which = sc.add_mutually_exclusive_group(required=True)
    which.add_argument("--record", type=Path, help=".npy file with one raw record (d_in,)")
    which.add_argument("--row-index", type=int_at_least(0),
                       help="row K of this participant's local data")
    sc.add_argument("--top-k", type=int_at_least(0), default=0,
                    help="return only the K highest scores")
    gr.add_argument("--projector", choices=("newton", "aap", "dykstra", "none"),
                    default="newton", help="post-processing onto correlation matrices: "
                    "semismooth Newton (the nearest correlation matrix), averaged alternating "
                    "projections (the paper's), Dykstra, or none")
    gr.add_argument("--max-iter", type=int_at_least(0), default=0,
                    help="cap on the projection's iterations (default: the analyst's, 100)")
    gr.add_argument("--out", type=Path, required=True, help="where to save the matrix (.npy)")
    sc.set_defaults(handler=_scores)
    gr.set_defaults(handler=_gram)


def _config(args: argparse.Namespace) -> ParticipantConfig:
    from noisyanchor.participant.config import load_participant_config

    return load_participant_config(args.config).with_overrides(analyst=args.analyst,
                                                                timeout=args.timeout)


def _spend_line(s: Spend) -> str:
    return (f"sigma={s.sigma:.4g} (sensitivity {s.sensitivity:.4g}) for epsilon={s.epsilon:g}, "
            f"delta={s.delta:g}; dataset {s.dataset!r} has spent epsilon={s.spent_epsilon:.4g} "
            f"of {s.budget_epsilon:g} at delta={s.budget_delta:g} "
            f"(remaining {s.remaining_epsilon:.4g})")


def _scores(args: argparse.Namespace) -> int:
    if args.top_k < 0:
        raise InvalidInputError(f"--top-k must be >= 0, got {args.top_k}")
    cfg = _config(args)
    key = load_key(cfg)
    t = transform_query(cfg, query_record(cfg, args.record, args.row_index), key)
    res = release_scores(cfg, t, args.epsilon, args.delta, top_k=args.top_k,
                         dataset=args.dataset)
    ids = res.ids if res.ids is not None else np.arange(len(res.scores))
    if args.json:
        print(json.dumps({"spend": asdict(res.spend), "records": res.records,
                          "clipped": res.clipped, "top_k": args.top_k,
                          "ids": ids.tolist(), "scores": res.scores.tolist(),
                          "seconds": res.seconds}, indent=2))
        return 0
    print(f"released {len(res.scores)} of {res.records} privatised scores in "
          f"{res.seconds:.3f} s: {_spend_line(res.spend)}")
    if res.ids is None:  # clipped ties make a ranking of the full vector misleading
        print(f"  {res.clipped} of {res.records} scores clipped to [-1, 1]; --json prints the "
              "vector, --top-k K ranks the rows (by the unclipped noisy scores)")
        return 0
    for row, score in zip(res.ids, res.scores, strict=True):
        print(f"  row {row}: {score:+.4f}")
    return 0


def _gram(args: argparse.Namespace) -> int:
    cfg = _config(args)
    if args.max_iter < 0:
        raise InvalidInputError(f"--max-iter must be >= 0, got {args.max_iter}")
    res = release_gram(cfg, args.epsilon, args.delta, projector=args.projector,
                       max_iterations=args.max_iter, dataset=args.dataset)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    np.save(args.out, res.matrix, allow_pickle=False)
    if args.json:
        print(json.dumps({"spend": asdict(res.spend), "n": res.matrix.shape[0],
                          "projector": res.projector, "iterations": res.iterations,
                          "converged": res.converged, "min_eigenvalue": res.min_eigenvalue,
                          "max_diag_error": res.max_diag_error, "out": str(args.out),
                          "seconds": res.seconds}, indent=2))
        return 0
    n = res.matrix.shape[0]
    print(f"released the {n} x {n} Gram ({res.projector}, {res.iterations} iterations) in "
          f"{res.seconds:.3f} s to {args.out}: {_spend_line(res.spend)}")
    return 0

"""The analyst's federation declaration (``noisyanchor analyst serve --config FILE``).

See ``deploy/templates/analyst.toml`` for every key with comments.
"""

from __future__ import annotations

import datetime
import importlib.util
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from noisyanchor.analyst.contributions import DEFAULT_MAX_SITES
from noisyanchor.common.blas import check_blas_threads
from noisyanchor.common.dask_fit import LOCAL, check_scheduler
from noisyanchor.common.downstream import (
    FIT_MODES,
    MODELS,
    OUT_OF_CORE_MODELS,
    on_dask,
    sklearn_available,
)
from noisyanchor.common.errors import ConfigError, InvalidInputError
from noisyanchor.common.gopp import check_method, check_precision, check_stopping
from noisyanchor.common.methods import Method, check_sigma, check_v
from noisyanchor.common.schema import SCHEMA_DTYPES, RecordSchema
from noisyanchor.common.tabular import TabularSchema
from noisyanchor.common.tabular.columns import MAX_ENCODED_WIDTH, check_count_limit
from noisyanchor.common.tomlconfig import (
    Table,
    TlsFiles,
    check_distinct_ids,
    check_id,
    read_toml,
)
from noisyanchor.common.validation import (
    check_anchor_rows,
    check_nonnegative,
    check_positive,
    check_projection_dim,
)

#: Default cap on one upload's array bytes (8 GiB).
DEFAULT_MAX_UPLOAD_BYTES = 8 << 30

#: Default idle timeout of an upload or disclosure stream (seconds without a message).
DEFAULT_STREAM_IDLE_TIMEOUT = 60.0

#: Default minimum data rate of a client stream (bytes per second, judged per idle window).
DEFAULT_STREAM_MIN_RATE = 1024.0

#: Default absolute limit on the life of one stream (seconds): an 8 GiB upload needs more than
#: 2.3 MB/s to fit.
DEFAULT_STREAM_DEADLINE = 3600.0

#: Default number of streams (uploads, disclosures, releases) one caller may hold open at once.
DEFAULT_MAX_STREAMS_PER_CALLER = 4

#: Transport limits of the mutual-TLS port (``[server]`` keys; see ``deploy/README.md``,
#: section 6, for what each one protects): streams one HTTP/2 connection may have open (gRPC's
#: overload protection also counts calls cancelled by the client that the analyst has not let go
#: of yet), connections open at once (TLS handshakes included), seconds a TLS handshake may take,
#: seconds a connection without calls is kept, calls one participant may have waiting for a
#: worker, and calls accepted by the transport but not yet taken by the analyst.
DEFAULT_MAX_STREAMS_PER_CONNECTION = 32
DEFAULT_MAX_CONNECTIONS = 1000
DEFAULT_HANDSHAKE_TIMEOUT = 5.0
DEFAULT_CONNECTION_IDLE_TIMEOUT = 300.0
DEFAULT_MAX_QUEUED_CALLS_PER_CALLER = 16
#: Calls one participant may have in progress at the analyst at once (waiting or running); with
#: gRPC's global limit set to every participant's full share, one peer cannot take another's.
DEFAULT_MAX_CALLS_PER_CALLER = 32
DEFAULT_MAX_PENDING_CALLS = 1000
#: Connections one source address may hold at once, connections one participant may have claimed
#: (carried an admitted call on), and seconds a new connection has to carry its first admitted
#: call (TLS handshake included) before it is closed (:mod:`analyst.connection_front`).
#: 16 per address rather than 64: each connection may queue ``max_streams_per_connection`` calls
#: in gRPC's first-come queue ahead of every site's, and one participant's 64 x 32 unawaited
#: Status calls held honest Status at p99 1.45 s against 0.23 s with 16 (bench_flood (e), load 5).
DEFAULT_MAX_CONNECTIONS_PER_ADDRESS = 16
DEFAULT_MAX_CONNECTIONS_PER_CALLER = 8


def one_host_connections(participants: int,
                         per_caller: int = DEFAULT_MAX_CONNECTIONS_PER_CALLER) -> int:
    """``[server] max_connections_per_address`` of a federation whose sites all run on the
    analyst's host (the demo, the one-host pilot, the tests): they share one address, so it
    holds every participant's share of connections (and never less than the default)."""
    return max(DEFAULT_MAX_CONNECTIONS_PER_ADDRESS, participants * per_caller)
DEFAULT_CONNECTION_CLAIM_TIMEOUT = 10.0

#: File name of the privacy ledger under ``output_dir`` when ``[privacy] ledger`` is not set.
DEFAULT_LEDGER_NAME = "privacy_ledger.json"


#: Values of ``[federation] screening``: what the analyst does with a site its screening names
#: before alignment (:mod:`analyst.screening`); the first is the default.
SCREENING_POLICIES = ("refuse", "exclude", "accept")


def check_screening(value: str) -> str:
    """One of :data:`SCREENING_POLICIES`."""
    if value not in SCREENING_POLICIES:
        raise InvalidInputError(f"expected one of {', '.join(SCREENING_POLICIES)}, got "
                                f"{value!r}")
    return value


#: Default cap on the releases one participant may be charged for on one dataset.
DEFAULT_PARTICIPANT_MAX_RELEASES = 1000


@dataclass(frozen=True)
class PrivacyBudget:
    """Budgets of the DP similarity releases (``[privacy]`` table).

    Attributes
    ----------
    epsilon_budget : float
        Composed ``epsilon > 0`` every dataset may spend in total.
    delta_budget : float
        ``0 < delta < 1`` at which every composition is accounted.
    ledger : Path or None
        Ledger file; None: ``output_dir / DEFAULT_LEDGER_NAME``.
    participant_epsilon_budget : float or None
        Composed epsilon each participant may spend on each dataset; None: its fair share, the
        quota with which every participant's full quota fits the dataset budget together
        (:mod:`analyst.privacy_budget`).
    participant_max_releases : int
        Releases each participant may be charged for on each dataset (bounds the ledger).
    """

    epsilon_budget: float
    delta_budget: float
    ledger: Path | None = None
    participant_epsilon_budget: float | None = None
    participant_max_releases: int = DEFAULT_PARTICIPANT_MAX_RELEASES


@dataclass(frozen=True)
class ReleaseLimits:
    """What one DP release may cost the analyst (``[release]`` table; defaults when absent).

    Attributes
    ----------
    min_epsilon : float
        Releases asking a smaller epsilon are refused: they cost (next to) nothing, so nothing
        else would bound how often they can be asked for.
    send_timeout : float
        Seconds a release stream may wait for its client to take the next message before it is
        cancelled (a client that stops reading holds nothing for longer).
    max_concurrent : int
        Gram projections computed at once; further paid requests wait in a queue.
    max_queued_per_participant : int
        Paid Gram releases of one participant waiting or computing at once.
    max_memory_bytes : int
        Working memory one Gram release may need (estimated from ``n`` before anything is
        charged; a larger collection is refused).
    max_kept_bytes_per_participant : int
        Released outputs kept for one participant (for repeats and later fetches); a release
        that would exceed it is refused before it is charged.
    identities : Path or None
        The identity column of the collection for identity-level releases: a ``.npy`` vector
        or a text file with one label per line, one per collaboration-matrix row (participants
        in config order, each participant's records in upload order). None: identity-level
        releases are refused.
    max_records_per_identity : int or None
        The public bound ``k`` on the records of one identity (set with ``identities``); the
        analyst checks the column against it before serving any identity-level release.
    """

    min_epsilon: float = 0.01
    send_timeout: float = 30.0
    max_concurrent: int = 1
    max_queued_per_participant: int = 4
    max_memory_bytes: int = 4 << 30
    max_kept_bytes_per_participant: int = 4 << 30
    identities: Path | None = None
    max_records_per_identity: int | None = None


@dataclass(frozen=True)
class AnalystConfig:
    """Everything the analyst needs, validated once at start-up.

    Attributes
    ----------
    federation_id : str
    participants : tuple of str
        Expected participant ids (as the client certificates name them, :mod:`common.identity`),
        in collaboration-matrix order.
    method : str
        One of the six methods.
    anchors : int or None
        ``r`` (default ``4 d``).
    dim : int or None
        Working width ``d`` (``h`` when a public projection is used); checked on upload when set.
    sigma, v : float or None
        Declared noise levels (participants refuse to join with other levels; the analyst cannot
        verify them); None: not declared.
    reference : str
        Reference participant ``s`` of Procrustes alignment.
    max_iter, tol : int, float
        GOPP solver's ``T_max`` and ``eps``.
    precision : str
        GOPP products: ``"auto"``, ``"double"`` or ``"mixed"`` (:func:`common.gopp.solve_gopp`).
    stopping : str
        GOPP stopping rule: ``"objective"``, ``"relative"`` or ``"absolute"``.
    gopp_method : str
        GOPP method (``[solver] method``): ``"auto"`` or the paper's ``"gpm"``.
    output_dir : Path
        The analyst's store: committed uploads, relay, result.
    tls : TlsFiles
    accept_collusion : bool
        Accept colluder disclosures (threat-model testing only).
    host, port : str, int
        Listening address (port 0: any free port).
    port_file : Path or None
        Where to write the bound port once listening.
    max_upload_bytes : int
    stream_idle_timeout : float
        Seconds of waiting over which a stream's pace is judged: a client stream that sends
        nothing (or less than ``stream_min_rate`` per second) for that long, or a server stream
        whose client does not take a message for that long, is ended and its partial data
        discarded (:mod:`analyst.stream_watchdog`).
    stream_min_rate : float
        Bytes per second a client stream must send, judged over each ``stream_idle_timeout``.
    stream_deadline : float
        Seconds any one stream may stay open at most.
    max_streams_per_caller : int
        Streams one participant may hold open at once (:mod:`analyst.caller_limits`).
    max_streams_per_connection : int
        HTTP/2 streams one connection may have open at once (SETTINGS_MAX_CONCURRENT_STREAMS;
        streams the client reset count until the analyst has let go of them).
    max_connections : int
        TCP connections the port holds at once, TLS handshakes included.
    max_connections_per_address : int
        TCP connections one source address may hold at once.
    max_connections_per_caller : int
        Connections one participant may have claimed at once (a connection is claimed by its
        first admitted call).
    connection_claim_timeout : float
        Seconds a new connection may take to carry its first admitted call (TLS handshake
        included); then it is closed.
    handshake_timeout : float
        Seconds a connection may take to complete its TLS handshake before it is closed.
    connection_idle_timeout : float
        Seconds a connection with no call is kept open.
    max_queued_calls_per_caller : int
        Calls of one participant waiting for a worker at once; more are refused at arrival
        (RESOURCE_EXHAUSTED), without a worker (:mod:`analyst.admission`).
    max_calls_per_caller : int
        Calls of one participant in progress at once, waiting or running (more than
        ``max_streams_per_caller``, so a participant holding all its streams can still call
        Status); more are refused at arrival (RESOURCE_EXHAUSTED). gRPC's global limit of
        concurrent calls is every participant's full share (:func:`analyst.admission.
        global_limit`), so no peer's calls can use up another's.
    max_pending_calls : int
        Calls the transport has accepted and the analyst not yet taken; past it gRPC cancels
        new calls at random, every one past twice it (raised to what every participant's
        connections and one address's can hold: :func:`analyst.server.pending_calls`).
    blas_threads : int
        BLAS threads of every operation (alignment, certificate, releases); 0: chosen per
        operation by size and idle CPUs (:mod:`common.blas`).
    privacy : PrivacyBudget or None
        Budget of the DP releases; None (no ``[privacy]`` table): releases are refused.
    release : ReleaseLimits
        Limits of the DP releases (``[release]`` table).
    health_port : int or None
        Plaintext port on 127.0.0.1 answering only the standard gRPC health check (probes
        without a client certificate); None: health is served on the mTLS port only.
    log_json : Path or None
        File the analyst appends its log to as JSON lines (besides the console).
    schema : RecordSchema or None
        The records every participant's data must fit (``[schema]``); None: not declared.
    deadline : datetime or None
        When the federation gives up (timezone-aware): participants wait for each other until
        then by default; uploads and relay writes after it are refused.
    model : str
        Downstream model fitted on the training rows of ``Z`` after the alignment, its held-out
        metrics written to ``result.json`` (a name of :data:`common.downstream.MODELS`, or
        ``"none"``).
    fit : str
        ``[model] fit``: how the model is fitted, ``auto`` (out of core once its training rows
        would take more than :data:`common.downstream.IN_MEMORY_MAX_BYTES`, an eighth of the
        memory the process may use), ``in-memory``, ``out-of-core`` or ``dask@<scheduler>``
        (``[model] fit = "dask"`` and its ``scheduler``: :mod:`common.dask_fit`)
        (:data:`common.downstream.FIT_MODES`; the last two logistic only).
    contributions_max_sites : int
        ``[model] contributions_max_sites``: the sites the model is refitted without to measure
        what each contributed (:mod:`analyst.contributions`; one extra fit each, sampled
        deterministically beyond it; 0: not measured).
    report_projection_cost : bool
        Whether each site sends, with its upload, what the public projection ``F`` costs its
        own model (``[federation] report_projection_cost``; result.json's
        ``projection_costs``).
    dealer : str
        The one participant whose sealed shares the relay accepts (the anchor seed's dealer);
        declared to participants. Default (None given): the first participant.
    projection_seed, translation_scale : optional
        Further declared protocol parameters participants check their own against (None: not
        declared).
    screening : str
        ``[federation] screening``: what happens to a site the screening before alignment
        names (``refuse``, ``exclude`` or ``accept``; :mod:`analyst.screening`).
    """

    federation_id: str
    participants: tuple[str, ...]
    method: str
    anchors: int | None
    dim: int | None
    sigma: float | None
    v: float | None
    reference: str
    max_iter: int
    tol: float
    output_dir: Path
    tls: TlsFiles
    accept_collusion: bool = False
    host: str = "127.0.0.1"
    port: int = 0
    port_file: Path | None = None
    max_upload_bytes: int = DEFAULT_MAX_UPLOAD_BYTES
    stream_idle_timeout: float = DEFAULT_STREAM_IDLE_TIMEOUT
    blas_threads: int = 0
    stream_min_rate: float = DEFAULT_STREAM_MIN_RATE
    stream_deadline: float = DEFAULT_STREAM_DEADLINE
    max_streams_per_caller: int = DEFAULT_MAX_STREAMS_PER_CALLER
    max_streams_per_connection: int = DEFAULT_MAX_STREAMS_PER_CONNECTION
    max_connections: int = DEFAULT_MAX_CONNECTIONS
    max_connections_per_address: int = DEFAULT_MAX_CONNECTIONS_PER_ADDRESS
    max_connections_per_caller: int = DEFAULT_MAX_CONNECTIONS_PER_CALLER
    connection_claim_timeout: float = DEFAULT_CONNECTION_CLAIM_TIMEOUT
    handshake_timeout: float = DEFAULT_HANDSHAKE_TIMEOUT
    connection_idle_timeout: float = DEFAULT_CONNECTION_IDLE_TIMEOUT
    max_queued_calls_per_caller: int = DEFAULT_MAX_QUEUED_CALLS_PER_CALLER
    max_calls_per_caller: int = DEFAULT_MAX_CALLS_PER_CALLER
    max_pending_calls: int = DEFAULT_MAX_PENDING_CALLS
    privacy: PrivacyBudget | None = None
    release: ReleaseLimits = ReleaseLimits()
    precision: str = "auto"
    health_port: int | None = None
    log_json: Path | None = None
    schema: RecordSchema | None = None
    deadline: datetime.datetime | None = None
    dealer: str | None = None
    projection_seed: int | None = None
    translation_scale: float | None = None
    model: str = "logistic"
    fit: str = "auto"
    contributions_max_sites: int = DEFAULT_MAX_SITES
    report_projection_cost: bool = False
    stopping: str = "objective"
    gopp_method: str = "auto"
    screening: str = SCREENING_POLICIES[0]

    def __post_init__(self) -> None:
        # The relay accepts sealed shares from exactly one participant: always declared.
        if self.dealer is None:  # frozen: set once, here
            object.__setattr__(self, "dealer", self.participants[0])

    @property
    def ledger_path(self) -> Path:
        """The privacy ledger file (``[privacy] ledger``, default under ``output_dir``)."""
        if self.privacy is not None and self.privacy.ledger is not None:
            return self.privacy.ledger
        return Path(self.output_dir) / DEFAULT_LEDGER_NAME

    @property
    def method_enum(self) -> Method:
        """The method as an enum."""
        return Method(self.method)

    def with_overrides(self, **changes) -> AnalystConfig:
        """A copy with command-line overrides (``None`` values are ignored)."""
        return replace(self, **{k: v for k, v in changes.items() if v is not None})


def _member(pid: str, participants: tuple[str, ...]) -> str:
    if pid not in participants:
        raise InvalidInputError(f"{pid!r} is not one of the participants")
    return pid


def check_port(port: int) -> int:
    """A TCP port number (0: any free port)."""
    if not 0 <= port <= 65535:
        raise InvalidInputError(f"port must be in 0..65535, got {port}")
    return port


def load_analyst_config(path: Path) -> AnalystConfig:
    """Read and validate an analyst config file."""
    doc = read_toml(path)
    unknown = sorted(set(doc) - {"federation", "solver", "server", "tls", "privacy", "schema",
                                 "model", "release"})
    if unknown:
        raise ConfigError(f"{path}: unknown table(s) {', '.join(unknown)}")
    fed = Table(doc, "federation", path)
    fid = check_id(fed.str("id"), f"{path}: [federation] id")
    participants = tuple(fed.strs("participants"))
    if len(participants) < 2 or len(set(participants)) != len(participants):
        raise fed.error("participants", "needs at least 2 distinct participant ids")
    for pid in participants:
        check_id(pid, f"{path}: [federation] participants entry")
    check_distinct_ids(participants, f"{path}: [federation] participants")
    method = fed.str("method", check=lambda m: Method.parse(m).value)
    reference = fed.str("reference", participants[0])
    if reference not in participants:
        raise fed.error("reference", f"{reference!r} is not one of the participants")
    anchors = fed.int("anchors", None, minimum=2)
    dim = fed.int("dim", None, minimum=1)
    if anchors is not None and dim is not None:
        fed.checked("anchors", anchors, lambda r: check_anchor_rows(r, dim, "anchors need"))
    sigma = fed.float("sigma", None, check=lambda x: check_sigma(method, x))
    v = fed.float("v", None, check=lambda x: check_v(method, x))
    accept = fed.bool("accept_collusion", False)
    report_cost = fed.bool("report_projection_cost", False)
    declared = {"deadline": fed.datetime("deadline", None),
                "dealer": fed.str("dealer", None, check=lambda d: _member(d, participants)),
                "projection_seed": fed.int("projection_seed", None, minimum=0),
                "translation_scale": fed.positive_float("translation_scale", None)}
    screening = fed.str("screening", SCREENING_POLICIES[0], check=check_screening)
    fed.done()
    solver = Table(doc, "solver", path, required=False)
    max_iter = solver.int("max_iter", 500, minimum=1)
    tol = solver.float("tol", 1e-7, check=lambda x: check_positive(x, "tol"))
    precision = solver.str("precision", "auto", check=check_precision)
    stopping = solver.str("stopping", "objective", check=check_stopping)
    gopp_method = solver.str("method", "auto", check=check_method)
    solver.done()
    server = Table(doc, "server", path)
    streams = server.int("max_streams_per_caller", DEFAULT_MAX_STREAMS_PER_CALLER, minimum=1)
    privacy = _privacy(doc, path)
    release = _release(doc, path)
    if privacy is not None and release.min_epsilon > privacy.epsilon_budget:
        raise ConfigError(f"{path}: [release] min_epsilon = {release.min_epsilon:g} exceeds "
                          f"[privacy] epsilon_budget = {privacy.epsilon_budget:g}: every release "
                          "would be refused")
    schema = _schema(doc, path)
    if schema is not None:
        fed.checked("dim", dim, lambda h: check_projection_dim(h, schema.features, (
            "[schema] features" if schema.tabular is None
            else "the encoded width of [[schema.column]]")))
    if schema is not None and dim is None and anchors is not None:
        fed.checked("anchors", anchors, lambda r: check_anchor_rows(
            r, schema.features, "anchors need ([schema] features)"))
    cfg = AnalystConfig(
        federation_id=fid, participants=participants, method=method, anchors=anchors, dim=dim,
        sigma=sigma, v=v, reference=reference, max_iter=max_iter, tol=tol,
        output_dir=server.path("output_dir"), tls=TlsFiles.read(Table(doc, "tls", path)),
        accept_collusion=accept, host=server.str("host", "127.0.0.1"),
        port=server.int("port", 0, minimum=0, check=check_port),
        port_file=server.path("port_file", None),
        max_upload_bytes=server.int("max_upload_bytes", DEFAULT_MAX_UPLOAD_BYTES, minimum=1),
        stream_idle_timeout=server.seconds("stream_idle_timeout",
                                           DEFAULT_STREAM_IDLE_TIMEOUT),
        blas_threads=server.int("blas_threads", 0, minimum=0, check=check_blas_threads),
        stream_min_rate=server.float("stream_min_rate", DEFAULT_STREAM_MIN_RATE,
                                     check=lambda r: check_nonnegative(r, "stream_min_rate")),
        stream_deadline=server.seconds("stream_deadline", DEFAULT_STREAM_DEADLINE),
        max_streams_per_caller=streams,
        max_streams_per_connection=server.int("max_streams_per_connection",
                                              DEFAULT_MAX_STREAMS_PER_CONNECTION, minimum=1),
        max_connections=server.int("max_connections", DEFAULT_MAX_CONNECTIONS, minimum=1),
        max_connections_per_address=server.int("max_connections_per_address",
                                               DEFAULT_MAX_CONNECTIONS_PER_ADDRESS, minimum=1),
        max_connections_per_caller=server.int("max_connections_per_caller",
                                              DEFAULT_MAX_CONNECTIONS_PER_CALLER, minimum=1),
        connection_claim_timeout=server.seconds("connection_claim_timeout",
                                                DEFAULT_CONNECTION_CLAIM_TIMEOUT),
        handshake_timeout=server.seconds("handshake_timeout", DEFAULT_HANDSHAKE_TIMEOUT),
        connection_idle_timeout=server.seconds("connection_idle_timeout",
                                               DEFAULT_CONNECTION_IDLE_TIMEOUT),
        max_queued_calls_per_caller=server.int("max_queued_calls_per_caller",
                                               DEFAULT_MAX_QUEUED_CALLS_PER_CALLER, minimum=1),
        # Above the streams, so that a participant holding all of them can still call Status.
        max_calls_per_caller=server.int("max_calls_per_caller", DEFAULT_MAX_CALLS_PER_CALLER,
                                        minimum=streams + 1),
        max_pending_calls=server.int("max_pending_calls", DEFAULT_MAX_PENDING_CALLS, minimum=1),
        privacy=privacy, release=release, precision=precision, stopping=stopping,
        gopp_method=gopp_method,
        health_port=server.int("health_port", None, minimum=1, check=check_port),
        log_json=server.path("log_json", None), schema=schema, **_model(doc, path),
        report_projection_cost=report_cost, screening=screening,
        **declared)
    server.done()
    return cfg


def _privacy(doc: dict, path: Path) -> PrivacyBudget | None:
    """The optional ``[privacy]`` table: ``epsilon_budget > 0``, ``0 < delta_budget < 1``,
    per-participant quotas."""
    if "privacy" not in doc:
        return None
    table = Table(doc, "privacy", path)
    eps = table.positive_float("epsilon_budget")
    delta = table.float("delta_budget", minimum=0.0)
    if not 0.0 < delta < 1.0:
        raise table.error("delta_budget", f"must be in (0, 1), got {delta}")
    quota = table.positive_float("participant_epsilon_budget", None)
    if quota is not None and quota > eps:
        raise table.error("participant_epsilon_budget",
                          f"must be <= epsilon_budget = {eps:g}, got {quota:g}")
    budget = PrivacyBudget(
        eps, delta, table.path("ledger", None), quota,
        table.int("participant_max_releases", DEFAULT_PARTICIPANT_MAX_RELEASES, minimum=1))
    table.done()
    return budget


def _release(doc: dict, path: Path) -> ReleaseLimits:
    """The optional ``[release]`` table (:class:`ReleaseLimits`; defaults for missing keys)."""
    table = Table(doc, "release", path, required=False)
    d = ReleaseLimits()
    limits = ReleaseLimits(
        min_epsilon=table.positive_float("min_epsilon", d.min_epsilon),
        send_timeout=table.seconds("send_timeout", d.send_timeout),
        max_concurrent=table.int("max_concurrent", d.max_concurrent, minimum=1),
        max_queued_per_participant=table.int("max_queued_per_participant",
                                             d.max_queued_per_participant, minimum=1),
        max_memory_bytes=table.int("max_memory_bytes", d.max_memory_bytes, minimum=1 << 20),
        max_kept_bytes_per_participant=table.int("max_kept_bytes_per_participant",
                                                 d.max_kept_bytes_per_participant,
                                                 minimum=1 << 20),
        identities=table.path("identities", None),
        max_records_per_identity=table.int("max_records_per_identity", None, minimum=1))
    if (limits.identities is None) != (limits.max_records_per_identity is None):
        raise table.error("identities" if limits.identities is None else
                          "max_records_per_identity",
                          "identity-level releases need both identities (the column) and "
                          "max_records_per_identity (its public bound)")
    table.done()
    return limits


def _schema(doc: dict, path: Path) -> RecordSchema | None:
    """The optional ``[schema]`` table: ``features``, ``dtype``, ``feature_names``, or typed
    columns (``[[schema.column]]``, :meth:`common.tabular.TabularSchema.from_toml`)."""
    if "schema" not in doc:
        return None
    if isinstance(doc["schema"], dict) and "column" in doc["schema"]:
        return RecordSchema.typed(TabularSchema.from_toml(doc["schema"], path))
    table = Table(doc, "schema", path)
    features = table.int("features", minimum=1, check=lambda n: check_count_limit(
        n, MAX_ENCODED_WIDTH, f"{n:,} features") or n)
    dtype = table.str("dtype", "float64", check=_schema_dtype)
    names = tuple(table.strs("feature_names", []))
    table.checked("feature_names", names, lambda n: RecordSchema(features, dtype, n))
    table.done()
    return RecordSchema(features, dtype, names)


def _schema_dtype(dtype: str) -> str:
    if dtype not in SCHEMA_DTYPES:
        raise InvalidInputError(f"expected one of {', '.join(SCHEMA_DTYPES)}, got {dtype!r}")
    return dtype


def _model(doc: dict, path: Path) -> dict[str, Any]:
    """``[model]``: ``name``, a built-in downstream model, or ``"none"``, refused at load when
    scikit-learn is missing (the alignment would otherwise end without its model); ``fit``, one
    of :data:`common.downstream.FIT_MODES` (``out-of-core`` only for the models that can be);
    ``scheduler`` with ``fit = "dask"`` (``local``, the default, or a Dask scheduler's address;
    kept in ``fit`` as :func:`common.downstream.on_dask` names it); and
    ``contributions_max_sites`` (>= 0)."""
    table = Table(doc, "model", path, required=False)
    name = table.str("name", "logistic")
    if name != "none" and name not in MODELS:
        raise table.error("name", f"expected one of {', '.join([*MODELS, 'none'])}, got {name!r}")
    if name != "none" and not sklearn_available():
        raise table.error("name", f"the {name!r} model needs scikit-learn, which is not "
                          "installed: pip install 'noisyanchor[eval]', or set name = \"none\" "
                          "to align without a downstream model")
    fit = table.str("fit", "auto")
    if fit not in FIT_MODES:
        raise table.error("fit", f"expected one of {', '.join(FIT_MODES)}, got {fit!r}")
    if fit in ("out-of-core", "dask") and name not in OUT_OF_CORE_MODELS:
        raise table.error("fit", f"only the {', '.join(OUT_OF_CORE_MODELS)} model can be fitted "
                          f"{'out of core' if fit == 'out-of-core' else 'on Dask'}, not "
                          f"{name!r}")
    scheduler = table.str("scheduler", None, check=check_scheduler)
    if scheduler is not None and fit != "dask":
        raise table.error("scheduler", f"only used with fit = \"dask\", not {fit!r}")
    if fit == "dask":
        if importlib.util.find_spec("distributed") is None:
            raise table.error("fit", "fit = \"dask\" needs dask.distributed, which is not "
                              "installed: pip install 'noisyanchor[cluster]'")
        fit = on_dask(scheduler or LOCAL)
    cap = table.int("contributions_max_sites", DEFAULT_MAX_SITES, minimum=0)
    table.done()
    return {"model": name, "fit": fit, "contributions_max_sites": cap}

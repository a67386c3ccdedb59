"""The participant's two actions: its one upload, and (colluder role only) the disclosure.

References: SPEC.md sections 1 and 3; issue 3, items 3-5.
"""

from __future__ import annotations

import datetime
import json
import logging
import time
from dataclasses import dataclass

from google.protobuf.message import DecodeError

from noisyanchor.common.durations import human_duration, human_time
from noisyanchor.common.errors import (
    AlreadyExistsError,
    AnalystUnavailableError,
    IntegrityError,
    InvalidInputError,
    NoisyAnchorError,
    NotFoundError,
)
from noisyanchor.common.files import private_dir
from noisyanchor.common.npy_files import load_npz
from noisyanchor.common.progress import Progress
from noisyanchor.common.schema import RecordSchema
from noisyanchor.common.tabular import TableError
from noisyanchor.common.tabular.ranges import far_values
from noisyanchor.common.text import MAX_PEER_TEXT, peer_text
from noisyanchor.common.visibility import visible_json
from noisyanchor.common.wire import bundle_spec
from noisyanchor.common.wire_messages import PROTO_CODEC, federation_info_of, schema_of
from noisyanchor.participant.anchor import agree_on_seed, exchange_key_path
from noisyanchor.participant.client import AnalystClient
from noisyanchor.participant.config import ParticipantConfig
from noisyanchor.participant.core.join import (
    Joined,
    join,
    keep_schema,
    read_records,
    schema_path,
    working_data,
)
from noisyanchor.participant.core.upload import (
    SECRETS_FILE,
    compute_site_upload,
    keep_secrets,
    plan_upload,
    site_seeds,
)
from noisyanchor.participant.data import LocalData
from noisyanchor.participant.local_state import (
    UploadReceipt,
    keep_receipt,
    keep_withdrawal,
    load_receipt,
    now_iso,
    receipt_path,
)
from noisyanchor.participant.site_state import (
    SiteKey,
    keep_site_key,
    load_site_key,
    records_digest,
    upload_seed_path,
)
from noisyanchor.protos.v1 import analyst_pb2 as pb

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Sent:
    """Outcome of a sent bundle (what the CLI prints).

    ``received_at``: when this site received the receipt (ISO 8601, UTC). ``kept_receipt``:
    the receipt file the answer was read from when the upload had committed before this run
    (nothing was sent), else None. ``analyst_unreachable``: why the analyst could not be asked
    whether it still holds that upload, else None.
    """

    participant: str
    kind: str
    receipt: str
    already_committed: bool
    records: int
    bytes: int
    received_at: str = ""
    kept_receipt: str | None = None
    analyst_unreachable: str | None = None


def kept_schema(cfg: ParticipantConfig) -> RecordSchema | None:
    """The schema kept by :func:`keep_schema` (None: this site has not joined yet, or its
    federation declares none)."""
    path = schema_path(cfg)
    if not path.is_file():
        return None
    msg = pb.RecordSchema()
    try:
        msg.ParseFromString(cfg.read_state(path))
    except DecodeError as err:
        raise InvalidInputError(f"{path} is not a kept schema ({err}); remove it and run "
                                "upload again to fetch the federation's") from None
    schema = schema_of(msg)
    # Checked as the analyst's copy is (served_schema): an edit of the kept file that keeps
    # it consistent with itself still differs from the digest the kit pins.
    digest = schema.preprocessing_sha256.hex()
    if cfg.preprocessing_sha256 is not None and digest != cfg.preprocessing_sha256:
        raise IntegrityError(f"{path} has preprocessing digest {digest[:16]}..., not the "
                             f"kit's [protocol] preprocessing_sha256 = "
                             f"{cfg.preprocessing_sha256[:16]}...: it was changed after it was "
                             "kept; it is not used")
    return schema


def local_data(cfg: ParticipantConfig, schema: RecordSchema | None = None, *,
               require_labels: bool = True) -> LocalData:
    """This participant's records after the federation's public preprocessing, with labels
    and (optional) tags: the one loader every use of the records goes through (upload,
    disclosure, release query, prediction).

    ``schema`` None: the schema kept when this site joined (:func:`kept_schema`).
    ``require_labels=False`` reads a table without labels too (prediction input).
    """
    return read_records(cfg, schema if schema is not None else kept_schema(cfg),
                        require_labels=require_labels)


def withdrawal_reason(cfg: ParticipantConfig, err: Exception) -> str:
    """What the other sites are told when this site's data or config is refused: the line
    and column of a bad cell but never its value (a private record's), no local path, one
    line of printable text."""
    text = err.public() if isinstance(err, TableError) else str(err)
    local = [cfg.data, cfg.state_dir, cfg.tls.ca, cfg.tls.cert, cfg.tls.key]
    # Longest first: a file's own path before the folder it is in.
    for path in sorted({p for q in local for p in (q, *q.parents) if len(p.parts) > 1},
                       key=lambda p: len(str(p)), reverse=True):
        text = text.replace(str(path), path.name)
    return "".join(ch if ch.isprintable() else " " for ch in " ".join(text.split()))


#: Seconds ``participant status`` retries an unavailable analyst (a question, not a wait).
STATUS_WAIT = 10.0

#: Seconds ``participant status``, and a rerun of an upload that committed, try to connect to
#: the analyst (then as long again to find out why not) before answering from the state folder.
CONNECT_WAIT = 3.0


def analyst_client(cfg: ParticipantConfig, wait: float | None = None) -> AnalystClient:
    """A mutual-TLS client to this participant's analyst (use as a context manager) that
    retries and waits up to ``wait`` seconds (default: the config's)."""
    return AnalystClient(cfg.analyst, cfg.tls, cfg.server_name, cfg.federation_id,
                         cfg.wait_seconds if wait is None else wait)


def _preprocessing(schema: RecordSchema | None) -> str:
    """What the log says of the preprocessing: the typed schema and its digest."""
    if schema is None or schema.tabular is None:
        return "no typed columns"
    return f"{schema.describe()}, preprocessing {schema.preprocessing_sha256.hex()[:16]}"


def _withdraw(client: AnalystClient, cfg: ParticipantConfig, err: InvalidInputError) -> None:
    """Tell the analyst (and through it the other sites) that this site withdraws because of
    ``err`` (:func:`withdrawal_reason`); a failure to tell is logged, ``err`` matters more."""
    reason = withdrawal_reason(cfg, err)
    try:
        client.withdraw(reason)
    except NoisyAnchorError as failed:
        log.warning("could not tell the analyst that %s withdraws: %s", cfg.id, failed)
    else:
        keep_withdrawal(cfg, reason)


def read_before_connecting(cfg: ParticipantConfig) -> LocalData | None:
    """This site's records read with the kit's copy of the typed schema (``[schema]`` in its
    config), before anything connects: a bad cell is named at once, not once the analyst
    answers. Refused, the error is logged at once and the site still withdraws, waiting for
    the analyst as long as joining would, so the others stop waiting. None: the kit holds no
    schema."""
    if cfg.schema is None:
        return None
    try:
        return read_records(cfg, RecordSchema.typed(cfg.schema))
    except InvalidInputError as err:
        log.error("%s; telling the analyst that %s withdraws, so the other sites stop waiting",
                  err, cfg.id)
        with analyst_client(cfg) as client:
            _withdraw(client, cfg, err)
        raise


def _join(client: AnalystClient, cfg: ParticipantConfig, early: LocalData | None = None
          ) -> Joined:
    """Read the federation's declaration, load and preprocess this site's records with its
    schema (or take ``early``, read before connecting with the kit's copy of the same schema)
    and check both against it, and wait until the federation's deadline.

    Anything refused (unreadable data, a bad cell, a schema or config that does not fit) is
    reported to the analyst as this site's withdrawal, so the other sites stop waiting and
    learn which site failed and why (:func:`withdrawal_reason`), before it is raised here.
    """
    try:
        # Converted inside: a served schema that does not decode is refused as the others are.
        info = federation_info_of(client.describe())
        joined = join(cfg, info, early)
    except InvalidInputError as err:
        _withdraw(client, cfg, err)
        raise
    keep_schema(cfg, info, PROTO_CODEC)
    # Its records read and checked, this site takes part (again): a withdrawal it left
    # standing is cleared now, before it waits for the dealer, or the others, waiting too,
    # would stop on it (issue 34).
    client.status(rejoin=True)
    schema, data = info.schema, joined.data
    if schema is not None and schema.tabular is not None and data.lines is not None:
        for far in far_values(schema.tabular, data.x, data.lines):  # this log only, not sent
            log.warning("%s: %s", cfg.data, far)
    if info.deadline_unix and (cfg.timeout is None
                               or info.deadline_unix < time.time() + cfg.timeout):
        client.follow_deadline(info.deadline_unix)
        until = human_time(datetime.datetime.fromtimestamp(info.deadline_unix, datetime.UTC))
        limit = f"until the federation's deadline {until}"
    else:
        limit = f"at most {human_duration(client.timeout)} ([participant] timeout)"
    log.info("%s joined federation %s (%d participants, %s; %d records, %s); waiting for the "
             "others %s", cfg.id, info.federation_id, len(info.participants), info.method,
             len(data.x), _preprocessing(schema), limit)
    return joined


def _keep_baseline(cfg: ParticipantConfig, joined: Joined, key: SiteKey) -> None:
    """Train and keep this site's local-only baseline (:mod:`participant.local_baseline`) from
    the records still in memory, once the upload committed: the upload's bytes and their
    sending are untouched, only a committed split is kept, and ``predict`` never reads the
    whole table again. A failure is logged, not raised: the upload stands, and the first gain
    trains the baseline then."""
    from noisyanchor.common.downstream import warnings_to_log
    from noisyanchor.participant.local_baseline import (
        NOT_RETURNED,
        keep_local_baseline,
        train_local_baseline,
    )

    info, data = joined.info, joined.data
    name = info.model if info.model is not None else "logistic"
    if name in NOT_RETURNED or data.labels is None:
        return  # no model reaches this site: its gain is the analyst's
    start = time.perf_counter()
    try:
        with warnings_to_log(log):
            path = keep_local_baseline(cfg, train_local_baseline(key, data.x, data.labels,
                                                                 name))
    except (NoisyAnchorError, OSError) as err:
        log.warning("%s: the local-only model was not kept (%s); the first gain trains it",
                    cfg.id, err)
        return
    log.info("%s: local-only %s model trained in %.1f s and kept in %s (the gain's baseline)",
             cfg.id, name, time.perf_counter() - start, path)


def run_upload(cfg: ParticipantConfig) -> Sent:
    """Join (load and preprocess the data with the federation's schema), agree on the anchor,
    compute the upload with the engine, stream it once; keep the key
    (:mod:`participant.site_state`) once the analyst committed it."""
    private_dir(cfg.state_dir)  # 0700: schema, exchange key, seeds and the kept key go there
    kept = load_receipt(cfg)
    if kept is not None and (answer := already_committed(cfg, kept)) is not None:
        return answer
    seeds = site_seeds(cfg)
    # Kept until the federation is done (the site model fetched, participant.predict): an
    # upload the analyst's screening refuses is discarded, and this site's next run resumes
    # the same agreement with it. A run refused because its upload still stands drops it.
    key_file = exchange_key_path(cfg.state_dir, cfg.federation_id)
    early = read_before_connecting(cfg)
    with analyst_client(cfg) as client:
        plan = plan_upload(cfg, _join(client, cfg, early), seeds)
        seed = None
        if cfg.needs_shared_seed:
            seed = agree_on_seed(
                client, participant_id=cfg.id, dealer=cfg.dealer,
                tls_key_pem=cfg.tls.key.read_bytes(), ca_pem=cfg.tls.ca.read_bytes(),
                params=plan.params, key_path=key_file, dealer_seed=cfg.anchor_seed)
        made = compute_site_upload(plan, seed)
        try:
            receipt = client.send_bundle("upload", made.spec, made.arrays)
        except AlreadyExistsError:
            # A different upload is committed: these seeds did not make it, so no key is kept.
            upload_seed_path(cfg).unlink(missing_ok=True)
            key_file.unlink(missing_ok=True)
            raise
    keep_site_key(cfg, made.key)
    upload_seed_path(cfg).unlink(missing_ok=True)
    received = UploadReceipt(cfg.federation_id, cfg.id, receipt.receipt.hex(), now_iso(),
                             receipt.already_committed, made.records, made.spec.nbytes,
                             cfg.analyst)
    keep_receipt(cfg, received)
    _keep_baseline(cfg, plan.joined, made.key)
    if cfg.keep_secrets:
        keep_secrets(plan, made)
    return Sent(cfg.id, "upload", received.receipt, received.already_committed, made.records,
                made.spec.nbytes, received.received_at)


def already_committed(cfg: ParticipantConfig, kept: UploadReceipt) -> Sent | None:
    """The answer to a rerun of an upload whose receipt this site keeps, given at once: the
    kept receipt, once the analyst confirms it still holds that upload or cannot be reached
    within :data:`CONNECT_WAIT` s. None when the analyst answers that it does not hold it (its
    screening refused it, so this site uploads again).

    Raises
    ------
    AlreadyExistsError
        The records at ``[participant] data`` are not the ones uploaded: one upload per site,
        so they are not sent (as the analyst would refuse them), and the receipt is named.
    """
    unreachable = None
    try:
        with analyst_client(cfg, min(cfg.wait_seconds, STATUS_WAIT)) as client:
            client.connect(CONNECT_WAIT)
            if cfg.id not in client.status().committed:
                log.info("%s: the analyst does not hold the upload of receipt %s... any more "
                         "(see participant status): uploading again", cfg.id, kept.receipt[:16])
                return None
    except AnalystUnavailableError as err:
        unreachable = str(err)
    same = _same_records(cfg)
    if same is False:
        raise AlreadyExistsError(
            f"{cfg.id!r} already uploaded at {kept.received_at}, receipt {kept.receipt[:16]}..."
            f" (kept in {receipt_path(cfg)}); the records in {cfg.data} differ from the ones "
            "it uploaded, and each participant uploads exactly once, so nothing was sent"
            + (f"; {unreachable}" if unreachable else ""))
    return Sent(cfg.id, "upload", kept.receipt, True, kept.records, kept.bytes,
                kept.received_at, str(receipt_path(cfg)), unreachable)


def _same_records(cfg: ParticipantConfig) -> bool | None:
    """Whether the records at ``[participant] data`` are the ones this site uploaded (their
    digest is the one kept with its key); None, with a warning, when that cannot be told."""
    try:
        key = load_site_key(cfg)
        data = local_data(cfg)
    except (NoisyAnchorError, OSError) as err:
        log.warning("%s: whether the records in %s are the ones uploaded cannot be told: %s",
                    cfg.id, cfg.data, err)
        return None
    return data.labels is not None and records_digest(data.x, data.labels) == key.records_sha256


def analyst_status(cfg: ParticipantConfig):
    """The analyst's ``StatusReply`` for this participant's federation."""
    with analyst_client(cfg, min(cfg.wait_seconds, STATUS_WAIT)) as client:
        client.connect(CONNECT_WAIT)
        return client.status()


def federation_progress(cfg: ParticipantConfig) -> tuple[pb.StatusReply, Progress]:
    """The analyst's ``StatusReply`` and, from it and the relay's keys and commitments, the
    federation's :class:`~common.progress.Progress` (who is missing for which step)."""
    with analyst_client(cfg, min(cfg.wait_seconds, STATUS_WAIT)) as client:
        client.connect(CONNECT_WAIT)
        reply = client.status()
        # What this site shows (text and --json) is its own and the federation's only, even
        # from an analyst that sent more (common.visibility).
        reply.result_json = visible_json(reply.result_json, cfg.id, reply.expected)
        fid = client.federation_id
        keys = commitments = None
        if cfg.needs_shared_seed:
            keys = tuple(k.participant_id for k in client.call("list keys", lambda: (
                client.stub.ListKeys(pb.ListKeysRequest(federation_id=fid)))).keys)
            commitments = tuple(c.participant_id for c in client.call(
                "list commitments", lambda: client.stub.ListCommitments(
                    pb.ListCommitmentsRequest(federation_id=fid))).commitments)
    deadline = (datetime.datetime.fromtimestamp(reply.deadline_unix, datetime.UTC)
                if reply.deadline_unix else None)
    return reply, Progress(
        reply.federation_id, reply.state, tuple(reply.expected), tuple(reply.committed), keys,
        commitments, cfg.dealer, {w.participant_id: peer_text(w.reason, MAX_PEER_TEXT)
                                  for w in reply.withdrawn},  # relayed text, cleaned
        reply.error, json.loads(reply.result_json) if reply.result_json else None, deadline)


def run_collude(cfg: ParticipantConfig) -> Sent:
    """Disclose ``X_c``, the secret state and the anchor ``A`` to the analyst (colluder role)."""
    path = cfg.state_dir / SECRETS_FILE
    if not path.is_file():
        raise NotFoundError(f"no kept secrets at {path}: run 'participant upload' with "
                            "keep_secrets = true first")
    with cfg.open_state(path) as fh:
        secrets_ = load_npz(fh, str(path))
    schema = kept_schema(cfg)
    arrays = {"data": working_data(cfg, local_data(cfg, schema).x)} | secrets_
    spec = bundle_spec(cfg.federation_id, cfg.method, arrays, digests=False,
                       preprocessing_sha256=schema.preprocessing_sha256 if schema else b"")
    with analyst_client(cfg) as client:
        receipt = client.send_bundle("disclosure", spec, arrays)
    return Sent(cfg.id, "disclosure", receipt.receipt.hex(), receipt.already_committed,
                len(arrays["data"]), spec.nbytes)

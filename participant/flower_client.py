"""The Flower ClientApp: a site taking part in a federation through its organisation's Flower
SuperNode instead of ``participant upload``.

The SuperNode names the site's kit config in its node config
(``flower-supernode --node-config 'noisyanchor-config="/kits/org-a/org-a.toml"'``); the
ServerApp (:mod:`analyst.flower_server`) sends four kinds of ``query`` message
(:mod:`common.flower_wire`), each answered here:

``hello``
    The federation's declaration; the site checks its kit and records against it (refused:
    its withdrawal, with the gRPC path's text) and signs, with its kit's TLS key, who it is,
    bound to the server's nonce and its node id.
``agree``
    A snapshot of the relay; the site runs the anchor agreement's state machine on it
    (:mod:`participant.core.agreement` through :mod:`participant.relay_view`) and answers what
    it publishes, until the seed is agreed.
``upload``
    Its one upload, computed exactly as ``participant upload`` computes it and sent as the
    wire contract's bundle messages (the same receipt).
``result``
    The receipt and the site's own model file; the key, the receipt and the model are kept in
    the state folder as the gRPC path keeps them, so ``participant predict`` works offline.

References: issue 32, item 4.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from noisyanchor.common.flower_wire import (
    AGREE,
    HELLO,
    RESULT,
    UPLOAD,
    content,
    hello_statement,
    refusal,
    values,
)

# flower_wire first: it turns Flower's and Ray's telemetry off before Flower loads.
# isort: split
from flwr.app import ConfigRecord, Context, Message
from flwr.clientapp import ClientApp

# isort: split

from noisyanchor.common.errors import (
    ConfigError,
    InvalidInputError,
    NoisyAnchorError,
    PreconditionError,
)
from noisyanchor.common.files import atomic_write, private_dir
from noisyanchor.common.models import load_site_model
from noisyanchor.common.sealing import public_bytes, sign_statement
from noisyanchor.common.wire import (
    PROTO_HEADERS,
    BundleSender,
    bundle_header,
    bundle_spec_of,
)
from noisyanchor.common.wire_messages import (
    PROTO_CODEC,
    commitment_of,
    federation_info_of,
    key_of,
    share_message,
    share_of,
)
from noisyanchor.participant import run
from noisyanchor.participant.anchor import exchange_key_path, kept_exchange_key
from noisyanchor.participant.config import ParticipantConfig, load_participant_config
from noisyanchor.participant.core.agreement import (
    PostShares,
    PublishKey,
    SeedAgreement,
)
from noisyanchor.participant.core.join import Joined, join, keep_schema
from noisyanchor.participant.core.upload import (
    SiteSigner,
    compute_site_upload,
    own_site_model,
    plan_upload,
    shared_parameters,
    site_seeds,
)
from noisyanchor.participant.local_state import UploadReceipt, keep_receipt, now_iso
from noisyanchor.participant.predict import SITE_MODEL_FILE
from noisyanchor.participant.relay_view import Snapshot, Step, Write, step
from noisyanchor.participant.site_state import (
    SITE_KEY_FILE,
    keep_with_digest,
    load_site_key,
    upload_seed_path,
)
from noisyanchor.protos.v1 import analyst_pb2 as pb

log = logging.getLogger(__name__)

#: The node config key naming the site's kit config (``participant.toml``).
CONFIG_KEY = "noisyanchor-config"

#: The key of an upload sent but not yet acknowledged (kept once the receipt comes back, as
#: the gRPC path keeps it only once the analyst committed the upload).
PENDING_KEY_FILE = "site-key.pending"

#: The header (with every digest) of the upload sent, until the analyst's receipt is checked.
PENDING_HEADER_FILE = "upload-header.pending"


def kit_config(context: Context) -> Path:
    """The kit config the SuperNode's node config names (:data:`CONFIG_KEY`)."""
    path = context.node_config.get(CONFIG_KEY)
    if not path:
        raise ConfigError(f"this SuperNode has no node config {CONFIG_KEY!r}: start it with "
                          f"--node-config '{CONFIG_KEY}=\"/path/to/site.toml\"' (the site's kit)")
    return Path(str(path))


def joined(cfg: ParticipantConfig, info: pb.FederationInfo) -> Joined:
    """This site's records read with the federation's schema and checked against its
    declaration (``participant upload``'s checks, in its order); the schema is kept."""
    declared = federation_info_of(info)
    site = join(cfg, declared)
    keep_schema(cfg, declared, PROTO_CODEC)
    return site


def _info(fields: ConfigRecord) -> pb.FederationInfo:
    info = pb.FederationInfo()
    info.ParseFromString(fields["info"])
    return info


def hello(cfg: ParticipantConfig, fields: ConfigRecord, node_id: int) -> dict[str, Any]:
    """Who this site is (signed), and its withdrawal when its kit or records do not fit the
    federation's declaration (nothing else leaves then)."""
    info = _info(fields)
    if info.federation_id != cfg.federation_id:
        raise InvalidInputError(f"this SuperNode's kit is for federation {cfg.federation_id!r}, "
                                f"the ServerApp runs {info.federation_id!r}")
    private_dir(cfg.state_dir)
    withdrawal, width = "", 0
    try:
        width = joined(cfg, info).x.shape[1]
    except InvalidInputError as err:
        withdrawal = run.withdrawal_reason(cfg, err)
        log.error("%s; telling the analyst that %s withdraws", err, cfg.id)
    statement = hello_statement(cfg.federation_id, cfg.id, bytes(fields["nonce"]), node_id,
                                withdrawal)
    kept = exchange_key_path(cfg.state_dir, cfg.federation_id)
    return {"participant": cfg.id, "certificate": cfg.tls.cert.read_bytes(),
            "signature": sign_statement(cfg.tls.key.read_bytes(), statement),
            "withdrawal": withdrawal, "width": width,
            # the key of an agreement this site is in (none once its model came back)
            "exchange_key": public_bytes(kept_exchange_key(kept)) if kept.is_file() else b""}


def _snapshot(fields: ConfigRecord) -> Snapshot:
    """The relay's snapshot a message carries (the wire contract's listings)."""
    keys, commitments = pb.ListKeysReply(), pb.ListCommitmentsReply()
    keys.ParseFromString(fields["keys"])
    commitments.ParseFromString(fields["commitments"])
    share = None
    if fields.get("share"):
        share = share_of(pb.SealedShare.FromString(fields["share"]))
    return Snapshot(tuple(map(key_of, keys.keys)),
                    tuple(map(commitment_of, commitments.commitments)), share)


def _agreement(cfg: ParticipantConfig, fields: ConfigRecord, d: int) -> Step:
    """``participant upload``'s anchor agreement (:mod:`participant.core.agreement`) run on
    the message's snapshot of the relay, for records of width ``d``."""
    machine = SeedAgreement(
        federation_id=cfg.federation_id, participant_id=cfg.id, dealer=cfg.dealer,
        expected=list(pb.ListKeysReply.FromString(fields["keys"]).expected),
        exchange_key=kept_exchange_key(exchange_key_path(cfg.state_dir, cfg.federation_id)),
        tls_key_pem=cfg.tls.key.read_bytes(), ca_pem=cfg.tls.ca.read_bytes(),
        params=shared_parameters(cfg, d), codec=PROTO_CODEC,
        dealer_seed=cfg.anchor_seed)
    return step(machine, _snapshot(fields))


def _request(write: Write, federation_id: str):
    """A write of the agreement as the wire contract's request (what the relay stores)."""
    if isinstance(write, PublishKey):
        return pb.PublishKeyRequest(federation_id=federation_id, public_key=write.public_key,
                                    bound_to=write.bound_to, signature=write.signature)
    if isinstance(write, PostShares):
        return pb.PostSealedRequest(federation_id=federation_id,
                                    shares=[share_message(s) for s in write.shares])
    return pb.PublishCommitmentRequest(federation_id=federation_id, digest=write.digest,
                                       signature=write.signature)


def agree(cfg: ParticipantConfig, fields: ConfigRecord) -> dict[str, Any]:
    """One step of the anchor agreement: what this site publishes now, and whether it holds
    the agreed seed (``done``) or what it waits for."""
    done = _agreement(cfg, fields, int(fields["width"]))
    sent = [_request(w, cfg.federation_id) for w in done.sent]
    return {"kinds": [type(m).__name__ for m in sent] or None,
            "sent": [m.SerializeToString(deterministic=True) for m in sent] or None,
            "done": done.seed is not None, "waiting": str(done.waiting or "")}


def upload(cfg: ParticipantConfig, fields: ConfigRecord) -> dict[str, Any]:
    """This site's one upload, as ``participant upload`` computes it (the same seeds, the same
    bytes), as the bundle's wire messages; its key is kept aside until the receipt comes."""
    plan = plan_upload(cfg, joined(cfg, _info(fields)), site_seeds(cfg))
    seed = None
    if cfg.needs_shared_seed:
        seed = _agreement(cfg, fields, plan.d).seed
        if seed is None:
            raise PreconditionError(f"{cfg.id}: the upload was asked for before the anchor "
                                    "agreement ended")
    made = compute_site_upload(plan, seed)
    atomic_write(cfg.state_dir / PENDING_KEY_FILE, made.key.to_bytes())
    signer = _signer(cfg)
    sender = BundleSender(made.spec, made.arrays,
                          sign=lambda final: signer.bundle_signature("upload", final))
    messages = list(sender.messages())
    # What was sent, to check the analyst's receipt against when it comes (result).
    atomic_write(cfg.state_dir / PENDING_HEADER_FILE,
                 bundle_header(sender.spec).SerializeToString(deterministic=True))
    return {"bundle": messages, "records": made.records}


def _signer(cfg: ParticipantConfig) -> SiteSigner:
    """This site's statements signed with its kit key (the receipt of its upload)."""
    return SiteSigner(cfg.federation_id, cfg.id, cfg.tls.key.read_bytes(), PROTO_HEADERS)


def result(cfg: ParticipantConfig, fields: ConfigRecord) -> dict[str, Any]:
    """Keep the key, the receipt and this site's model file (checked to be its own), as
    ``participant upload`` and ``participant predict`` keep them."""
    raw = bytes(fields["site_model"])
    own_site_model(cfg, load_site_model(raw, what="the site model from the ServerApp"),
                   "the ServerApp's answer")
    sent = cfg.state_dir / PENDING_HEADER_FILE
    if sent.is_file():  # the receipt must be for the bytes this site sent, as this site's
        _signer(cfg).checked_receipt("upload", bundle_spec_of(pb.BundleHeader.FromString(
            cfg.read_state(sent))), bytes.fromhex(str(fields["receipt"])))
    pending = cfg.state_dir / PENDING_KEY_FILE
    if pending.is_file():
        os.replace(pending, cfg.state_dir / SITE_KEY_FILE)
    load_site_key(cfg)  # a key of this site and federation, or refused here
    keep_receipt(cfg, UploadReceipt(cfg.federation_id, cfg.id, str(fields["receipt"]),
                                    now_iso(), bool(fields["already_committed"]),
                                    int(fields["records"]), int(fields["bytes"]), cfg.analyst))
    keep_with_digest(cfg.state_dir / SITE_MODEL_FILE, raw)
    upload_seed_path(cfg).unlink(missing_ok=True)
    sent.unlink(missing_ok=True)
    exchange_key_path(cfg.state_dir, cfg.federation_id).unlink(missing_ok=True)
    log.info("%s: upload committed (receipt %s...) and site model kept in %s", cfg.id,
             str(fields["receipt"])[:16], cfg.state_dir)
    return {"kept": True}


def client_app(config_path: Callable[[Context], Path] = kit_config) -> ClientApp:
    """The ClientApp, its site's kit config found by ``config_path`` (default: the node
    config's :data:`CONFIG_KEY`; the simulation maps each virtual node to a kit)."""
    app = ClientApp()

    def answer(message: Message, context: Context,
               phase: Callable[[ParticipantConfig, ConfigRecord], dict[str, Any]]) -> Message:
        # The protocol's refusals travel as a Flower Error with their class's code
        # (common.flower_wire); anything else is Flower's to report.
        try:
            cfg = load_participant_config(config_path(context))
            return Message(content(**phase(cfg, values(message))), reply_to=message)
        except NoisyAnchorError as err:
            log.error("%s: %s", message.metadata.message_type, err)
            return refusal(err, message)

    @app.query(HELLO)
    def _hello(message: Message, context: Context) -> Message:
        return answer(message, context, lambda cfg, fields: hello(
            cfg, fields, message.metadata.dst_node_id))

    @app.query(AGREE)
    def _agree(message: Message, context: Context) -> Message:
        return answer(message, context, agree)

    @app.query(UPLOAD)
    def _upload(message: Message, context: Context) -> Message:
        return answer(message, context, upload)

    @app.query(RESULT)
    def _result(message: Message, context: Context) -> Message:
        return answer(message, context, result)

    return app


#: The ClientApp a SuperNode loads (``clientapp = "noisyanchor.participant.flower_client:app"``).
app = client_app()

"""The Flower ServerApp: the analyst runs a federation through its Flower SuperLink instead of
``analyst serve``, over the same :class:`~analyst.federation.Federation` and store.

Each phase is one Flower ``query`` message to every site's node (:mod:`common.flower_wire`;
the sites' side is :mod:`participant.flower_client`):

1. ``hello``: the declaration and a fresh nonce; each node answers which site it is, signed
   with its kit's TLS key (checked against the federation CA, so the analyst never relies on
   the SuperLink's node ids), or that it withdraws, and why (the federation stops).
2. ``agree``: rounds of relay snapshots (signed keys, each site's own sealed share only,
   commitments) until every site holds the anchor seed; what the sites publish goes through
   the Federation's relay checks exactly as over gRPC. The server relays sealed shares it
   cannot open.
3. ``upload``: each site's one upload, as the wire contract's bundle messages, committed by
   :meth:`Federation.upload` (one-shot: a second, different upload is refused); the
   alignment runs once every upload is in.
4. ``result``: each site's receipt and its own site model file (no site receives another's).

A refusal of the Federation or of a site, a node that does not answer within the reply
timeout, or an agreement that stops making progress ends the run with a
:class:`~common.errors.NoisyAnchorError` naming the site and the reason; whatever was
committed stays in the store.

References: issue 32, item 4.
"""

from __future__ import annotations

import json
import logging
import secrets
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from noisyanchor.common.flower_wire import (
    AGREE,
    HELLO,
    RESULT,
    UPLOAD,
    content,
    hello_statement,
    message_type,
    refused,
    values,
)

# flower_wire first: it turns Flower's and Ray's telemetry off before Flower loads.
# isort: split
from flwr.app import ConfigRecord, Context, Message
from flwr.serverapp import Grid, ServerApp

# isort: split

from noisyanchor.analyst.config import load_analyst_config
from noisyanchor.analyst.federation import Federation
from noisyanchor.analyst.storage import Store, read_bundle_spec
from noisyanchor.common.errors import (
    DeadlineExceededError,
    FederationFailedError,
    NoisyAnchorError,
    NotFoundError,
    PreconditionError,
    UnauthenticatedError,
)
from noisyanchor.common.sealing import verify_statement
from noisyanchor.common.wire import proto_receipt, stream_of_messages
from noisyanchor.common.wire_messages import (
    commitment_message,
    federation_info_message,
    key_message,
    share_message,
    share_of,
)
from noisyanchor.protos.v1 import analyst_pb2 as pb

log = logging.getLogger(__name__)

#: Seconds a node has to answer one message (also the message's TTL).
REPLY_TIMEOUT = 600.0

#: Seconds the ServerApp waits for every site's node to be connected.
NODES_TIMEOUT = 600.0

#: Agreement rounds at most: the dealer's key, the others' keys, the shares, the
#: commitments and the last look take five; a round without progress stops earlier.
MAX_AGREE_ROUNDS = 8


@dataclass(frozen=True)
class Site:
    """A site's node as its signed hello proved it: its node id and its certificate."""

    participant: str
    node_id: int
    certificate: bytes
    width: int
    exchange_key: bytes


class FlowerFederation:
    """One run of the protocol over a Flower :class:`Grid`, the state in ``fed``'s store.

    Parameters
    ----------
    grid : flwr.serverapp.Grid
    fed : Federation
    reply_timeout, nodes_timeout : float
        Seconds per message round and for every site's node to connect.
    """

    def __init__(self, grid: Grid, fed: Federation, *, reply_timeout: float = REPLY_TIMEOUT,
                 nodes_timeout: float = NODES_TIMEOUT) -> None:
        self.grid, self.fed = grid, fed
        self.fid = fed.config.federation_id
        self.reply_timeout, self.nodes_timeout = reply_timeout, nodes_timeout
        self.sites: dict[str, Site] = {}
        #: Bytes of the messages' contents sent to the nodes and received from them.
        self.sent_bytes = self.received_bytes = 0

    # -- messages ------------------------------------------------------------------------------
    def ask(self, phase: str, contents: dict[int, dict[str, Any]]) -> dict[int, ConfigRecord]:
        """Send each node its content and return each node's reply record; raise the first
        refusal, or name the nodes that did not answer within the reply timeout."""
        replies, missing = self._exchange(phase, contents)
        self._check_answered(phase, missing)
        return replies

    def _exchange(self, phase: str, contents: dict[int, dict[str, Any]]
                  ) -> tuple[dict[int, ConfigRecord], list[int]]:
        """One round: the reply records by node (the first refusal raised), and the nodes
        that did not answer within the reply timeout."""
        messages = [Message(content(**c), node, message_type(phase), group_id=phase,
                            ttl=self.reply_timeout) for node, c in contents.items()]
        replies = {m.metadata.src_node_id: m for m in self.grid.send_and_receive(
            messages, timeout=self.reply_timeout)}
        for node, reply in replies.items():
            if reply.has_error():
                raise refused(reply.error, self._who(node))
        self.sent_bytes += sum(map(_payload, contents.values()))
        self.received_bytes += sum(_payload(values(r)) for r in replies.values())
        return ({node: values(reply) for node, reply in replies.items()},
                [n for n in contents if n not in replies])

    def _check_answered(self, phase: str, missing: list[int]) -> None:
        if missing:
            raise DeadlineExceededError(
                f"no answer from {', '.join(map(self._who, missing))} within "
                f"{self.reply_timeout:g} s ({phase}): their SuperNodes went offline or stopped; "
                "what was committed stays in the store, and a new run resumes the protocol")

    def _who(self, node: int) -> str:
        named = [s.participant for s in self.sites.values() if s.node_id == node]
        return f"{named[0]} (node {node})" if named else f"node {node}"

    def ask_sites(self, phase: str, contents: dict[str, dict[str, Any]]
                  ) -> dict[str, ConfigRecord]:
        """:meth:`ask` by participant id."""
        replies = self.ask(phase, {self.sites[p].node_id: c for p, c in contents.items()})
        return {p: replies[self.sites[p].node_id] for p in contents}

    # -- phases --------------------------------------------------------------------------------
    def nodes(self) -> list[int]:
        """The connected nodes, once there are as many as sites (bounded wait)."""
        wanted, deadline = len(self.fed.config.participants), time.monotonic() + \
            self.nodes_timeout
        while len(nodes := list(self.grid.get_node_ids())) < wanted:
            if time.monotonic() > deadline:
                raise DeadlineExceededError(
                    f"{len(nodes)} of {wanted} SuperNodes connected within "
                    f"{self.nodes_timeout:g} s; federation {self.fid!r} needs one per site")
            time.sleep(1.0)
        return nodes

    def hello(self) -> None:
        """Learn which node is which site from its signed hello; a withdrawal stops the run."""
        info = self._info()
        nonces = {node: secrets.token_bytes(32) for node in self.nodes()}
        replies = self.ask(HELLO, {n: {"info": info, "nonce": nonce}
                                   for n, nonce in nonces.items()})
        withdrawn = {}
        for node, r in replies.items():
            pid, cert, withdrawal = str(r["participant"]), bytes(r["certificate"]), \
                str(r["withdrawal"])
            verify_statement(cert, self.fed.ca_pems[0], pid, hello_statement(
                self.fid, pid, nonces[node], node, withdrawal), bytes(r["signature"]),
                f"the hello of node {node}")
            try:
                self.fed.check_member(pid)
            except NoisyAnchorError as err:
                log.warning("node %d is left out: %s", node, err)
                continue
            if pid in self.sites:
                raise UnauthenticatedError(f"nodes {self.sites[pid].node_id} and {node} both "
                                           f"hold {pid!r}'s kit; one site, one node")
            self.sites[pid] = Site(pid, node, cert, int(r["width"]), bytes(r["exchange_key"]))
            if withdrawal:
                self.fed.withdraw(pid, withdrawal)
                withdrawn[pid] = withdrawal
        if withdrawn:
            raise FederationFailedError(
                f"participant(s) {', '.join(withdrawn)} withdrew from federation {self.fid!r} "
                f"({'; '.join(f'{p}: {w}' for p, w in withdrawn.items())}); nothing was "
                "uploaded")
        missing = [p for p in self.fed.config.participants if p not in self.sites]
        if missing:
            raise PreconditionError(f"no node holds the kit of {', '.join(missing)}: every site "
                                    f"of federation {self.fid!r} needs its SuperNode")
        self._check_kept_keys()
        log.info("flower: every site's node is known (%s)", ", ".join(
            f"{s.participant}: {s.node_id}" for s in self.sites.values()))

    def _info(self) -> bytes:
        """The federation's declaration as the wire contract encodes it."""
        return federation_info_message(self.fed.describe()).SerializeToString(deterministic=True)

    def _check_kept_keys(self) -> None:
        """Refuse, before any agreement step, a site whose exchange key is not the one the
        relay holds: once its upload is committed it is a second upload (the Federation's own
        refusal), else its agreement cannot resume (the relay keeps the first key)."""
        stored = {k.participant_id: bytes(k.public_key) for k in self.fed.list_keys()}
        for pid, site in self.sites.items():
            if pid in stored and stored[pid] != site.exchange_key:
                self.fed.check_not_uploaded(pid)
                raise PreconditionError(
                    f"{pid} no longer holds the exchange key it published in federation "
                    f"{self.fid!r} (its state folder lost it?); the relay keeps the first, so "
                    "this agreement cannot resume: start a new federation under a new id")

    def _snapshot(self, pid: str) -> dict[str, Any]:
        """The relay as ``pid`` may see it: every signed key, the commitments, and only the
        sealed share addressed to it."""
        expected = self.fed.config.participants
        try:
            share = share_message(self.fed.get_sealed(pid)).SerializeToString(deterministic=True)
        except NotFoundError:
            share = None
        keys = [key_message(k) for k in self.fed.list_keys()]
        commitments = [commitment_message(c) for c in self.fed.list_commitments()]
        return {"keys": pb.ListKeysReply(expected=expected, keys=keys)
                .SerializeToString(deterministic=True),
                "commitments": pb.ListCommitmentsReply(expected=expected, commitments=commitments)
                .SerializeToString(deterministic=True),
                "share": share, "width": self.sites[pid].width}

    def _relayed(self) -> int:
        """How many objects the relay holds (progress of the agreement)."""
        store = self.fed.store
        return sum(len(list(folder.iterdir())) for folder in (store.keys, store.sealed,
                                                               store.commitments))

    def _publish(self, pid: str, kind: str, raw: bytes) -> None:
        """Apply one write of ``pid``'s agreement through the Federation's relay checks."""
        cert = self.sites[pid].certificate
        if kind == "PublishKeyRequest":
            m = pb.PublishKeyRequest.FromString(raw)
            self.fed.publish_key(pid, m.public_key, m.signature, m.bound_to, cert)
        elif kind == "PostSealedRequest":
            # The dealer is named by its hello, not in the message (the wire contract).
            self.fed.post_sealed(pid, [share_of(m) for m in
                                       pb.PostSealedRequest.FromString(raw).shares], cert)
        elif kind == "PublishCommitmentRequest":
            m = pb.PublishCommitmentRequest.FromString(raw)
            self.fed.publish_commitment(pid, m.digest, m.signature, cert)
        else:
            raise UnauthenticatedError(f"{pid} sent a relay write of unknown kind {kind!r}")

    def agree(self) -> None:
        """Relay the anchor agreement, round by round, until every site holds the seed."""
        pending = list(self.fed.config.participants)
        for _ in range(MAX_AGREE_ROUNDS):
            before = self._relayed()
            replies = self.ask_sites(AGREE, {p: self._snapshot(p) for p in pending})
            for pid, r in replies.items():
                for kind, raw in zip(r.get("kinds") or [], r.get("sent") or [], strict=True):
                    try:
                        self._publish(pid, kind, raw)
                    except NoisyAnchorError as err:
                        raise type(err)(f"{pid}: {err}") from None
            waiting = {p: str(r["waiting"]) for p, r in replies.items() if not r["done"]}
            pending = list(waiting)
            if not pending:
                log.info("flower: the anchor is agreed among %d sites", len(self.sites))
                return
            if self._relayed() == before:
                break
        raise PreconditionError("the anchor agreement stopped making progress: "
                                + "; ".join(f"{p} waits for {w}" for p, w in waiting.items()))

    def upload(self) -> dict[str, dict[str, Any]]:
        """Every site's one upload, committed (those that came, when a node did not answer; a
        site committed in an earlier run is not asked again); then the alignment, waited
        for."""
        info = self._info()
        committed = set(self.fed.store.committed(self.fed.store.uploads))
        receipts = {pid: self._kept_receipt(pid) for pid in committed}
        pids = {self.sites[p].node_id: p for p in self.fed.config.participants
                if p not in committed}
        replies, missing = self._exchange(UPLOAD, {
            node: {"info": info} | self._snapshot(pid) for node, pid in pids.items()})
        for node, r in replies.items():
            pid, stream = pids[node], stream_of_messages(r["bundle"])
            try:
                done = self.fed.upload(pid, stream, self.sites[pid].certificate)
            except NoisyAnchorError as err:
                raise type(err)(f"{pid}: {err}") from None
            receipts[pid] = {"receipt": done.receipt.hex(),
                             "already_committed": done.already_committed,
                             "records": int(r["records"]), "bytes": stream.spec.nbytes}
        self._check_answered(UPLOAD, missing)
        self.fed.wait()
        status = self.fed.status("")
        if status["state"] != "done":
            reasons = "; ".join(f"{w.participant_id}: {w.reason}" for w in status["withdrawn"])
            raise FederationFailedError(f"federation {self.fid!r} is {status['state']} after "
                                        f"every upload: {status['error'] or reasons}")
        return receipts

    def _kept_receipt(self, pid: str) -> dict[str, Any]:
        """The receipt of ``pid``'s upload committed in an earlier run."""
        spec = read_bundle_spec(self.fed.store.upload_path(pid), root=self.fed.store.root)[0]
        return {"receipt": proto_receipt(spec, pid).hex(), "already_committed": True,
                "records": int(spec.array("data").shape[0]), "bytes": spec.nbytes}

    def deliver(self, receipts: dict[str, dict[str, Any]]) -> None:
        """Each site's receipt and its own site model."""
        self.ask_sites(RESULT, {p: r | {"site_model": self.fed.site_model(p)}
                                for p, r in receipts.items()})

    def run(self) -> dict[str, Any]:
        """The whole protocol; ``result.json``'s summary."""
        self.hello()
        if self.fed.method.uses_anchor or self.fed.method.shared_key:
            self.agree()
        receipts = self.upload()
        self.deliver({p: receipts[p] for p in self.fed.config.participants})
        summary = json.loads(self.fed.store.read_result("result.json"))
        log.info("flower: federation %s done; every site holds its model", self.fid)
        return summary


def _payload(record: Any) -> int:
    """Bytes of a message's content (its byte strings and text; numbers not counted)."""
    return sum(len(v) if isinstance(v, bytes | str) else
               sum(len(x) for x in v) if isinstance(v, list) and v and
               isinstance(v[0], bytes | str) else 0 for v in record.values())


def server_app(analyst_config: Path | None = None, *, reply_timeout: float = REPLY_TIMEOUT,
               nodes_timeout: float = NODES_TIMEOUT,
               outcome: dict[str, Any] | None = None) -> ServerApp:
    """The ServerApp over the analyst config ``analyst_config`` (default: the run config's
    ``analyst-config``); ``outcome`` (in-process callers) receives ``result``, ``sent_bytes``
    and ``received_bytes``, or ``error``."""
    app = ServerApp()

    @app.main()
    def main(grid: Grid, context: Context) -> None:
        path = analyst_config or Path(str(context.run_config["analyst-config"]))
        timeout = float(context.run_config.get("reply-timeout", reply_timeout))
        cfg = load_analyst_config(path)
        fed = Federation(cfg, Store(cfg.output_dir))
        run = FlowerFederation(grid, fed, reply_timeout=timeout, nodes_timeout=nodes_timeout)
        try:
            summary = run.run()
        except NoisyAnchorError as err:
            log.error("flower: federation %s stopped: %s", cfg.federation_id, err)
            if outcome is None:
                raise
            outcome["error"] = err
            return
        finally:
            fed.close()
        log.info("flower: %d bytes sent to the nodes, %d received", run.sent_bytes,
                 run.received_bytes)
        if outcome is not None:
            outcome.update(result=summary, sent_bytes=run.sent_bytes,
                           received_bytes=run.received_bytes)

    return app


#: The ServerApp a SuperLink runs (``serverapp = "noisyanchor.analyst.flower_server:app"``).
app = server_app()

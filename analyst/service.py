"""The Analyst service (uploads, disclosures, status, anchor relay): a thin gRPC adapter over
the transport-free core (:mod:`analyst.core`): decode protobuf into the core's dataclasses
(:mod:`common.wire_messages`), call :class:`analyst.federation.Federation`, encode. Caller
identity and the mapping of project errors to gRPC status codes are in :mod:`analyst.edge`;
the server itself in :mod:`analyst.server`.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Callable, Iterator

import grpc

from noisyanchor.analyst.edge import caller_id, grpc_edge
from noisyanchor.analyst.federation import Committed, Federation
from noisyanchor.common.bundles import BundleStream
from noisyanchor.common.wire import stream_of_messages
from noisyanchor.common.wire_messages import (
    commitment_message,
    federation_info_message,
    key_message,
    share_message,
    share_of,
    withdrawal_message,
)
from noisyanchor.protos.v1 import analyst_pb2 as pb
from noisyanchor.protos.v1 import analyst_pb2_grpc as pb_grpc

log = logging.getLogger(__name__)

#: Bytes per message of a fetched site model: small, so a client that stops reading leaves little
#: in the analyst's transport buffers (as release_service.FETCH_CHUNK).
SITE_MODEL_CHUNK = 64 << 10

#: Methods whose request streams reach the servicer as serialized bytes (parsed by
#: :func:`common.wire.parse_request`, which takes a chunk's payload without copying it).
RAW_STREAMS = ("Upload", "Disclose")


def add_analyst_servicer(servicer: AnalystServicer, server: grpc.Server) -> None:
    """Register ``servicer`` like the generated ``add_AnalystServicer_to_server``, except that
    the bundle streams (:data:`RAW_STREAMS`) are not deserialized by the protobuf runtime, which
    copies every 1 MiB chunk twice (issue 14: uploads at wire speed). Built from the service
    descriptor, so every other method keeps its generated (de)serializers."""
    service = pb.DESCRIPTOR.services_by_name["Analyst"]
    handlers = {}
    for method in service.methods:
        request = getattr(pb, method.input_type.name)
        reply = getattr(pb, method.output_type.name)
        kind = ("stream" if method.client_streaming else "unary") + "_" + (
            "stream" if method.server_streaming else "unary")
        handlers[method.name] = getattr(grpc, f"{kind}_rpc_method_handler")(
            getattr(servicer, method.name),
            request_deserializer=None if method.name in RAW_STREAMS else request.FromString,
            response_serializer=reply.SerializeToString)
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(service.full_name,
                                                                          handlers),))
    server.add_registered_method_handlers(service.full_name, handlers)


class AnalystServicer(pb_grpc.AnalystServicer):
    """Thin adapter from the wire contract to :class:`Federation`."""

    def __init__(self, federation: Federation) -> None:
        self.fed = federation

    def _caller(self, context, federation_id: str) -> tuple[str, bytes]:
        # Each connection's participant and address are logged once, by the connection front
        # (analyst.connection_front), which sees the client's address.
        pid, pem = caller_id(context, self.fed.ca_pems)
        self.fed.check_caller(pid, federation_id)
        return pid, pem

    def _receipt(self, pid: str, committed: Committed) -> pb.Receipt:
        return pb.Receipt(participant_id=pid, receipt=committed.receipt,
                          already_committed=committed.already_committed)

    def _bundle(self, request_iterator, context, kind: str,
                commit: Callable[[str, BundleStream, bytes], Committed]) -> pb.Receipt:
        """Receive one bundle stream and commit it with ``commit``. The caller gate
        (:mod:`analyst.caller_limits`) admitted the caller before a message was read and paces
        ``request_iterator`` (idle window, minimum rate, deadline)."""
        pid, pem = caller_id(context, self.fed.ca_pems)
        stream = stream_of_messages(request_iterator)
        log.info("%s stream of %s started (%d bytes declared)", kind, pid, stream.spec.nbytes)
        return self._receipt(pid, commit(pid, stream, pem))

    @grpc_edge
    def Upload(self, request_iterator, context):
        return self._bundle(request_iterator, context, "upload", self.fed.upload)

    @grpc_edge
    def Disclose(self, request_iterator, context):
        return self._bundle(request_iterator, context, "disclosure", self.fed.disclose)

    @grpc_edge
    def Status(self, request, context):
        pid, _ = self._caller(context, request.federation_id)
        if request.rejoin:
            self.fed.rejoin(pid)
        status = self.fed.status(pid)
        status["withdrawn"] = [withdrawal_message(w) for w in status["withdrawn"]]
        return pb.StatusReply(**status)

    @grpc_edge
    def PublishKey(self, request, context):
        pid, pem = self._caller(context, request.federation_id)
        self.fed.publish_key(pid, request.public_key, request.signature, request.bound_to, pem)
        return pb.PublishKeyReply()

    @grpc_edge
    def ListKeys(self, request, context):
        self._caller(context, request.federation_id)
        return pb.ListKeysReply(expected=self.fed.config.participants,
                                keys=[key_message(k) for k in self.fed.list_keys()])

    @grpc_edge
    def PostSealed(self, request, context):
        pid, pem = self._caller(context, request.federation_id)
        self.fed.post_sealed(pid, [share_of(s) for s in request.shares], pem)
        return pb.PostSealedReply()

    @grpc_edge
    def GetSealed(self, request, context):
        pid, _ = self._caller(context, request.federation_id)
        return share_message(self.fed.get_sealed(pid))

    @grpc_edge
    def PublishCommitment(self, request, context):
        pid, pem = self._caller(context, request.federation_id)
        self.fed.publish_commitment(pid, request.digest, request.signature, pem)
        return pb.PublishCommitmentReply()

    @grpc_edge
    def ListCommitments(self, request, context):
        self._caller(context, request.federation_id)
        return pb.ListCommitmentsReply(
            expected=self.fed.config.participants,
            commitments=[commitment_message(c) for c in self.fed.list_commitments()])

    @grpc_edge
    def Describe(self, request, context):
        self._caller(context, request.federation_id)
        return federation_info_message(self.fed.describe())

    @grpc_edge
    def FetchSiteModel(self, request, context):
        """The caller's site model: checked and read before the first message (refusals come
        as a status, not mid-stream); the caller gate watches the stream's pace."""
        pid, pem = self._caller(context, request.federation_id)
        raw = self.fed.site_model(pid, request.participant_id, request.signature, pem)
        return self._site_model_parts(pid, raw)

    @staticmethod
    def _site_model_parts(pid: str, raw: bytes) -> Iterator[pb.SiteModelPart]:
        from noisyanchor.common.models.site_model import SITE_MODEL_FORMAT

        yield pb.SiteModelPart(header=pb.SiteModelHeader(
            participant_id=pid, format=SITE_MODEL_FORMAT, nbytes=len(raw),
            sha256=hashlib.sha256(raw).digest()))
        view = memoryview(raw)
        for start in range(0, len(raw), SITE_MODEL_CHUNK):
            yield pb.SiteModelPart(chunk=bytes(view[start:start + SITE_MODEL_CHUNK]))
        log.info("sent %s its site model (%d bytes)", pid, len(raw))

    @grpc_edge
    def Withdraw(self, request, context):
        pid, _ = self._caller(context, request.federation_id)
        self.fed.withdraw(pid, request.reason)
        return pb.WithdrawReply()

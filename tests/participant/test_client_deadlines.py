"""Every client RPC carries a deadline; an analyst that does not answer in time becomes
DeadlineExceededError instead of a hang."""

from __future__ import annotations

import threading
from concurrent import futures

import grpc
import pytest

from noisyanchor.common.errors import DeadlineExceededError
from noisyanchor.common.tomlconfig import TlsFiles
from noisyanchor.deploy.certs import write_pki
from noisyanchor.participant.client import AnalystClient
from noisyanchor.protos.v1 import analyst_pb2 as pb
from noisyanchor.protos.v1 import analyst_pb2_grpc as pb_grpc


class _Stalling(pb_grpc.AnalystServicer):
    """A stand-in analyst that never answers Status or ListKeys (a stalled peer)."""

    def __init__(self) -> None:
        self.release = threading.Event()

    def Status(self, request, context):
        self.release.wait(30)
        return pb.StatusReply()

    ListKeys = Status


@pytest.fixture
def stalled(tmp_path):
    pki = write_pki(tmp_path, ["p0"])
    servicer = _Stalling()
    server = grpc.server(futures.ThreadPoolExecutor(4))
    pb_grpc.add_AnalystServicer_to_server(servicer, server)
    port = server.add_secure_port("127.0.0.1:0", grpc.ssl_server_credentials(
        [(pki.server_key.read_bytes(), pki.server_cert.read_bytes())],
        root_certificates=pki.ca.read_bytes(), require_client_auth=True))
    server.start()
    yield f"127.0.0.1:{port}", TlsFiles(pki.ca, *pki.clients["p0"])
    servicer.release.set()
    server.stop(0)


def test_unary_calls_get_the_default_deadline(stalled):
    address, tls = stalled
    with AnalystClient(address, tls, "localhost", "f", timeout=5.0, rpc_deadline=0.3) as c, \
            pytest.raises(DeadlineExceededError, match="status refused by the analyst: "
                                                       "DEADLINE_EXCEEDED"):
        c.status()


def test_calls_made_on_the_raw_stub_get_it_too(stalled):
    address, tls = stalled
    with AnalystClient(address, tls, "localhost", "f", timeout=5.0, rpc_deadline=0.3) as c, \
            pytest.raises(DeadlineExceededError):
        c.call("list keys", lambda: c.stub.ListKeys(pb.ListKeysRequest(federation_id="f")))


@pytest.mark.slow
def test_status_is_a_question_not_a_wait(tmp_path):
    """Without a timeout a participant waits until the federation's deadline; ``status``
    gives up after CONNECT_WAIT seconds without a connection and says why."""
    import numpy as np

    from noisyanchor.common.errors import AnalystUnavailableError
    from noisyanchor.deploy.demo import write_analyst, write_participant
    from noisyanchor.participant.config import load_participant_config
    from noisyanchor.participant.run import analyst_status

    files = write_analyst(tmp_path, ("p0", "p1"), federation_id="f", method="aa-igdp",
                          anchors=None, dim=None, sigma=None, v=None, accept_collusion=False,
                          data={"p0": tmp_path / "p0.npz"})
    np.savez(files.data["p0"], x=np.zeros((2, 2)), labels=np.zeros(2, int))
    path = write_participant(files, "p0", federation_id="f", address="127.0.0.1:1",
                             method="aa-igdp", anchors=None, dim=None, projection_seed=None,
                             sigma=0.0, v=0.0, timeout=None)
    cfg = load_participant_config(path)
    assert cfg.timeout is None
    with pytest.raises(AnalystUnavailableError, match=r"nothing listens at 127\.0\.0\.1:1"):
        analyst_status(cfg)

"""Every malformed or unauthorised upload is refused with a clear status and stores nothing;
an identical retry is idempotent and a different second upload is refused."""

from __future__ import annotations

import re

import grpc
import numpy as np
import pytest
from e2e_support import FEDERATION, random_upload, refused_upload, send, wait_until

from noisyanchor.common.errors import (
    AlreadyExistsError,
    AnalystUnavailableError,
    IntegrityError,
    InvalidInputError,
    PermissionDeniedError,
)
from noisyanchor.common.tomlconfig import TlsFiles
from noisyanchor.common.wire import bundle_header, bundle_spec, iter_chunks, proto_receipt
from noisyanchor.deploy.certs import write_pki
from noisyanchor.deploy.demo import write_participant
from noisyanchor.deploy.launch import start
from noisyanchor.protos.v1 import analyst_pb2 as pb

pytestmark = pytest.mark.e2e

N, D, R = 20, 8, 16


@pytest.fixture
def fed(analyst):
    return analyst(["p0", "p1", "p2"], "aa-igdp", dim=D, anchors=R, extra_certificates=["p9"])


def _stored(fed) -> list[str]:
    """Every file in the uploads and disclosures folders (temporary files included)."""
    store = fed.files.store
    return sorted(p.name for d in ("uploads", "disclosures") for p in (store / d).iterdir())


def _raw_stream(client, header: pb.BundleHeader, chunks, trailer: pb.BundleTrailer | None = None):
    """Send a hand-made stream; returns the gRPC error (the call must fail)."""
    def messages():
        yield pb.UploadRequest(header=header)
        for c in chunks:
            yield pb.UploadRequest(chunk=c)
        if trailer is not None:
            yield pb.UploadRequest(trailer=trailer)

    with pytest.raises(grpc.RpcError) as err:
        client.stub.Upload(messages())
    return err.value


def test_second_upload_is_idempotent_when_identical_and_refused_when_different(fed, rng):
    arrays = random_upload(rng, N, D, R)
    with fed.client("p0") as c:
        first = send(c, "aa-igdp", arrays)
        again = send(c, "aa-igdp", arrays)
        assert not first.already_committed and again.already_committed
        assert again.receipt == first.receipt
        with pytest.raises(AlreadyExistsError, match=r"ALREADY_EXISTS.*exactly once"):
            send(c, "aa-igdp", random_upload(rng, N, D, R))
    assert _stored(fed) == ["p0.bundle"]


def test_truncated_and_corrupt_streams_commit_nothing(fed, rng):
    arrays = random_upload(rng, N, D, R)
    spec = bundle_spec(FEDERATION, "aa-igdp", arrays)
    raw = b"".join(iter_chunks(arrays))
    with fed.client("p1") as c:
        err = _raw_stream(c, bundle_header(spec), [raw[: len(raw) // 2]])
        assert err.code() == grpc.StatusCode.DATA_LOSS and "truncated" in err.details()
        bad = bytearray(raw)
        bad[5] ^= 0xFF
        err = _raw_stream(c, bundle_header(spec), [bytes(bad)])
        assert err.code() == grpc.StatusCode.DATA_LOSS and "corrupt" in err.details()
        err = _raw_stream(c, bundle_header(spec), [raw, b"extra"])
        assert err.code() == grpc.StatusCode.DATA_LOSS
    assert _stored(fed) == []


def test_trailer_streams_without_or_with_wrong_digests_commit_nothing(fed, rng):
    """A header without digests announces a trailer: a stream that ends without it, or whose
    trailer does not match the bytes, is refused (DATA_LOSS) and stores nothing."""
    arrays = random_upload(rng, N, D, R)
    header = bundle_header(bundle_spec(FEDERATION, "aa-igdp", arrays, digests=False))
    raw = b"".join(iter_chunks(arrays))
    digests = [a.sha256 for a in bundle_spec(FEDERATION, "aa-igdp", arrays).arrays]
    with fed.client("p1") as c:
        err = _raw_stream(c, header, [raw])
        assert err.code() == grpc.StatusCode.DATA_LOSS and "without the trailer" in err.details()
        wrong = pb.BundleTrailer(sha256=[bytes(32), *digests[1:]])
        err = _raw_stream(c, header, [raw], trailer=wrong)
        assert err.code() == grpc.StatusCode.DATA_LOSS and "corrupt" in err.details()
    assert _stored(fed) == []


def test_digests_in_the_header_or_the_trailer_give_one_receipt(fed, rng):
    """A sender that hashes first (digests in the header, the version-1 way) and one that hashes
    while sending (trailer) commit the same content under the same receipt."""
    arrays = random_upload(rng, N, D, R)
    with fed.client("p2") as c:
        first = send(c, "aa-igdp", arrays, digests=True)
        again = send(c, "aa-igdp", arrays)  # trailer: read to its end, then answered
    assert not first.already_committed and again.already_committed
    assert first.receipt == again.receipt == proto_receipt(bundle_spec(FEDERATION, "aa-igdp",
                                                         arrays), "p2")


@pytest.mark.parametrize("change, match", [
    (lambda a: a | {"data": np.zeros((N, D + 1))}, "shape"),
    (lambda a: a | {"anchor": np.zeros((R + 1, D))}, "shape"),
    (lambda a: a | {"data": np.where(np.eye(N, D) > 0, np.nan, a["data"])}, "NaN"),
    (lambda a: a | {"labels": a["labels"].astype("<f8")}, "dtype"),
    (lambda a: {k: v for k, v in a.items() if k != "anchor"}, "carries arrays"),
    (lambda a: a | {"tags": np.full(N, 7, dtype="|i1")}, "tags"),
])
def test_malformed_uploads_are_invalid_argument_and_store_nothing(fed, rng, change, match):
    with fed.client("p1") as c, pytest.raises(InvalidInputError, match="INVALID_ARGUMENT") as e:
        send(c, "aa-igdp", change(random_upload(rng, N, D, R)))
    assert match in str(e.value)
    assert _stored(fed) == []


def test_wrong_method_or_federation_id_is_refused(fed, rng):
    arrays = random_upload(rng, N, D, R)
    with fed.client("p1") as c:
        with pytest.raises(InvalidInputError, match="uses method aa-igdp"):
            send(c, "aa-igdp-an", arrays)
        with pytest.raises(PermissionDeniedError, match="serves federation 'e2e', not 'other'"):
            send(c, "aa-igdp", arrays, federation_id="other")
    with fed.client("p1", federation_id="other") as c, pytest.raises(PermissionDeniedError):
        c.status()
    assert _stored(fed) == []


def test_unknown_participant_with_a_valid_certificate_is_permission_denied(fed, rng):
    with fed.client("p9") as c, pytest.raises(PermissionDeniedError, match="'p9' is not a "
                                                                            "participant"):
        send(c, "aa-igdp", random_upload(rng, N, D, R))
    assert _stored(fed) == []


def test_clients_without_a_certificate_from_the_federation_ca_cannot_connect(fed, rng,
                                                                              tmp_path):
    outsider = write_pki(tmp_path / "outsider", ["p0"])
    foreign = TlsFiles(fed.files.pki.ca, *outsider.clients["p0"])
    with fed.client("p0", tls=foreign, timeout=1.0) as c, \
            pytest.raises(AnalystUnavailableError, match="UNAVAILABLE"):
        send(c, "aa-igdp", random_upload(rng, N, D, R))
    channel = grpc.secure_channel(f"127.0.0.1:{fed.port}", grpc.ssl_channel_credentials(
        root_certificates=fed.files.pki.ca.read_bytes()))  # no client certificate at all
    with channel, pytest.raises(grpc.RpcError) as err:
        from noisyanchor.protos.v1 import analyst_pb2_grpc

        analyst_pb2_grpc.AnalystStub(channel).Status(pb.StatusRequest(federation_id=FEDERATION),
                                                     timeout=5)
    assert err.value.code() == grpc.StatusCode.UNAVAILABLE
    assert _stored(fed) == []


def test_disclosure_is_refused_unless_the_federation_accepts_collusion(fed, rng):
    arrays = {"data": rng.standard_normal((N, D)), "rotation": np.eye(D),
              "translation": np.zeros(D), "anchor": rng.standard_normal((R, D))}
    with fed.client("p0") as c, pytest.raises(PermissionDeniedError, match="accept_collusion"):
        c.send_bundle("disclosure", bundle_spec(FEDERATION, "aa-igdp", arrays), arrays)
    assert _stored(fed) == []


def test_refusals_leave_the_analyst_serving_and_status_reports_progress(fed, rng):
    with fed.client("p2") as c:
        with pytest.raises(IntegrityError):
            arrays = random_upload(rng, N, D, R)
            spec = bundle_spec(FEDERATION, "aa-igdp", arrays)
            bad = arrays | {"data": arrays["data"] + 1}  # digests in the header no longer match
            c.call("upload", lambda: c.stub.Upload(_messages(spec, bad)))
        send(c, "aa-igdp", random_upload(rng, N, D, R))
        status = c.status()
    assert status.state == "collecting"
    assert list(status.committed) == ["p2"] and list(status.expected) == ["p0", "p1", "p2"]
    # The BLAS thread choice is logged once at start (the launcher pins one thread).
    assert fed.log.read_text().count("BLAS threads: 1 per operation (OPENBLAS_NUM_THREADS)") == 1


def _messages(spec, arrays):
    yield pb.UploadRequest(header=bundle_header(spec))
    for chunk in iter_chunks(arrays):
        yield pb.UploadRequest(chunk=bytes(chunk))


def test_participant_process_exits_1_with_the_analysts_reason(fed, tmp_path):
    fed.files.data["p1"] = tmp_path / "p1.npz"
    np.savez(fed.files.data["p1"], x=np.ones((N, D)), labels=np.zeros(N, dtype=int))
    cfg = write_participant(fed.files, "p1", federation_id="not-e2e",
                            address=f"127.0.0.1:{fed.port}", method="aa-igdp", anchors=R,
                            dim=None, projection_seed=None, sigma=0.0, v=0.0, timeout=5.0)
    log = tmp_path / "p1.log"
    proc = start(["participant", "upload", "--config", cfg], log)
    assert proc.wait(60) == 1
    assert "PERMISSION_DENIED: this analyst serves federation 'e2e', not 'not-e2e'" \
        in log.read_text()
    assert _stored(fed) == []


def test_participant_status_command_reports_progress(fed, rng, tmp_path):
    with fed.client("p2") as c:
        send(c, "aa-igdp", random_upload(rng, N, D, R))
    fed.files.data["p0"] = tmp_path / "unused.npz"
    cfg = write_participant(fed.files, "p0", federation_id=FEDERATION,
                            address=f"127.0.0.1:{fed.port}", method="aa-igdp", anchors=R,
                            dim=None, projection_seed=None, sigma=0.0, v=0.0)
    log = tmp_path / "status.log"
    assert start(["participant", "status", "--config", cfg], log).wait(60) == 0
    text = log.read_text()
    assert text.startswith("federation e2e: collecting")
    assert "  uploads       1 of 3, missing p0, p1" in text


@pytest.mark.parametrize("sent_before_stalling", [0, 1, 2])
def test_a_stalled_stream_is_cancelled_and_frees_the_participants_slot(analyst, rng,
                                                                       sent_before_stalling):
    """Silent after 0 messages, after the header, or mid-data: the analyst ends the stream
    after its idle timeout with a reason, keeps nothing of it, and the participant's retry
    commits."""
    fed = analyst(["p0", "p1"], "aa-igdp", dim=D, anchors=R, stream_idle_timeout=1.0)
    arrays = random_upload(rng, N, D, R)
    spec = bundle_spec(FEDERATION, "aa-igdp", arrays)
    raw = b"".join(iter_chunks(arrays))
    messages = [pb.UploadRequest(header=bundle_header(spec)),
                pb.UploadRequest(chunk=raw[: len(raw) // 2])][:sent_before_stalling]

    def stalled(stop):
        yield from messages
        stop.wait(30.0)  # silent but connected; bounded so the sending thread always ends

    err = refused_upload(fed, "p1", stalled, timeout=25.0)
    # The analyst's refusal, with its reason (not the client's own 25 s deadline). A header
    # alone may still count in the window that ends the stream: then the rate is named.
    assert err.code() == grpc.StatusCode.DEADLINE_EXCEEDED
    assert re.fullmatch(r"Upload stream of 'p1' sent (nothing for 1 s \(\[server\] "
                        r"stream_idle_timeout\)|\d+ bytes in the last 1 s, below the minimum of "
                        r"1024 \(1024 bytes/s, \[server\] stream_min_rate\)); nothing of it was "
                        r"kept", err.details())
    assert wait_until(lambda: _stored(fed) == [])  # the handler removes its partial file
    assert err.details() in fed.log.read_text()
    with fed.client("p1") as c:
        assert not send(c, "aa-igdp", arrays).already_committed
    assert _stored(fed) == ["p1.bundle"]

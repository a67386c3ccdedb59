"""FetchSiteModel over mutual TLS against a real analyst process: refused before the federation
is done (naming whom it waits for), for another site's part and for non-participants; once done,
the caller's own part in bounded messages, the same bytes on every call."""

from __future__ import annotations

import grpc
import pytest
from e2e_support import FEDERATION, random_upload, send, wait_until

from noisyanchor.analyst.service import SITE_MODEL_CHUNK
from noisyanchor.common.errors import PermissionDeniedError, PreconditionError
from noisyanchor.common.models import load_site_model
from noisyanchor.common.signed_statements import sign, site_model_statement
from noisyanchor.protos.v1 import analyst_pb2 as pb

pytestmark = pytest.mark.e2e

IDS = ("p0", "p1", "p2")


def test_site_model_is_served_to_its_own_site_only_once_done(analyst, rng):
    fed = analyst(IDS, "aa-igdp", dim=8, anchors=16, extra_certificates=("outsider",))
    with fed.client("p0") as c:
        send(c, "aa-igdp", random_upload(rng, 40, 8, 16))
        with pytest.raises(PreconditionError, match=r"FAILED_PRECONDITION: .*waiting for the "
                                                    r"upload\(s\) of p1, p2 \(1 of 3"):
            c.fetch_site_model("p0")
    for pid in IDS[1:]:
        with fed.client(pid) as c:
            send(c, "aa-igdp", random_upload(rng, 4000, 8, 16))
    with fed.client("p1") as c:
        assert wait_until(lambda: c.status().state == "done", 60)
        raw = c.fetch_site_model("p1")
        assert c.fetch_site_model("") == raw  # empty: the caller's own; the same bytes again
        with pytest.raises(PermissionDeniedError, match="PERMISSION_DENIED: 'p1' may fetch only "
                                                        "its own site model, not 'p2'"):
            c.fetch_site_model("p2")
        # Bounded messages: a header, then chunks of at most SITE_MODEL_CHUNK bytes.
        signed = sign(c.tls.key.read_bytes(), site_model_statement(FEDERATION, "p1", ""))
        parts = list(c.stub.FetchSiteModel(pb.SiteModelRequest(
            federation_id=FEDERATION, signature=signed), timeout=30))
        # The request is the site's statement, whatever carries it: unsigned, refused.
        with pytest.raises(grpc.RpcError) as unsigned:
            list(c.stub.FetchSiteModel(pb.SiteModelRequest(federation_id=FEDERATION),
                                       timeout=30))
        assert unsigned.value.code() == grpc.StatusCode.UNAUTHENTICATED
        assert "site model request of 'p1' is not signed" in unsigned.value.details()
    part = load_site_model(raw)
    assert part.participant == "p1" and part.model is not None
    assert parts[0].WhichOneof("part") == "header" and parts[0].header.nbytes == len(raw)
    assert all(len(p.chunk) <= SITE_MODEL_CHUNK for p in parts[1:])
    assert b"".join(p.chunk for p in parts[1:]) == raw
    assert part.site_metrics["n_test"] > 0
    with fed.client("outsider") as c, pytest.raises(grpc.RpcError) as err:
        list(c.stub.FetchSiteModel(pb.SiteModelRequest(federation_id=FEDERATION), timeout=30))
    assert err.value.code() == grpc.StatusCode.PERMISSION_DENIED
    assert "'outsider' is not a participant" in err.value.details()


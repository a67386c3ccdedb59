"""Identity from the whole client certificate (issue 9, item 1): certificates signed by the
federation CA that name a participant ambiguously are refused by every service, and nothing of
theirs is stored.

The attacks: a common name ``p0\\x00evil`` (gRPC's ``x509_common_name`` stops at the NUL and used
to read ``p0``), two common names ``p0`` and ``evil`` (the first used to win), and two participant
URIs. The rule itself is in :mod:`common.identity`.
"""

from __future__ import annotations

import re

import pytest
from e2e_support import FEDERATION, forge_certificate, forge_chain, random_upload, send

from noisyanchor.common.errors import UnauthenticatedError
from noisyanchor.common.identity import participant_uri
from noisyanchor.common.sealing import (
    new_exchange_key,
    public_bytes,
    sign_exchange_key,
    verify_exchange_key,
)
from noisyanchor.protos.v1 import analyst_pb2 as pb
from noisyanchor.protos.v1 import release_pb2, release_pb2_grpc

pytestmark = pytest.mark.e2e

N, D, R = 20, 8, 16


@pytest.fixture
def fed(analyst):
    return analyst(["p0", "p1"], "aa-igdp", dim=D, anchors=R)


def _stored(fed) -> list[str]:
    """Every file the store holds for participants: bundles, relay objects, temporary files."""
    store = fed.files.store
    return sorted(str(p.relative_to(store)) for d in ("uploads", "disclosures", "relay")
                  for p in (store / d).rglob("*") if p.is_file())


@pytest.mark.parametrize("forged, refusal", [
    (dict(common_names=["p0\x00evil"]), r"subject common name 'p0\\x00evil' is not a valid"),
    (dict(common_names=["p0", "evil"]), "carries 2 subject common names"),
    (dict(common_names=["p0"], uris=[participant_uri("p0"), participant_uri("p1")]),
     "names 2 participants"),
    (dict(common_names=["p0"], uris=["URN:NoisyAnchor:participant:p1", participant_uri("p0")]),
     "names 2 participants"),
], ids=["nul-in-cn", "two-cns", "two-uris", "two-uris-other-case"])
def test_an_ambiguous_certificate_is_refused_by_every_service(fed, rng, forged, refusal):
    tls = forge_certificate(fed.files.pki, "forged", **forged)
    with fed.client("p0", tls=tls) as c:
        with pytest.raises(UnauthenticatedError, match="UNAUTHENTICATED.*" + refusal):
            send(c, "aa-igdp", random_upload(rng, N, D, R))
        with pytest.raises(UnauthenticatedError, match=refusal):
            c.status()
        pub = public_bytes(new_exchange_key())
        signature = sign_exchange_key(tls.key.read_bytes(), FEDERATION, "p0", pub, bound_to=b"")
        with pytest.raises(UnauthenticatedError, match=refusal):
            c.call("publish key", lambda: c.stub.PublishKey(pb.PublishKeyRequest(
                federation_id=FEDERATION, public_key=pub, signature=signature)))
        with pytest.raises(UnauthenticatedError, match=refusal):
            c.call("post shares", lambda: c.stub.PostSealed(pb.PostSealedRequest(
                federation_id=FEDERATION, shares=[pb.SealedShare(recipient_id="p1")])))
        # The release service: the same rule. The analyst closes a refused certificate's
        # connection (issue 30): the client's retry of an unavailable call reconnects.
        with pytest.raises(UnauthenticatedError, match=refusal):
            c.call("release", lambda: release_pb2_grpc.ReleaseStub(c.channel).ReleaseScores(
                release_pb2.ScoreQuery(federation_id=FEDERATION, epsilon=1.0, delta=1e-6),
                timeout=10))
    assert _stored(fed) == []
    assert "UNAUTHENTICATED" in fed.log.read_text()  # the analyst says why it refused


def test_the_participant_uri_names_the_caller_and_a_lone_common_name_is_the_fallback(fed, rng):
    """A URI wins over the common name; a certificate without a URI (bring-your-own PKI) is
    read by its one common name."""
    by_uri = forge_certificate(fed.files.pki, "by-uri", common_names=["someone-else"],
                               uris=[participant_uri("p1")])
    by_cn = forge_certificate(fed.files.pki, "by-cn", common_names=["p0"])
    with fed.client("p1", tls=by_uri) as c:
        assert not send(c, "aa-igdp", random_upload(rng, N, D, R)).already_committed
    with fed.client("p0", tls=by_cn) as c:
        assert list(c.status().committed) == ["p1"]
    assert _stored(fed) == ["uploads/p1.bundle"]


def test_a_certificate_issued_through_an_intermediate_ca_is_refused_everywhere(fed, rng):
    """Issue 22, chains: an intermediate CA the federation CA signed (its path length 0 forbids
    it) issues a certificate for p1; TLS builds the chain, the analyst's one rule (issued
    directly by the federation CA) refuses it in every service and in the signature check, and
    nothing is stored."""
    tls = forge_chain(fed.files.pki, "chained", "p1")
    refusal = "not issued by the federation CA .* itself .* intermediate CA"
    with fed.client("p1", tls=tls) as c:
        with pytest.raises(UnauthenticatedError, match="UNAUTHENTICATED.*" + refusal):
            send(c, "aa-igdp", random_upload(rng, N, D, R))
        with pytest.raises(UnauthenticatedError, match=refusal):
            c.status()
        with pytest.raises(UnauthenticatedError, match=refusal):  # retried as above
            c.call("budget", lambda: release_pb2_grpc.ReleaseStub(c.channel).Budget(
                release_pb2.BudgetQuery(federation_id=FEDERATION), timeout=10))
    # The signature check (what every participant runs on the keys the relay hands it) applies
    # the same rule to the certificate a statement comes with.
    pub = public_bytes(new_exchange_key())
    signature = sign_exchange_key(tls.key.read_bytes(), FEDERATION, "p1", pub, bound_to=b"k")
    with pytest.raises(UnauthenticatedError, match=refusal):
        verify_exchange_key(tls.cert.read_bytes(), fed.files.pki.ca.read_bytes(), FEDERATION,
                            "p1", pub, signature, bound_to=b"k")
    assert _stored(fed) == []
    assert re.search("refused: UNAUTHENTICATED: .*" + refusal, fed.log.read_text())
    with fed.client("p1") as c:  # the real p1 is unaffected
        assert not send(c, "aa-igdp", random_upload(rng, N, D, R)).already_committed

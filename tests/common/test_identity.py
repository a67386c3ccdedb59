"""The participant id a certificate names (common.identity), and its use in the key-signature
check (common.sealing)."""

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import dsa
from cryptography.x509.oid import ExtendedKeyUsageOID
from forged_certs import forge, forge_intermediate

from noisyanchor.common.errors import InvalidInputError, UnauthenticatedError
from noisyanchor.common.identity import (
    authenticate,
    participant_id,
    participant_san,
    participant_uri,
)
from noisyanchor.common.sealing import (
    new_exchange_key,
    public_bytes,
    sign_exchange_key,
    verify_exchange_key,
)
from noisyanchor.deploy.certs import make_ca


@pytest.fixture(scope="module")
def ca():
    return make_ca("test CA")


def _pem(cert) -> bytes:
    return cert.public_bytes(serialization.Encoding.PEM)


@pytest.mark.parametrize("names, uris, expected", [
    (["org-a"], [], "org-a"),                                        # bring-your-own PKI
    (["org-a"], [participant_uri("org-a")], "org-a"),                # what provisioning writes
    (["someone else"], [participant_uri("org-b")], "org-b"),         # the URI decides
    ([], [participant_uri("org-b"), "https://org-b.example"], "org-b"),  # other URIs ignored
    (["x\x00y"], [participant_uri("org-c")], "org-c"),               # the CN is not read
])
def test_the_id_is_the_one_participant_uri_else_the_one_common_name(ca, names, uris, expected):
    _, cert = forge(*ca, common_names=names, uris=uris)
    assert participant_id(cert) == expected
    assert authenticate(_pem(cert), (_pem(ca[1]),)) == expected


@pytest.mark.parametrize("names, uris, refusal", [
    (["org-a\x00evil"], [], "common name 'org-a\\\\x00evil' is not a valid participant id"),
    (["org-a", "evil"], [], "carries 2 subject common names"),
    ([], [], "carries 0 subject common names"),
    (["org-a\n"], [], "not a valid participant id"),
    (["../etc"], [], "not a valid participant id"),
    (["org-a"], ["urn:noisyanchor:participant:" + "a" * 65], "not a valid participant id"),
    (["org-a"], [participant_uri("org-a"), participant_uri("org-b")], "names 2 participants"),
    (["org-a"], [participant_uri("org-a"), "URN:NOISYANCHOR:PARTICIPANT:org-b"],
     "names 2 participants"),
    (["org-a"], ["urn:noisyanchor:participant:org-a\x00evil"], "alternative name"),
    (["org-a"], ["urn:noisyanchor:participant:"], "alternative name ''"),
])
def test_ambiguous_or_malformed_names_are_refused(ca, names, uris, refusal):
    _, cert = forge(*ca, common_names=names, uris=uris)
    with pytest.raises(UnauthenticatedError, match=refusal):
        participant_id(cert)
    with pytest.raises(UnauthenticatedError, match=refusal):
        authenticate(_pem(cert), (_pem(ca[1]),))


def test_unreadable_pem_is_unauthenticated(ca):
    with pytest.raises(UnauthenticatedError, match="unreadable client certificate"):
        authenticate(b"-----BEGIN CERTIFICATE-----\nnot base64\n-----END CERTIFICATE-----\n",
                     (_pem(ca[1]),))


def test_only_a_certificate_issued_directly_by_the_federation_ca_names_a_participant(ca):
    """Issue 22, chains: an intermediate the root signed (against its path length 0), a CA
    certificate presented as a client's, and another CA's certificate are refused by the one
    rule every service and signature check applies; the same names directly issued pass."""
    trust = (_pem(ca[1]),)
    mid_key, mid = forge_intermediate(*ca)
    _, through_mid = forge(mid_key, mid, common_names=["org-b"], uris=[participant_uri("org-b")])
    with pytest.raises(UnauthenticatedError, match=r"not issued by the federation CA "
                                                   r"'CN=test CA' itself.*intermediate CA"):
        authenticate(_pem(through_mid), trust)
    with pytest.raises(UnauthenticatedError, match="is a CA certificate"):
        authenticate(_pem(mid), trust)
    other_key, other = make_ca("another CA")
    _, foreign = forge(other_key, other, common_names=["org-b"])
    with pytest.raises(UnauthenticatedError, match="its issuer: 'CN=another CA'"):
        authenticate(_pem(foreign), trust)
    # The intermediate put in the trust file next to the root makes it a federation CA: the
    # operator's choice, not the peer's.
    assert authenticate(_pem(through_mid), (trust[0] + _pem(mid),)) == "org-b"
    _, direct = forge(*ca, common_names=["org-b"])
    assert authenticate(_pem(direct), trust) == "org-b"


def test_a_refusal_is_remembered_and_raised_fresh_each_time(ca):
    _, cert = forge(*ca, common_names=["a", "b"])
    errors = []
    for _ in range(2):
        with pytest.raises(UnauthenticatedError) as err:
            authenticate(_pem(cert), (_pem(ca[1]),))
        errors.append(err.value)
    assert str(errors[0]) == str(errors[1]) and errors[0] is not errors[1]


def test_issuers_build_the_uri_only_for_valid_ids():
    assert participant_san("org-a").value == "urn:noisyanchor:participant:org-a"
    for bad in ("", "a\x00b", "a/b", "a" * 65, "-a"):
        with pytest.raises(InvalidInputError, match="must be 1-64 letters"):
            participant_uri(bad)


def _statement(ca, **names):
    key, cert = forge(*ca, **names)
    tls_pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                serialization.NoEncryption())
    pub = public_bytes(new_exchange_key())
    return _pem(cert), pub, sign_exchange_key(tls_pem, "fed", "org-a", pub, bound_to=b"")


def test_the_key_signature_check_reads_the_certificate_by_the_same_rule(ca):
    ca_pem = _pem(ca[1])
    cert, pub, sig = _statement(ca, common_names=["x"], uris=[participant_uri("org-a")])
    verify_exchange_key(cert, ca_pem, "fed", "org-a", pub, sig, bound_to=b"")
    cert, pub, sig = _statement(ca, common_names=["org-a\x00evil"])
    with pytest.raises(UnauthenticatedError, match="not a valid participant id"):
        verify_exchange_key(cert, ca_pem, "fed", "org-a", pub, sig, bound_to=b"")
    cert, pub, sig = _statement(ca, common_names=["org-a", "evil"])
    with pytest.raises(UnauthenticatedError, match="2 subject common names"):
        verify_exchange_key(cert, ca_pem, "fed", "org-a", pub, sig, bound_to=b"")


def test_a_server_certificate_cannot_vouch_for_an_exchange_key(ca):
    key, cert = forge(*ca, common_names=["org-a"], usage=ExtendedKeyUsageOID.SERVER_AUTH)
    tls_pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                serialization.NoEncryption())
    pub = public_bytes(new_exchange_key())
    with pytest.raises(UnauthenticatedError, match="not a client certificate"):
        verify_exchange_key(_pem(cert), _pem(ca[1]), "fed", "org-a", pub,
                            sign_exchange_key(tls_pem, "fed", "org-a", pub, bound_to=b""),
                            bound_to=b"")


def test_an_unsupported_key_type_is_named_not_reported_as_a_bad_signature(ca):
    _, cert = forge(*ca, common_names=["org-a"], key=dsa.generate_private_key(2048))
    with pytest.raises(UnauthenticatedError, match="DSAPublicKey key; exchange keys are signed "
                                                   "with EC, RSA, Ed25519 or Ed448") as err:
        verify_exchange_key(_pem(cert), _pem(ca[1]), "fed", "org-a",
                            public_bytes(new_exchange_key()), b"\x00" * 64, bound_to=b"")
    assert "does not verify" not in str(err.value)

"""Signed X25519 keys, sealed seeds and anchor commitments."""

import secrets

import pytest

from noisyanchor.common.errors import IntegrityError, UnauthenticatedError
from noisyanchor.common.sealing import (
    anchor_commitment,
    new_exchange_key,
    open_sealed,
    public_bytes,
    seal,
    share_statement,
    sign_exchange_key,
    sign_statement,
    verify_exchange_key,
    verify_statement,
)
from noisyanchor.deploy.certs import write_pki


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    return write_pki(tmp_path_factory.mktemp("pki"), ["p0", "p1"])


@pytest.fixture(scope="module")
def other_pki(tmp_path_factory):
    return write_pki(tmp_path_factory.mktemp("other"), ["p0"])


DEALER_KEY = public_bytes(new_exchange_key())


def _signed(pki, pid, fid="fed", bound_to=DEALER_KEY):
    key = new_exchange_key()
    pub = public_bytes(key)
    cert, tls_key = pki.clients[pid]
    return key, pub, cert.read_bytes(), sign_exchange_key(tls_key.read_bytes(), fid, pid, pub,
                                                           bound_to=bound_to)


def test_signed_key_verifies_against_its_certificate_and_ca(pki):
    _, pub, cert, sig = _signed(pki, "p0")
    verify_exchange_key(cert, pki.ca.read_bytes(), "fed", "p0", pub, sig, bound_to=DEALER_KEY)


def test_a_key_statement_bound_to_another_dealer_key_does_not_verify(pki):
    """Freshness: a statement from an earlier agreement (another dealer key) is refused."""
    _, pub, cert, sig = _signed(pki, "p1")
    for other in (b"", public_bytes(new_exchange_key())):
        with pytest.raises(UnauthenticatedError, match="'p1''s exchange key does not verify"):
            verify_exchange_key(cert, pki.ca.read_bytes(), "fed", "p1", pub, sig, bound_to=other)


def test_a_share_signature_names_both_keys_nonce_and_ciphertext(pki):
    dealer, alice = new_exchange_key(), new_exchange_key()
    cert, tls_key = pki.clients["p0"]
    nonce, ct = seal(dealer, public_bytes(alice), "fed", "p0", "p1", b"seed")
    fields = ["fed", "p0", "p1", public_bytes(dealer), public_bytes(alice), nonce, ct]
    sig = sign_statement(tls_key.read_bytes(), share_statement(*fields))
    ca = pki.ca.read_bytes()
    verify_statement(cert.read_bytes(), ca, "p0", share_statement(*fields), sig, "the share")
    for k in range(1, len(fields)):  # any other recipient, key, nonce or ciphertext
        changed = list(fields)
        changed[k] = public_bytes(new_exchange_key()) if isinstance(fields[k], bytes) else "p2"
        with pytest.raises(UnauthenticatedError, match="the share does not verify"):
            verify_statement(cert.read_bytes(), ca, "p0", share_statement(*changed), sig,
                             "the share")
    with pytest.raises(UnauthenticatedError, match="as 'p1' comes with the certificate of 'p0'"):
        verify_statement(cert.read_bytes(), ca, "p1", share_statement(*fields), sig, "the share")


def test_key_claimed_by_another_id_or_federation_or_ca_is_refused(pki, other_pki):
    _, pub, cert, sig = _signed(pki, "p0")
    ca = pki.ca.read_bytes()
    with pytest.raises(UnauthenticatedError, match="certificate of 'p0'"):
        verify_exchange_key(cert, ca, "fed", "p1", pub, sig, bound_to=DEALER_KEY)
    with pytest.raises(UnauthenticatedError, match="does not verify"):
        verify_exchange_key(cert, ca, "other-fed", "p0", pub, sig, bound_to=DEALER_KEY)
    with pytest.raises(UnauthenticatedError, match="does not verify"):
        verify_exchange_key(cert, ca, "fed", "p0", public_bytes(new_exchange_key()), sig,
                            bound_to=DEALER_KEY)
    _, pub2, cert2, sig2 = _signed(other_pki, "p0")
    with pytest.raises(UnauthenticatedError, match="not issued by"):
        verify_exchange_key(cert2, ca, "fed", "p0", pub2, sig2, bound_to=DEALER_KEY)


def test_sealed_seed_opens_only_for_its_recipient_federation_and_ids():
    dealer, alice, mallory = new_exchange_key(), new_exchange_key(), new_exchange_key()
    seed = secrets.token_bytes(32)
    nonce, ct = seal(dealer, public_bytes(alice), "fed", "p0", "p1", seed)
    assert seed not in ct
    assert open_sealed(alice, public_bytes(dealer), "fed", "p0", "p1", nonce, ct) == seed
    for args in [(mallory, "fed", "p0", "p1"), (alice, "fed2", "p0", "p1"),
                 (alice, "fed", "p0", "p2"), (alice, "fed", "p3", "p1")]:
        with pytest.raises(IntegrityError):
            open_sealed(args[0], public_bytes(dealer), *args[1:], nonce, ct)
    tampered = bytes([ct[0] ^ 1]) + ct[1:]
    with pytest.raises(IntegrityError):
        open_sealed(alice, public_bytes(dealer), "fed", "p0", "p1", nonce, tampered)


def test_commitment_binds_seed_and_parameters():
    seed = secrets.token_bytes(32)
    base = dict(method="aa-igdp-an", anchors=64, dim=16, translation_scale=100.0)
    c = anchor_commitment("fed", seed, **base)
    assert c == anchor_commitment("fed", seed, **base)
    assert c != anchor_commitment("fed", secrets.token_bytes(32), **base)
    assert c != anchor_commitment("fed2", seed, **base)
    assert c != anchor_commitment("fed", seed, **(base | {"anchors": 65}))
    assert c != anchor_commitment("fed", seed, **(base | {"translation_scale": 99.0}))

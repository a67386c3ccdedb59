"""Anchor agreement through an untrusted relay: signed X25519 keys, sealed seeds, commitments.

Each participant makes an X25519 key pair for the agreement and publishes the public half,
signed with the private key of its TLS client certificate, so that every other participant can
check it against the certificate (issued by the federation's CA). Every key but the dealer's is
signed bound to the dealer's key of this agreement (fresh from OS entropy), so the relay cannot
replay a statement from an earlier run. The dealer draws the 256-bit anchor seed and seals it to
each recipient: X25519 between the dealer's and the recipient's keys, HKDF-SHA256 bound to both
ids and keys, ChaCha20-Poly1305 with the federation id and both ids as associated data (a
ciphertext replayed into another federation or to another recipient does not open), and signs
each sealed share with its TLS key over both keys, so a share opens for a recipient only if the
dealer made it for this recipient's current key. Everyone then publishes a commitment to the
seed and the parameters derived from it, so all can check that they hold the same anchor ``A``.

All of this is ``cryptography`` library calls; the relay (the analyst) only sees public keys,
signatures, ciphertexts and commitments.

References: issue 3, item 4; SPEC.md section 1 (the anchor, never sent to the analyst).
"""

from __future__ import annotations

import hashlib
import os
import struct

from cryptography import x509
from cryptography.exceptions import InvalidSignature, InvalidTag, UnsupportedAlgorithm
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed448, ed25519, padding, rsa
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey, X25519PublicKey
from cryptography.hazmat.primitives.ciphers.aead import ChaCha20Poly1305
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

from noisyanchor.common import identity
from noisyanchor.common.errors import IntegrityError, InvalidInputError, UnauthenticatedError

#: Domain labels: one per kind of signed, derived or hashed value.
KEY_DOMAIN = b"noisyanchor/v1/x25519-key"
SEAL_DOMAIN = b"noisyanchor/v1/seal"
SHARE_DOMAIN = b"noisyanchor/v1/sealed-share"
COMMIT_DOMAIN = b"noisyanchor/v1/anchor-commitment"

#: Bytes of the anchor seed (256 bits).
SEED_BYTES = 32


def encode_fields(*fields: bytes | str | int) -> bytes:
    """Unambiguous encoding of a tuple: each field length-prefixed (8 bytes, big-endian).

    Strings are UTF-8, integers 8-byte big-endian; no two different tuples encode alike.
    """
    out = bytearray()
    for f in fields:
        raw = f.encode() if isinstance(f, str) else f.to_bytes(8, "big") \
            if isinstance(f, int) else bytes(f)
        out += struct.pack(">Q", len(raw)) + raw
    return bytes(out)


def new_exchange_key() -> X25519PrivateKey:
    """A fresh X25519 key pair from OS entropy."""
    return X25519PrivateKey.generate()


def private_bytes(key: X25519PrivateKey) -> bytes:
    """The raw 32-byte private key (for the participant's own state file only)."""
    return key.private_bytes_raw()


def exchange_key_from_bytes(raw: bytes) -> X25519PrivateKey:
    """The X25519 key of :func:`private_bytes`."""
    if len(raw) != 32:
        raise InvalidInputError(f"an X25519 private key is 32 bytes, got {len(raw)}")
    return X25519PrivateKey.from_private_bytes(raw)


def public_bytes(key: X25519PrivateKey) -> bytes:
    """The raw 32-byte public key."""
    return key.public_key().public_bytes(serialization.Encoding.Raw,
                                         serialization.PublicFormat.Raw)


def load_private_key(pem: bytes):
    """A TLS private key from PEM (EC, RSA or Ed25519/Ed448; unencrypted)."""
    try:
        return serialization.load_pem_private_key(pem, password=None)
    except (ValueError, TypeError) as err:
        raise InvalidInputError(f"cannot read the TLS private key: {err}") from None


def _sign(private_key, data: bytes) -> bytes:
    if isinstance(private_key, ec.EllipticCurvePrivateKey):
        return private_key.sign(data, ec.ECDSA(hashes.SHA256()))
    if isinstance(private_key, rsa.RSAPrivateKey):
        return private_key.sign(data, padding.PKCS1v15(), hashes.SHA256())
    if isinstance(private_key, ed25519.Ed25519PrivateKey | ed448.Ed448PrivateKey):
        return private_key.sign(data)
    raise InvalidInputError(f"unsupported TLS key type {type(private_key).__name__}")


def _verify(public_key, signature: bytes, data: bytes, whose: str) -> None:
    """Verify ``signature`` over ``data``; raises InvalidSignature if it does not verify, and
    UnauthenticatedError (naming the type) for a key type no signature scheme is defined for."""
    if isinstance(public_key, ec.EllipticCurvePublicKey):
        public_key.verify(signature, data, ec.ECDSA(hashes.SHA256()))
    elif isinstance(public_key, rsa.RSAPublicKey):
        public_key.verify(signature, data, padding.PKCS1v15(), hashes.SHA256())
    elif isinstance(public_key, ed25519.Ed25519PublicKey | ed448.Ed448PublicKey):
        public_key.verify(signature, data)
    else:
        raise UnauthenticatedError(f"the certificate of {whose!r} has a "
                                   f"{type(public_key).__name__} key; exchange keys are signed "
                                   "with EC, RSA, Ed25519 or Ed448 keys only")


def key_statement(federation_id: str, participant_id: str, public_key: bytes,
                  bound_to: bytes) -> bytes:
    """The bytes a participant signs to publish its X25519 key for one agreement.

    ``bound_to`` is the dealer's X25519 public key of this agreement (empty in the dealer's own
    statement). The dealer's key comes fresh from OS entropy for every agreement, so a statement
    bound to it cannot be an old one replayed by the relay, even under a reused federation id.
    """
    return encode_fields(KEY_DOMAIN, federation_id, participant_id, public_key, bound_to)


def share_statement(federation_id: str, dealer_id: str, recipient_id: str, dealer_public: bytes,
                    recipient_public: bytes, nonce: bytes, ciphertext: bytes) -> bytes:
    """The bytes the dealer signs for one sealed share: both ids, both X25519 keys of this
    agreement, the nonce and the ciphertext."""
    return encode_fields(SHARE_DOMAIN, federation_id, dealer_id, recipient_id, dealer_public,
                         recipient_public, nonce, ciphertext)


def sign_statement(tls_key_pem: bytes, statement: bytes) -> bytes:
    """Signature of ``statement`` with a participant's TLS private key."""
    return _sign(load_private_key(tls_key_pem), statement)


def sign_exchange_key(tls_key_pem: bytes, federation_id: str, participant_id: str,
                      public_key: bytes, *, bound_to: bytes) -> bytes:
    """Signature of the key statement with the participant's TLS private key."""
    return sign_statement(tls_key_pem, key_statement(federation_id, participant_id, public_key,
                                                     bound_to))


def signer_certificate(cert_pem: bytes, ca_pem: bytes, signer_id: str) -> x509.Certificate:
    """``cert_pem`` once checked as ``signer_id``'s by the federation's one rule
    (:func:`common.identity.check_issued`: issued directly by the CA, not a CA, valid now, a
    client certificate) and naming ``signer_id`` (:func:`common.identity.participant_id`).

    Raises :class:`~common.errors.UnauthenticatedError` naming what failed.
    """
    try:
        cert = x509.load_pem_x509_certificate(cert_pem)
    except ValueError as err:
        raise UnauthenticatedError(f"unreadable certificate for {signer_id}: {err}") from None
    identity.check_issued(cert, identity.load_ca_certificates(ca_pem), repr(signer_id))
    named = identity.participant_id(cert)
    if named != signer_id:
        raise UnauthenticatedError(f"a statement signed as {signer_id!r} comes with the "
                                   f"certificate of {named!r}")
    return cert


def verify_statement(cert_pem: bytes, ca_pem: bytes, signer_id: str, statement: bytes,
                     signature: bytes, what: str) -> None:
    """Check that ``signer_id``'s certificate (:func:`signer_certificate`) signed
    ``statement``; ``what`` names the statement in the refusal."""
    cert = signer_certificate(cert_pem, ca_pem, signer_id)
    try:
        cert_key = cert.public_key()
    except (ValueError, UnsupportedAlgorithm) as err:
        raise UnauthenticatedError(f"the certificate of {signer_id!r} has a key this "
                                   f"system cannot use: {err}") from None
    try:
        _verify(cert_key, signature, statement, signer_id)
    except InvalidSignature:
        raise UnauthenticatedError(f"the signature on {what} does not verify") from None


def verify_exchange_key(
    cert_pem: bytes, ca_pem: bytes, federation_id: str, participant_id: str, public_key: bytes,
    signature: bytes, *, bound_to: bytes,
) -> None:
    """Check a published X25519 key: certificate issued by the CA, valid now, naming
    ``participant_id``, and a valid signature of the key statement (bound to ``bound_to``,
    see :func:`key_statement`) under its key.

    Raises :class:`~common.errors.UnauthenticatedError` naming what failed.
    """
    if len(public_key) != 32:
        raise UnauthenticatedError(f"{participant_id!r} published a {len(public_key)}-byte key; "
                                   "X25519 keys have 32")
    verify_statement(cert_pem, ca_pem, participant_id,
                     key_statement(federation_id, participant_id, public_key, bound_to),
                     signature, f"{participant_id!r}'s exchange key")


def _channel(own: X25519PrivateKey, peer_public: bytes, federation_id: str, dealer_id: str,
             recipient_id: str, dealer_public: bytes, recipient_public: bytes
             ) -> tuple[ChaCha20Poly1305, bytes]:
    """AEAD key from X25519 + HKDF-SHA256 bound to the federation, both ids and both keys."""
    try:
        shared = own.exchange(X25519PublicKey.from_public_bytes(peer_public))
    except ValueError as err:
        raise IntegrityError(f"unusable X25519 key: {err}") from None
    info = SEAL_DOMAIN + encode_fields(federation_id, dealer_id, recipient_id, dealer_public,
                                       recipient_public)
    key = HKDF(algorithm=hashes.SHA256(), length=32, salt=None, info=info).derive(shared)
    return ChaCha20Poly1305(key), encode_fields(SEAL_DOMAIN, federation_id, dealer_id,
                                                recipient_id)


def seal(dealer_key: X25519PrivateKey, recipient_public: bytes, federation_id: str,
         dealer_id: str, recipient_id: str, plaintext: bytes) -> tuple[bytes, bytes]:
    """Encrypt ``plaintext`` from the dealer to one recipient; returns ``(nonce, ciphertext)``."""
    aead, aad = _channel(dealer_key, recipient_public, federation_id, dealer_id, recipient_id,
                         public_bytes(dealer_key), recipient_public)
    nonce = os.urandom(12)
    return nonce, aead.encrypt(nonce, plaintext, aad)


def open_sealed(recipient_key: X25519PrivateKey, dealer_public: bytes, federation_id: str,
                dealer_id: str, recipient_id: str, nonce: bytes, ciphertext: bytes) -> bytes:
    """Decrypt a sealed share; :class:`~common.errors.IntegrityError` if anything was altered,
    replayed from another federation or meant for someone else."""
    aead, aad = _channel(recipient_key, dealer_public, federation_id, dealer_id, recipient_id,
                         dealer_public, public_bytes(recipient_key))
    try:
        return aead.decrypt(nonce, ciphertext, aad)
    except (InvalidTag, ValueError):
        raise IntegrityError(f"the sealed share from {dealer_id!r} to {recipient_id!r} does not "
                             "open (altered, replayed or not for this recipient)") from None


def anchor_commitment(federation_id: str, seed: bytes, *, method: str, anchors: int, dim: int,
                      translation_scale: float) -> bytes:
    """Commitment ``SHA-256(domain, federation, seed, method, r, d, s)`` to the shared secret.

    The seed is 256 uniformly random bits, so the digest hides it; equal digests mean equal
    anchors ``A`` (and common C-GDP keys), since both derive deterministically from the seed and
    the committed parameters.
    """
    if len(seed) != SEED_BYTES:
        raise InvalidInputError(f"the anchor seed must be {SEED_BYTES} bytes, got {len(seed)}")
    return hashlib.sha256(encode_fields(COMMIT_DOMAIN, federation_id, seed, method, anchors, dim,
                                        struct.pack(">d", translation_scale))).digest()

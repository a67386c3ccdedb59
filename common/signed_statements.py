"""The site's statements the analyst checks against the federation CA whatever carried them
(issue 32, item 3): its upload (through the receipt, which digests the sender's id and the whole
header with every array's SHA-256), its commitment to the anchor, and its request for its site
model. Each is signed with the site's kit key (the private key of its TLS client certificate)
like its exchange key and the dealer's shares (:mod:`common.sealing`), so the analyst's core
never takes a transport's word for who sent it: a certificate issued by the federation CA, naming
the site, and a valid signature, or a refusal naming the site.
"""

from __future__ import annotations

from noisyanchor.common.errors import UnauthenticatedError
from noisyanchor.common.sealing import encode_fields, sign_statement, verify_statement

#: Domain separation labels of the statements.
BUNDLE_DOMAIN = b"noisyanchor/v1/bundle"
COMMITMENT_DOMAIN = b"noisyanchor/v1/commitment-statement"
SITE_MODEL_DOMAIN = b"noisyanchor/v1/site-model-request"


def bundle_statement(federation_id: str, participant_id: str, kind: str,
                     receipt: bytes) -> bytes:
    """What a site signs for its ``kind`` bundle (``upload`` or ``disclosure``): the receipt
    (:func:`common.bundles.receipt`: its id and the header with every digest)."""
    return encode_fields(BUNDLE_DOMAIN, federation_id, participant_id, kind, receipt)


def commitment_statement(federation_id: str, participant_id: str, digest: bytes) -> bytes:
    """What a site signs for its commitment ``digest`` to the anchor."""
    return encode_fields(COMMITMENT_DOMAIN, federation_id, participant_id, digest)


def site_model_statement(federation_id: str, participant_id: str, asked: str) -> bytes:
    """What a site signs to ask for the site model of ``asked`` (its own)."""
    return encode_fields(SITE_MODEL_DOMAIN, federation_id, participant_id, asked)


def sign(tls_key_pem: bytes, statement: bytes) -> bytes:
    """The kit-key signature of ``statement``."""
    return sign_statement(tls_key_pem, statement)


def check_signed(cert_pem: bytes, ca_pem: bytes, participant_id: str, statement: bytes,
                 signature: bytes, what: str) -> None:
    """Refuse ``what`` of ``participant_id`` unless ``signature`` is its kit key's over
    ``statement``, under a certificate the CA issued naming it
    (:func:`common.sealing.verify_statement`).

    Raises
    ------
    UnauthenticatedError
        Unsigned, signed by another key, or a certificate of another site or CA; the message
        names the site.
    """
    if not signature:
        raise UnauthenticatedError(f"{what} of {participant_id!r} is not signed by its kit key "
                                   "(a noisyanchor older than its analyst?); it is refused")
    verify_statement(cert_pem, ca_pem, participant_id, statement, signature,
                     f"{what} of {participant_id!r}")

"""A site's own key and certificate signing request (``noisyanchor participant keygen``): the
private key is made on the site's host and never leaves it; the operator signs the CSR
(``noisyanchor provision --sign``) and sends back only the certificate.

The request carries the participant id as subject common name and as the SAN URI of
:func:`common.identity.participant_san`; the operator's CA copies only the id from it, so a
request cannot ask for other names or usages.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from noisyanchor.common.errors import AlreadyExistsError, InvalidInputError
from noisyanchor.common.identity import participant_san, participant_uri


@dataclass(frozen=True)
class KeyRequest:
    """Files :func:`make_key_and_csr` wrote: the private key (mode 0600) and the CSR."""

    key: Path
    csr: Path


def make_key_and_csr(participant_id: str, out_dir: Path) -> KeyRequest:
    """Write ``out_dir/pki/<id>.key`` (ECDSA P-256, mode 0600) and ``out_dir/<id>.csr``.

    The key goes where the site's startup kit expects it (its config names ``pki/<id>.key``),
    so unpacking the kit into ``out_dir`` completes the site. An existing key is never
    overwritten.
    """
    participant_uri(participant_id)  # refuses an id no certificate may carry
    out_dir = Path(out_dir)
    key_path = out_dir / "pki" / f"{participant_id}.key"
    csr_path = out_dir / f"{participant_id}.csr"
    if key_path.exists():
        raise AlreadyExistsError(f"{key_path} already exists: keep using it (its CSR is "
                                 f"{csr_path}), or move it away to make a new key")
    try:
        key_path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise InvalidInputError(f"cannot write to {out_dir}: {err.strerror or err}") from None
    key = ec.generate_private_key(ec.SECP256R1())
    csr = (x509.CertificateSigningRequestBuilder()
           .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, participant_id)]))
           .add_extension(x509.SubjectAlternativeName([participant_san(participant_id)]),
                          critical=False)
           .sign(key, hashes.SHA256()))
    fd = os.open(key_path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "wb") as fh:
        fh.write(key.private_bytes(serialization.Encoding.PEM,
                                   serialization.PrivateFormat.PKCS8,
                                   serialization.NoEncryption()))
    csr_path.write_bytes(csr.public_bytes(serialization.Encoding.PEM))
    return KeyRequest(key_path, csr_path)

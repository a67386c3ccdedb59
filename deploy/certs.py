"""A small PKI for demos and pilots: a CA, a server certificate for the analyst and one client
certificate per participant (ECDSA P-256, made with ``cryptography``).

A client certificate names its participant in a SAN URI ``urn:noisyanchor:participant:<id>``
(:func:`common.identity.participant_san`), with the id also as subject common name; the analyst
reads it from the verified TLS connection by the rule of :mod:`common.identity`. Real
deployments can bring their own PKI: any CA whose client certificates carry that URI, or else
exactly one common name equal to the participant id, works.
"""

from __future__ import annotations

import datetime
import ipaddress
import os
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from noisyanchor.common.errors import InvalidInputError
from noisyanchor.common.identity import participant_san
from noisyanchor.common.tomlconfig import ID_PATTERN, check_distinct_ids

#: Validity of demo certificates.
VALIDITY = datetime.timedelta(days=30)

#: Host names every demo server certificate covers (plus the IP 127.0.0.1).
DEFAULT_SERVER_NAME = "localhost"

#: A DNS name: dot-separated labels of letters, digits and inner hyphens (RFC 1123).
_DNS_NAME = re.compile(r"(?=.{1,253}$)([A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?\.)*"
                       r"[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?")


@dataclass(frozen=True)
class Pki:
    """Paths of the files :func:`write_pki` made.

    Attributes
    ----------
    ca : Path
        CA certificate (PEM), the trust root of every party.
    server_cert, server_key : Path
        The analyst's certificate and private key.
    clients : dict
        ``{participant id: (certificate path, key path)}``.
    ca_key : Path or None
        The CA's private key, when it was kept (tests that issue hostile certificates).
    """

    ca: Path
    server_cert: Path
    server_key: Path
    clients: dict[str, tuple[Path, Path]]
    ca_key: Path | None = None


def check_names(participants: Sequence[str], server_names: Sequence[str] = ()) -> None:
    """Refuse bad participant ids and server names before anything is made or written.

    Participant ids are 1-64 letters, digits, ``.``, ``_``, ``-`` (they name files and go in a
    certificate); ``analyst`` is the server's own file name. Server names are DNS names or IP
    addresses.
    """
    if not participants or len(set(participants)) != len(participants):
        raise InvalidInputError(f"participant ids must be unique and non-empty: "
                                f"{list(participants)}")
    for pid in participants:
        if not isinstance(pid, str) or not ID_PATTERN.fullmatch(pid):
            shown = pid if len(str(pid)) <= 40 else f"{str(pid)[:40]}... ({len(pid)} characters)"
            raise InvalidInputError(f"participant id {shown!r} must be 1-64 letters, digits, "
                                    "'.', '_' or '-', starting with a letter or digit")
    if "analyst" in participants:
        raise InvalidInputError("'analyst' is the server's certificate name, not a participant id")
    check_distinct_ids([*participants, "analyst"], "participant ids")
    for name in server_names:
        if not _is_ip(name) and not _DNS_NAME.fullmatch(name):
            raise InvalidInputError(f"server name {name!r} must be a DNS name (letters, digits, "
                                    "'-', dots; at most 253 characters) or an IP address")


def _is_ip(name: str) -> bool:
    try:
        ipaddress.ip_address(name)
    except ValueError:
        return False
    return True


def _writable_dir(out_dir: Path) -> Path:
    """``out_dir``, made if needed; a clear error when it cannot be."""
    out_dir = Path(out_dir)
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
        probe = out_dir / ".write-test"
        probe.touch()
        probe.unlink()
    except OSError as err:
        raise InvalidInputError(f"cannot write certificates to {out_dir}: "
                                f"{err.strerror or err}") from None
    return out_dir


def _name(common_name: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


def _builder(subject: str, issuer: x509.Name, public_key,
             validity: datetime.timedelta = VALIDITY) -> x509.CertificateBuilder:
    now = datetime.datetime.now(datetime.UTC)
    return (x509.CertificateBuilder().subject_name(_name(subject)).issuer_name(issuer)
            .public_key(public_key).serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + validity))


def make_ca(common_name: str = "noisyanchor demo CA",
            validity: datetime.timedelta = VALIDITY,
            key: ec.EllipticCurvePrivateKey | None = None) -> tuple[ec.EllipticCurvePrivateKey,
                                                                     x509.Certificate]:
    """A self-signed CA key and certificate; with ``key``, a new certificate for that key
    (renewal: certificates the key signed before verify against the new one as well, because
    their issuer name and signature are the same)."""
    key = key or ec.generate_private_key(ec.SECP256R1())
    cert = (_builder(common_name, _name(common_name), key.public_key(), validity)
            .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
            .add_extension(x509.KeyUsage(digital_signature=False, content_commitment=False,
                                         key_encipherment=False, data_encipherment=False,
                                         key_agreement=False, key_cert_sign=True, crl_sign=True,
                                         encipher_only=False, decipher_only=False), critical=True)
            .sign(key, hashes.SHA256()))
    return key, cert


def certify(
    ca_key: ec.EllipticCurvePrivateKey,
    ca_cert: x509.Certificate,
    common_name: str,
    public_key,
    *,
    server: bool,
    dns_names: Sequence[str] = (),
    ip_addresses: Sequence[str] = ("127.0.0.1",),
    validity: datetime.timedelta = VALIDITY,
) -> x509.Certificate:
    """A leaf certificate for ``public_key`` signed by the CA.

    A server certificate (the analyst) carries ``dns_names`` and ``ip_addresses`` as SANs, the
    names participants connect by; a client certificate names its participant with the SAN URI
    of :func:`common.identity.participant_san` (and ``common_name`` as CN), nothing else.
    """
    if not common_name or any(c in common_name for c in "/\\\x00") or common_name in {".", ".."}:
        raise InvalidInputError(f"certificate name {common_name!r} must be a non-empty id "
                                "without path separators")
    sans: list[x509.GeneralName]
    if server:
        sans = [x509.DNSName(n) for n in dict.fromkeys([common_name, *dns_names])]
        sans += [x509.IPAddress(ipaddress.ip_address(a)) for a in dict.fromkeys(ip_addresses)]
    else:
        sans = [x509.DNSName(common_name), participant_san(common_name)]
    usage = ExtendedKeyUsageOID.SERVER_AUTH if server else ExtendedKeyUsageOID.CLIENT_AUTH
    return (_builder(common_name, ca_cert.subject, public_key, validity)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.SubjectAlternativeName(sans), critical=False)
            .add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
            .sign(ca_key, hashes.SHA256()))


def issue(
    ca_key: ec.EllipticCurvePrivateKey,
    ca_cert: x509.Certificate,
    common_name: str,
    *,
    server: bool,
    dns_names: Sequence[str] = (),
) -> tuple[ec.EllipticCurvePrivateKey, x509.Certificate]:
    """A new leaf key and its certificate signed by the CA (:func:`certify`)."""
    key = ec.generate_private_key(ec.SECP256R1())
    return key, certify(ca_key, ca_cert, common_name, key.public_key(), server=server,
                        dns_names=dns_names)


def write_file(path: Path, data: bytes, *, private: bool = False) -> Path:
    # Private keys are created with mode 0600 from the start (never world-readable).
    flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC
    fd = os.open(path, flags, 0o600 if private else 0o644)
    with os.fdopen(fd, "wb") as fh:
        fh.write(data)
    return path


def key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption())


def write_pki(
    out_dir: Path,
    participants: Sequence[str],
    *,
    server_name: str = DEFAULT_SERVER_NAME,
    ca_name: str = "noisyanchor demo CA",
    keep_ca_key: bool = False,
) -> Pki:
    """Make a CA, an analyst certificate and one client certificate per participant in ``out_dir``.

    Files: ``ca.pem``, ``analyst.pem``/``analyst.key``, ``<id>.pem``/``<id>.key``. The CA key is
    not written: issuing more certificates later needs a new PKI (demos and pilots only).
    """
    check_names(participants, [server_name])
    out_dir = _writable_dir(out_dir)
    ca_key, ca_cert = make_ca(ca_name)
    pem = serialization.Encoding.PEM
    ca = write_file(out_dir / "ca.pem", ca_cert.public_bytes(pem))
    skey, scert = issue(ca_key, ca_cert, "analyst", server=True,
                        dns_names=[server_name, DEFAULT_SERVER_NAME])
    server_cert = write_file(out_dir / "analyst.pem", scert.public_bytes(pem))
    server_key = write_file(out_dir / "analyst.key", key_pem(skey), private=True)
    clients = {}
    for pid in participants:
        key, cert = issue(ca_key, ca_cert, pid, server=False)
        clients[pid] = (write_file(out_dir / f"{pid}.pem", cert.public_bytes(pem)),
                        write_file(out_dir / f"{pid}.key", key_pem(key), private=True))
    ca_key_path = write_file(out_dir / "ca.key", key_pem(ca_key), private=True) \
        if keep_ca_key else None
    return Pki(ca, server_cert, server_key, clients, ca_key_path)

"""Why a participant cannot reach its analyst, in words an operator can act on.

gRPC reports every failed TLS handshake as ``UNAVAILABLE`` with a transport message ("Socket
closed", "Ssl handshake failed"); the cause (a certificate from another CA, the wrong server name,
an expired certificate) is not in it. So a participant checks its own files first, and when the
analyst stays unavailable it repeats the handshake once with Python's ``ssl`` (the same CA,
certificate, key and server name, ALPN ``h2``), which reports the cause: OpenSSL's verification
result for the analyst's certificate, or the alert the analyst sent about ours.
"""

from __future__ import annotations

import datetime
import socket
import ssl
from pathlib import Path

from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import serialization

from noisyanchor.common.tomlconfig import TlsFiles

#: OpenSSL verification codes meaning "not issued by the CA this participant trusts".
_OTHER_CA = {2, 7, 18, 19, 20, 21}

#: TLS alerts an analyst sends when it refuses the participant's certificate.
_REFUSED_ALERTS = {"TLSV1_ALERT_UNKNOWN_CA", "TLSV1_ALERT_DECRYPT_ERROR",
                   "SSLV3_ALERT_BAD_CERTIFICATE", "SSLV3_ALERT_CERTIFICATE_UNKNOWN",
                   "TLSV1_ALERT_ACCESS_DENIED", "TLSV13_ALERT_CERTIFICATE_REQUIRED",
                   "SSLV3_ALERT_UNSUPPORTED_CERTIFICATE"}


def _load_cert(path: Path) -> x509.Certificate:
    return x509.load_pem_x509_certificate(Path(path).read_bytes())


def _validity_problem(cert: x509.Certificate, whose: str) -> str | None:
    now = datetime.datetime.now(datetime.UTC)
    if now > cert.not_valid_after_utc:
        return (f"{whose} expired on {cert.not_valid_after_utc:%Y-%m-%d %H:%M} UTC: renew it "
                "(noisyanchor provision --renew SITE, or your PKI)")
    if now < cert.not_valid_before_utc:
        return (f"{whose} is valid only from {cert.not_valid_before_utc:%Y-%m-%d %H:%M} UTC: "
                "check this host's clock")
    return None


def local_problems(tls: TlsFiles) -> list[str]:
    """Problems of the participant's own TLS files, found without any network."""
    problems = []
    try:
        ca, cert = _load_cert(tls.ca), _load_cert(tls.cert)
        key = serialization.load_pem_private_key(Path(tls.key).read_bytes(), password=None)
    except (ValueError, TypeError) as err:
        return [f"cannot read the TLS files ({tls.ca}, {tls.cert}, {tls.key}): {err}"]
    for c, whose in ((cert, f"this participant's certificate {tls.cert}"),
                     (ca, f"the CA certificate {tls.ca}")):
        if (problem := _validity_problem(c, whose)) is not None:
            problems.append(problem)
    try:
        cert.verify_directly_issued_by(ca)
    except (ValueError, TypeError, InvalidSignature):
        problems.append(f"this participant's certificate {tls.cert} was not issued by the CA "
                        f"in {tls.ca} (issuer {cert.issuer.rfc4514_string()}): use the files of "
                        "one startup kit together")
    if key.public_key().public_numbers() != cert.public_key().public_numbers():
        problems.append(f"the key {tls.key} does not belong to the certificate {tls.cert}")
    return problems


def _split_address(address: str) -> tuple[str, int] | None:
    host, sep, port = address.rpartition(":")
    if not sep or not port.isdigit():
        return None
    return host.strip("[]"), int(port)


def _server_names(host: str, port: int, timeout: float) -> str:
    """The DNS and IP names on the analyst's certificate (fetched without verification)."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.check_hostname, ctx.verify_mode = False, ssl.CERT_NONE
    try:
        with socket.create_connection((host, port), timeout=timeout) as raw, \
                ctx.wrap_socket(raw) as conn:
            der = conn.getpeercert(binary_form=True)
        sans = x509.load_der_x509_certificate(der).extensions.get_extension_for_class(
            x509.SubjectAlternativeName).value
        names = [*sans.get_values_for_type(x509.DNSName),
                 *map(str, sans.get_values_for_type(x509.IPAddress))]
        return ", ".join(names) or "none"
    except (OSError, ValueError, x509.ExtensionNotFound):
        return "unknown"


def probe(address: str, tls: TlsFiles, server_name: str, timeout: float = 5.0) -> str | None:
    """Repeat the TLS handshake with ``ssl``; the likely cause of a failure, or None when the
    handshake works (or the address is not ``host:port``)."""
    where = _split_address(address)
    if where is None:
        return None
    host, port = where
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.load_verify_locations(str(tls.ca))
    ctx.load_cert_chain(str(tls.cert), str(tls.key))
    ctx.set_alpn_protocols(["h2"])
    try:
        raw = socket.create_connection((host, port), timeout=timeout)
    except socket.gaierror as err:
        return (f"cannot resolve the analyst's host {host!r} ({err.strerror}): check "
                "[participant] analyst and this host's DNS or /etc/hosts")
    except ConnectionRefusedError:
        return (f"nothing listens at {address}: the analyst is not started yet, or the address "
                "or port is wrong")
    except OSError as err:
        return (f"cannot reach {address} ({err.strerror or err}): a firewall, a wrong address, "
                "or the analyst's host is down")
    try:
        with ctx.wrap_socket(raw, server_hostname=server_name) as conn:
            conn.settimeout(min(timeout, 1.0))
            try:  # TLS 1.3: the analyst judges our certificate after our side is done
                first = conn.recv(1)
            except TimeoutError:
                return None
            except ssl.SSLError as err:
                return _refused(err, tls)
            if first:  # the server's HTTP/2 preface: the connection works
                return None
            # gRPC closes the connection without an alert when it refuses the certificate.
            return (f"the analyst closed the connection right after the TLS handshake: it "
                    f"refused this participant's certificate {tls.cert} (not issued by the CA it "
                    "trusts, expired, or revoked); use the certificate of this federation's "
                    "startup kit")
    except ssl.SSLCertVerificationError as err:
        if err.verify_code == 62 or "hostname" in str(err.verify_message).lower():
            return (f"wrong server name: the analyst's certificate is not valid for "
                    f"{server_name!r} (it names {_server_names(host, port, timeout)}); set "
                    "[participant] server_name to one of those, or reissue the analyst's "
                    "certificate with this name")
        if err.verify_code in (9, 10):
            return (f"the analyst's certificate is not valid now ({err.verify_message}): "
                    "its operator must renew it (noisyanchor provision --renew analyst)")
        if err.verify_code in _OTHER_CA:
            return (f"certificate from another CA: the analyst's certificate was not issued by "
                    f"the CA in {tls.ca} ({err.verify_message}); use the CA certificate of this "
                    "federation's startup kit")
        return f"the analyst's certificate was refused: {err.verify_message}"
    except ssl.SSLError as err:
        return _refused(err, tls)
    except OSError:
        return None


def _refused(err: ssl.SSLError, tls: TlsFiles) -> str:
    reason = str(getattr(err, "reason", "") or err)
    if "EXPIRED" in reason:
        return (f"the analyst refused this participant's certificate {tls.cert} as expired: "
                "renew it (noisyanchor provision --renew SITE, or your PKI)")
    if reason in _REFUSED_ALERTS:
        return (f"the analyst refused this participant's certificate {tls.cert} ({reason}): "
                "it was not issued by the CA the analyst trusts; use the certificate of this "
                "federation's startup kit")
    return f"TLS handshake with the analyst failed: {reason}"


def explain(address: str, tls: TlsFiles, server_name: str, timeout: float = 5.0) -> str | None:
    """Local problems first, then the probe (``timeout`` seconds at most); None when neither
    finds anything."""
    problems = local_problems(tls)
    if problems:
        return "; ".join(problems)
    return probe(address, tls, server_name, timeout)

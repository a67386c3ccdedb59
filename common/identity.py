"""Who a certificate names: the one rule every service and every signature check uses.

A participant's id comes from its whole X.509 certificate (parsed with ``cryptography``), never
from gRPC's ``x509_common_name`` property, which stops at the first NUL byte of a name and shows
only the first of several common names.

The rule (pinned: provisioning builds on it):

1. If the certificate carries Subject Alternative Name URIs of the form
   ``urn:noisyanchor:participant:<id>`` (the form :func:`participant_san` writes), there must be
   exactly one, and ``<id>`` is the participant id.
2. Otherwise (a bring-your-own PKI that writes no such URI), the subject must carry exactly one
   common name, and that is the id.
3. Either way the id must match :data:`common.tomlconfig.ID_PATTERN` (1-64 letters, digits,
   ``._-``): no NUL, no control characters, no path separators.

And who may present one (:func:`check_issued`, the same rule for the analyst's admission of a
call, every service and every signature check of :mod:`common.sealing`): the certificate is
issued *directly* by one of the federation's CA certificates (the kit's ``ca.pem``), is not
itself a CA, is valid now and, when it states an extended key usage, allows client
authentication. TLS accepts any chain that ends at the CA; a participant's certificate may not
come through an intermediate (an intermediate signed by the root, even against the root's path
length, could otherwise name any participant).

A certificate that breaks the rule is refused with an
:class:`~common.errors.UnauthenticatedError` naming what is wrong; nothing falls back to a
partial reading.
"""

from __future__ import annotations

import collections
import datetime
import threading
from collections.abc import Sequence

from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from noisyanchor.common.errors import InvalidInputError, UnauthenticatedError
from noisyanchor.common.tomlconfig import ID_PATTERN

#: Prefix of the SAN URI naming a participant (``urn:noisyanchor:participant:<id>``).
PARTICIPANT_URN = "urn:noisyanchor:participant:"

#: Verdicts of :func:`authenticate` kept in memory (one per connected participant).
_CACHE_SIZE = 1024


def participant_uri(participant_id: str) -> str:
    """``urn:noisyanchor:participant:<id>``; InvalidInputError for an id no certificate may
    name (the analyst would refuse the certificate)."""
    if not isinstance(participant_id, str) or not ID_PATTERN.fullmatch(participant_id):
        raise InvalidInputError(f"participant id {participant_id!r} must be 1-64 letters, "
                                "digits, '.', '_' or '-', starting with a letter or digit")
    return PARTICIPANT_URN + participant_id


def participant_san(participant_id: str) -> x509.UniformResourceIdentifier:
    """The SAN entry a certificate issuer writes so that the certificate names
    ``participant_id`` (see the module docstring)."""
    return x509.UniformResourceIdentifier(participant_uri(participant_id))


def _checked(value: str, what: str) -> str:
    if not ID_PATTERN.fullmatch(value):
        raise UnauthenticatedError(f"the {what} {value!r} is not a valid participant id (1-64 "
                                   "letters, digits, '.', '_' or '-', starting with a letter or "
                                   "digit; no control characters)")
    return value


def _san_ids(cert: x509.Certificate) -> list[str]:
    """The ids of every participant URI in the SAN extension (prefix matched without regard
    to case, since URN schemes and namespace ids are case-insensitive)."""
    try:
        sans = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except x509.ExtensionNotFound:
        return []
    return [uri[len(PARTICIPANT_URN):]
            for uri in sans.get_values_for_type(x509.UniformResourceIdentifier)
            if uri[:len(PARTICIPANT_URN)].lower() == PARTICIPANT_URN]


def participant_id(cert: x509.Certificate) -> str:
    """The participant id ``cert`` names, by the rule of the module docstring.

    Raises
    ------
    UnauthenticatedError
        Several participant URIs, no URI and not exactly one common name, or an id with
        characters outside the id pattern.
    """
    uris = _san_ids(cert)
    if len(uris) > 1:
        raise UnauthenticatedError(f"the certificate names {len(uris)} participants in its "
                                   f"subject alternative names ({', '.join(map(repr, uris))}); "
                                   "exactly one is allowed")
    if uris:
        return _checked(uris[0], "subject alternative name")
    names = cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)
    if len(names) != 1:
        raise UnauthenticatedError(f"the certificate carries {len(names)} subject common names "
                                   f"and no {PARTICIPANT_URN}<id> URI; exactly one is required")
    value = names[0].value
    return _checked(value if isinstance(value, str) else value.decode(errors="replace"),
                    "subject common name")


def load_ca_certificates(ca_pem: bytes) -> tuple[x509.Certificate, ...]:
    """The CA certificates of a trust file (one PEM certificate or several)."""
    try:
        cas = tuple(x509.load_pem_x509_certificates(ca_pem))
    except ValueError as err:
        raise UnauthenticatedError(f"unreadable federation CA certificate: {err}") from None
    return cas


def _is_ca(cert: x509.Certificate) -> bool:
    try:
        return bool(cert.extensions.get_extension_for_class(x509.BasicConstraints).value.ca)
    except x509.ExtensionNotFound:
        return False


def check_issued(cert: x509.Certificate, cas: Sequence[x509.Certificate], who: str, *,
                 now: datetime.datetime | None = None) -> None:
    """Refuse ``cert`` unless it may act as a participant (module docstring): not a CA, issued
    directly by one of the CA certificates ``cas``, valid at ``now``, a client certificate.

    Raises
    ------
    UnauthenticatedError
        Naming what failed; ``who`` names the certificate's holder in the message.
    """
    if _is_ca(cert):
        raise UnauthenticatedError(f"the certificate of {who} is a CA certificate; a "
                                   "participant presents an end-entity certificate")
    for ca in cas:
        if not _is_ca(ca):
            continue
        try:
            cert.verify_directly_issued_by(ca)
        except (ValueError, TypeError, InvalidSignature):
            continue
        break
    else:
        names = ", ".join(repr(ca.subject.rfc4514_string()) for ca in cas)
        raise UnauthenticatedError(
            f"the certificate of {who} was not issued by the federation CA {names} itself (its "
            f"issuer: {cert.issuer.rfc4514_string()!r}): it comes from another CA or through "
            "an intermediate CA, and a participant's certificate must be issued by the "
            "federation CA directly")
    now = now or datetime.datetime.now(datetime.UTC)
    if not cert.not_valid_before_utc <= now <= cert.not_valid_after_utc:
        raise UnauthenticatedError(
            f"the certificate of {who} is not valid now (valid "
            f"{cert.not_valid_before_utc:%Y-%m-%d} to {cert.not_valid_after_utc:%Y-%m-%d})")
    try:
        usage = cert.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    except x509.ExtensionNotFound:
        usage = None
    if usage is not None and ExtendedKeyUsageOID.CLIENT_AUTH not in usage:
        raise UnauthenticatedError(f"the certificate of {who} is not a client certificate "
                                   "(its extended key usage has no clientAuth)")


class _Verdicts:
    """Outcomes of :func:`authenticate` by certificate and trust (ids and refusals alike, so
    a flood of calls with one refused certificate parses it once), each until the
    certificate's own expiry; at most :data:`_CACHE_SIZE` kept, least recently used dropped."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._seen: collections.OrderedDict[tuple[bytes, tuple[bytes, ...]],
                                            tuple[str | UnauthenticatedError, float]] = (
            collections.OrderedDict())

    def get(self, key: tuple[bytes, tuple[bytes, ...]]) -> str | UnauthenticatedError | None:
        now = datetime.datetime.now(datetime.UTC).timestamp()
        with self._lock:
            hit = self._seen.get(key)
            if hit is None or now > hit[1]:
                return None
            self._seen.move_to_end(key)
            return hit[0]

    def put(self, key: tuple[bytes, tuple[bytes, ...]], verdict: str | UnauthenticatedError,
            until: float) -> None:
        with self._lock:
            self._seen[key] = (verdict, until)
            self._seen.move_to_end(key)
            while len(self._seen) > _CACHE_SIZE:
                self._seen.popitem(last=False)


_verdicts = _Verdicts()


def _authenticated(cert: x509.Certificate, ca_pems: Sequence[bytes]) -> str:
    """:func:`authenticate` of a parsed certificate: who issued it is checked first (a refusal
    names the chain's problem before the name's)."""
    try:
        named: str | None = participant_id(cert)
        who = repr(named)
    except UnauthenticatedError as err:
        named, who, unnamed = None, repr(cert.subject.rfc4514_string()), err
    check_issued(cert, [ca for pem in ca_pems for ca in load_ca_certificates(pem)], who)
    if named is None:
        raise unnamed
    return named


def authenticate(cert_pem: bytes, ca_pems: Sequence[bytes]) -> str:
    """The participant id of a client certificate presented to the federation whose CA
    certificates are ``ca_pems``: :func:`check_issued`, then :func:`participant_id`.

    Raises
    ------
    UnauthenticatedError
        The certificate may not act as a participant, or names none unambiguously.
    """
    key = (bytes(cert_pem), tuple(ca_pems))
    verdict = _verdicts.get(key)
    if verdict is None:
        until = float("inf")
        try:
            cert = x509.load_pem_x509_certificate(key[0])
        except ValueError as err:
            verdict = UnauthenticatedError(f"unreadable client certificate: {err}")
        else:
            until = cert.not_valid_after_utc.timestamp()
            try:
                verdict = _authenticated(cert, ca_pems)
            except UnauthenticatedError as err:
                verdict = err
        _verdicts.put(key, verdict, until)
    if isinstance(verdict, UnauthenticatedError):
        raise UnauthenticatedError(str(verdict))
    return verdict

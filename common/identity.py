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

A certificate that breaks the rule is refused with an
:class:`~common.errors.UnauthenticatedError` naming what is wrong; nothing falls back to a
partial reading.
"""

from __future__ import annotations

import functools

from cryptography import x509
from cryptography.x509.oid import NameOID

from noisyanchor.common.errors import InvalidInputError, UnauthenticatedError
from noisyanchor.common.tomlconfig import ID_PATTERN

#: Prefix of the SAN URI naming a participant (``urn:noisyanchor:participant:<id>``).
PARTICIPANT_URN = "urn:noisyanchor:participant:"

#: Certificates parsed by :func:`peer_id` kept in memory (one per connected participant).
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


@functools.lru_cache(maxsize=_CACHE_SIZE)
def peer_id(cert_pem: bytes) -> str:
    """The participant id of a PEM certificate (the peer's, from a verified TLS connection).

    Cached by the PEM bytes: a participant's calls all present the same certificate.
    """
    try:
        cert = x509.load_pem_x509_certificate(cert_pem)
    except ValueError as err:
        raise UnauthenticatedError(f"unreadable client certificate: {err}") from None
    return participant_id(cert)

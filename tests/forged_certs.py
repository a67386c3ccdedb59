"""Certificates a CA signs with exactly the names asked for, none of the checks of
:func:`deploy.certs.issue`: what a careless or compromised issuer could hand a hostile
participant (unit and end-to-end tests of :mod:`common.identity`)."""

from __future__ import annotations

import datetime
from collections.abc import Sequence

from cryptography import x509
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID


def forge(ca_key, ca_cert: x509.Certificate, *, common_names: Sequence[str] = (),
          uris: Sequence[str] = (), key=None,
          usage: x509.ObjectIdentifier = ExtendedKeyUsageOID.CLIENT_AUTH):
    """``(private key, certificate)``: subject common names and SAN URIs exactly as given,
    valid for a day, signed by ``ca_key``; ``key`` (default: a new P-256 key) is the leaf's."""
    key = key if key is not None else ec.generate_private_key(ec.SECP256R1())
    now = datetime.datetime.now(datetime.UTC)
    builder = (x509.CertificateBuilder()
               .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)
                                        for cn in common_names]))
               .issuer_name(ca_cert.subject).public_key(key.public_key())
               .serial_number(x509.random_serial_number())
               .not_valid_before(now - datetime.timedelta(minutes=5))
               .not_valid_after(now + datetime.timedelta(days=1))
               .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
               .add_extension(x509.ExtendedKeyUsage([usage]), critical=False))
    if uris:
        builder = builder.add_extension(x509.SubjectAlternativeName(
            [x509.UniformResourceIdentifier(u) for u in uris]), critical=False)
    return key, builder.sign(ca_key, hashes.SHA256())


def forge_intermediate(ca_key, ca_cert: x509.Certificate, *, name: str = "rogue intermediate CA",
                       path_length: int | None = None):
    """``(private key, certificate)`` of a CA certificate signed by ``ca_key``, whatever the
    root's own path length allows (a root with ``path_length=0`` forbids it: what a careless
    issuer, or one that ignores path rules, could still sign)."""
    key = ec.generate_private_key(ec.SECP256R1())
    now = datetime.datetime.now(datetime.UTC)
    cert = (x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)]))
            .issuer_name(ca_cert.subject).public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.BasicConstraints(ca=True, path_length=path_length),
                           critical=True)
            .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True,
                                         crl_sign=True, content_commitment=False,
                                         key_encipherment=False, data_encipherment=False,
                                         key_agreement=False, encipher_only=False,
                                         decipher_only=False), critical=True)
            .sign(ca_key, hashes.SHA256()))
    return key, cert

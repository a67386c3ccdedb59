"""A participant's own TLS files are checked before it connects: an expired certificate, one
from another CA, or a key that does not match are named, with what to do."""

from __future__ import annotations

import datetime

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec

from noisyanchor.common.tomlconfig import TlsFiles
from noisyanchor.deploy.certs import write_pki
from noisyanchor.participant.tls_check import local_problems


def test_good_files_have_no_problem(tmp_path):
    pki = write_pki(tmp_path, ["p0"])
    assert local_problems(TlsFiles(pki.ca, *pki.clients["p0"])) == []


def test_an_expired_certificate_is_named_with_its_date_and_the_renewal(tmp_path):
    pki = write_pki(tmp_path, ["p0"], keep_ca_key=True)
    ca_key = serialization.load_pem_private_key(pki.ca_key.read_bytes(), None)
    ca = x509.load_pem_x509_certificate(pki.ca.read_bytes())
    key = ec.generate_private_key(ec.SECP256R1())
    now = datetime.datetime.now(datetime.UTC)
    cert = (x509.CertificateBuilder().subject_name(ca.subject).issuer_name(ca.subject)
            .public_key(key.public_key()).serial_number(1)
            .not_valid_before(now - datetime.timedelta(days=60))
            .not_valid_after(now - datetime.timedelta(days=30)).sign(ca_key, hashes.SHA256()))
    cert_path, key_path = tmp_path / "old.pem", tmp_path / "old.key"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(key.private_bytes(serialization.Encoding.PEM,
                                           serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption()))
    problems = local_problems(TlsFiles(pki.ca, cert_path, key_path))
    assert len(problems) == 1
    assert "expired on" in problems[0] and "provision --renew" in problems[0]


def test_a_certificate_from_another_ca_and_a_foreign_key_are_named(tmp_path):
    ours, theirs = write_pki(tmp_path / "a", ["p0"]), write_pki(tmp_path / "b", ["p0"])
    problems = local_problems(TlsFiles(ours.ca, *theirs.clients["p0"]))
    assert any("was not issued by the CA" in p for p in problems)
    mixed = TlsFiles(ours.ca, ours.clients["p0"][0], theirs.clients["p0"][1])
    assert any("does not belong to the certificate" in p for p in local_problems(mixed))

"""The demo PKI: CA-issued server and client certificates naming the right ids."""

import stat

import pytest
from cryptography import x509

from noisyanchor.common.errors import InvalidInputError
from noisyanchor.common.identity import participant_id as certificate_id
from noisyanchor.deploy.certs import write_pki


def test_every_certificate_is_issued_by_the_ca_and_names_its_holder(tmp_path):
    pki = write_pki(tmp_path, ["p0", "p1"])
    ca = x509.load_pem_x509_certificate(pki.ca.read_bytes())
    server = x509.load_pem_x509_certificate(pki.server_cert.read_bytes())
    server.verify_directly_issued_by(ca)
    sans = server.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert "localhost" in sans.get_values_for_type(x509.DNSName)
    for pid, (cert, key) in pki.clients.items():
        c = x509.load_pem_x509_certificate(cert.read_bytes())
        c.verify_directly_issued_by(ca)
        assert certificate_id(c) == pid
        assert stat.S_IMODE(key.stat().st_mode) == 0o600


@pytest.mark.parametrize("ids", [[], ["p0", "p0"], ["analyst"], ["../x"]])
def test_bad_participant_ids_are_refused(tmp_path, ids):
    with pytest.raises(InvalidInputError):
        write_pki(tmp_path, ids)

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


@pytest.mark.parametrize("ids, server_name", [
    (["p0", "a" * 300], "localhost"), (["p0", "bad/name"], "localhost"), (["p0"], "bad name"),
    (["p0", "analyst"], "localhost"),
])
def test_nothing_is_written_before_every_name_is_checked(tmp_path, ids, server_name):
    out = tmp_path / "pki"
    with pytest.raises(InvalidInputError):
        write_pki(out, ids, server_name=server_name)
    assert not out.exists()  # no CA, no server files from a refused call


def test_certs_cli_reports_bad_names_and_unwritable_folders_without_a_traceback(tmp_path,
                                                                                  capsys):
    from noisyanchor.cli import main

    assert main(["certs", "--out", str(tmp_path / "x"), "--participants", "a" * 300]) == 1
    assert "(300 characters)' must be 1-64 letters" in capsys.readouterr().err
    assert main(["certs", "--out", "/proc/x", "--participants", "p0"]) == 1
    err = capsys.readouterr().err
    assert "cannot write certificates to /proc/x" in err and "Traceback" not in err


@pytest.mark.e2e
def test_certs_command_refuses_a_300_character_name_as_a_process_writing_nothing(tmp_path):
    """``noisyanchor certs`` run as operators run it: exit status 1 and the reason on stderr,
    no traceback, no folder (issue 9: the CA and server files used to be written first)."""
    import subprocess
    import sys

    out = tmp_path / "pki"
    done = subprocess.run([sys.executable, "-m", "noisyanchor", "certs", "--out", str(out),
                           "--participants", "p0", "b" * 300], capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 1
    assert "(300 characters)' must be 1-64 letters" in done.stderr
    assert "Traceback" not in done.stderr + done.stdout
    assert not out.exists()

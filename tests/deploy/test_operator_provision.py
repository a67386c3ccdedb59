"""What an operator sees and changes in a federation's kits (issue 25): the one-host template
that provisions as it is, relative deadlines, the refused past deadline, and values chosen once
(ports, deadline) that later runs keep."""

from __future__ import annotations

import datetime as dt
import json
import shutil
import socket
from pathlib import Path

import pytest
from cryptography import x509

from noisyanchor import deploy
from noisyanchor.analyst.config import load_analyst_config
from noisyanchor.cli import main
from noisyanchor.common.errors import ConfigError
from noisyanchor.deploy.expiry import expiry_report
from noisyanchor.deploy.provision import free_port, load_project, provision
from noisyanchor.participant.config import load_participant_config

TEMPLATES = Path(deploy.__file__).parent / "templates"
CONTAINER = Path(deploy.__file__).parent / "container"
LOCAL = TEMPLATES / "federation-local.toml"


def _copy(src: Path, folder: Path, *replace: tuple[str, str]) -> Path:
    text = src.read_text()
    for old, new in replace:
        assert old in text, old
        text = text.replace(old, new, 1)
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "federation.toml"
    path.write_text(text)
    return path


def _project_files() -> list[Path]:
    """Every project file the repository ships (templates a provision run accepts)."""
    return [p for p in [*TEMPLATES.glob("federation*.toml"), CONTAINER / "federation.toml"]
            if "[[site]]" in p.read_text()]


def test_the_local_template_provisions_as_it_is_with_free_ports_and_a_deadline_in_7_days(
        tmp_path):
    before = dt.datetime.now(dt.UTC)
    done = provision(LOCAL, tmp_path / "kits")  # the template itself, not a copy
    analyst = load_analyst_config(done.out / "analyst" / "analyst.toml")
    assert analyst.host == "127.0.0.1" and analyst.port >= 50051 and analyst.health_port
    assert analyst.port != analyst.health_port
    for port in (analyst.port, analyst.health_port):  # free when provisioning: bindable now
        with socket.socket() as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            probe.bind(("127.0.0.1", port))
    week = dt.timedelta(days=7)
    assert before + week <= analyst.deadline <= dt.datetime.now(dt.UTC) + week + \
        dt.timedelta(seconds=1)
    for site in analyst.participants:
        cfg = load_participant_config(done.out / site / f"{site}.toml")
        assert cfg.analyst == f"localhost:{analyst.port}" and cfg.server_name == "localhost"


def test_a_port_something_listens_on_is_skipped(tmp_path):
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        taken = busy.getsockname()[1]
        assert free_port("127.0.0.1", start=taken) > taken
        assert free_port("127.0.0.1", {taken + 1}, start=taken) > taken + 1


@pytest.mark.parametrize("project", _project_files(), ids=lambda p: p.name)
def test_every_project_file_takes_a_relative_deadline(project, tmp_path):
    text = project.read_text()
    lines = [ln for ln in text.splitlines() if not ln.startswith("deadline")]
    at = next(i for i, ln in enumerate(lines) if ln.startswith("[federation]")) + 1
    lines.insert(at, 'deadline = "in 36 hours"')
    path = tmp_path / "federation.toml"
    path.write_text("\n".join(lines) + "\n")
    before = dt.datetime.now(dt.UTC)
    done = provision(path)
    deadline = load_analyst_config(done.out / "analyst" / "analyst.toml").deadline
    assert dt.timedelta(hours=36) <= deadline - before <= dt.timedelta(hours=36, seconds=5)


@pytest.mark.parametrize("deadline, match", [
    ("2020-01-31T18:00:00Z",
     r"deadline 2020-01-31T18:00:00\+00:00 is in the past \(\d+ days( \d+ h)? ago\)"),
    ('"2020-01-31T18:00:00Z"', "is in the past"),
    ('"in seven days"', r"\[federation\] deadline: 'seven days' is not a duration"),
    ("2027-01-31T18:00:00", "no UTC offset"),
])
def test_a_deadline_in_the_past_or_unreadable_is_refused_and_named_writing_nothing(
        tmp_path, deadline, match):
    project = _copy(LOCAL, tmp_path, ('deadline = "in 7 days"', f"deadline = {deadline}"))
    with pytest.raises(ConfigError, match=match):
        provision(project)
    assert not (tmp_path / "kits").exists()


def test_later_runs_keep_the_ports_and_the_deadline_the_first_one_chose(tmp_path):
    project = _copy(LOCAL, tmp_path)
    provision(project)
    kits = tmp_path / "kits"
    first = load_analyst_config(kits / "analyst" / "analyst.toml")
    # The project now says something else, and a site is added: the analyst (rewritten to
    # expect org-d) keeps the chosen port and deadline, and the new site's kit names them.
    project.write_text(project.read_text().replace('"in 7 days"', '"in 30 days"') +
                       '\n[[site]]\nname = "org-d"\n')
    with socket.socket() as busy:  # the chosen port in use now: the kept one is still named
        busy.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        busy.bind(("127.0.0.1", first.port))
        busy.listen()
        provision(project, add_sites=("org-d",))
        provision(project, renew=("analyst", "org-a"))
    again = load_analyst_config(kits / "analyst" / "analyst.toml")
    assert (again.port, again.health_port, again.deadline) == (
        first.port, first.health_port, first.deadline)
    assert again.participants[-1] == "org-d"
    for site in ("org-a", "org-d"):
        assert load_participant_config(kits / site / f"{site}.toml").analyst == \
            f"localhost:{first.port}"


def test_a_site_may_not_be_named_like_the_kept_ca_folder(tmp_path):
    project = _copy(LOCAL, tmp_path, ('name = "org-c"', 'name = "ca"'))
    with pytest.raises(ConfigError, match="folder of the kept CA"):
        load_project(project)


# -- certificates: the expiry listing and the CA's renewal -----------------------------------
def _cert(path: Path) -> x509.Certificate:
    return x509.load_pem_x509_certificate(path.read_bytes())


@pytest.fixture
def kits(tmp_path) -> Path:
    return provision(_copy(LOCAL, tmp_path)).out


def test_the_expiry_listing_names_every_certificate_and_what_to_do(kits):
    rows = expiry_report(kits)
    assert [(r.kit, r.role) for r in rows] == [("ca", "CA")] + [
        (k, role) for k in ("analyst", "org-a", "org-b", "org-c") for role in ("own", "CA copy")]
    for row in rows:  # the dates are the certificates' own
        assert row.not_after == _cert(kits / row.file).not_valid_after_utc
    assert all(not r.notes for r in rows)  # freshly made, 30 days left, deadline in 7
    later = rows[0].not_after - dt.timedelta(days=3)  # within a quarter of the 30 days
    assert all("expires within 7 days 12 h: noisyanchor provision --renew" in r.notes[0]
               for r in expiry_report(kits, later) if r.role != "CA copy")
    after = rows[0].not_after + dt.timedelta(hours=2)
    assert expiry_report(kits, after)[0].notes[0].startswith("EXPIRED 2 h ago: noisyanchor "
                                                             "provision --renew ca")


def test_the_listing_flags_certificates_ending_before_the_deadline_and_foreign_files(
        kits, tmp_path):
    analyst = kits / "analyst" / "analyst.toml"
    end = _cert(kits / "org-a" / "pki" / "org-a.pem").not_valid_after_utc
    text = analyst.read_text()
    deadline = (end + dt.timedelta(days=1)).isoformat()
    analyst.write_text("\n".join(f"deadline = {deadline}" if ln.startswith("deadline") else ln
                                 for ln in text.splitlines()))
    other = provision(_copy(LOCAL, tmp_path / "other"), tmp_path / "other-kits").out
    shutil.copy(other / "org-b" / "pki" / "org-b.pem", kits / "org-b" / "pki" / "org-b.pem")
    shutil.copy(other / "ca" / "ca.pem", kits / "org-c" / "pki" / "ca.pem")
    notes = {(r.kit, r.role): r.notes for r in expiry_report(kits)}
    assert "expires before the federation's deadline" in notes["org-a", "own"][0]
    assert notes["org-b", "own"][0].startswith("NOT issued by this CA")
    assert notes["org-c", "CA copy"] == ("not the kept CA certificate: put ca/ca.pem in its "
                                         "place and re-ship it",)


def test_renewing_the_ca_keeps_its_key_and_name_so_every_issued_certificate_still_verifies(
        kits, tmp_path, capsys):
    old = _cert(kits / "ca" / "ca.pem")
    leaves = {k: _cert(kits / k / "pki" / f"{k}.pem") for k in ("analyst", "org-a", "org-b")}
    keys = {k: (kits / k / "pki" / f"{k}.key").read_bytes() for k in leaves}
    project = kits.parent / "federation.toml"
    project.write_text(project.read_text().replace("validity_days = 30", "validity_days = 90"))
    assert main(["provision", "--project", str(project), "--renew", "ca", "--json"]) == 0
    shipped = json.loads(capsys.readouterr().out)["ship"]
    new = _cert(kits / "ca" / "ca.pem")
    assert new.serial_number != old.serial_number and new.subject == old.subject
    assert new.public_key().public_numbers() == old.public_key().public_numbers()
    term = new.not_valid_after_utc - dt.datetime.now(dt.UTC)
    assert dt.timedelta(days=89) < term <= dt.timedelta(days=90)  # validity_days from now
    for kit, leaf in leaves.items():
        leaf.verify_directly_issued_by(new)  # no certificate needs issuing again
        assert _cert(kits / kit / "pki" / f"{kit}.pem") == leaf
        assert (kits / kit / "pki" / f"{kit}.key").read_bytes() == keys[kit]
        assert _cert(kits / kit / "pki" / "ca.pem") == new
    # Exactly the kits' CA copies are to be shipped again, nothing else.
    assert shipped == {k: ["pki/ca.pem"] for k in ("analyst", "org-a", "org-b", "org-c")}
    ca_row = expiry_report(kits)[0]
    assert "kits shipped before then trust the previous CA certificate until " \
           f"{old.not_valid_after_utc:%Y-%m-%d %H:%M} UTC" in ca_row.notes[-1]
    record = json.loads((kits / "ca" / "issued.json").read_text())[-1]
    assert record["name"] == "ca" and record["serial"] == format(new.serial_number, "x")
    # Renewed only once the previous one had expired: every kit shipped before is cut off.
    late = dict(record, renewed=(old.not_valid_after_utc + dt.timedelta(days=1)).isoformat())
    (kits / "ca" / "issued.json").write_text(json.dumps([late]))
    later = old.not_valid_after_utc + dt.timedelta(days=2)
    assert "a kit shipped before cannot connect until it has the new pki/ca.pem" in \
        expiry_report(kits, later)[0].notes[-1]
    # A certificate renewed after the CA is issued under it; the text run names what to ship.
    assert main(["provision", "--project", str(project), "--renew", "ca", "org-a"]) == 0
    text = capsys.readouterr().out
    assert "ship again to org-a: pki/ca.pem, pki/org-a.pem" in text
    assert "ship again to org-b: pki/ca.pem (from" in text
    assert "every certificate it issued still verifies" in text
    _cert(kits / "org-a" / "pki" / "org-a.pem").verify_directly_issued_by(
        _cert(kits / "ca" / "ca.pem"))


def test_the_expiry_cli_lists_as_text_and_json(kits, capsys):
    project = str(kits.parent / "federation.toml")
    assert main(["provision", "--project", project, "--expiry"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split() == ["kit", "certificate", "expires", "(UTC)", "left", "to", "do"]
    assert len(lines) == 10 and "org-c/pki/org-c.pem" in lines[-2]
    assert main(["provision", "--project", project, "--expiry", "--json"]) == 0
    listed = json.loads(capsys.readouterr().out)["certificates"]
    assert listed[0]["kit"] == "ca" and 29 * 86400 < listed[0]["seconds_left"] <= 30 * 86400

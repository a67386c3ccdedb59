"""Provisioning from a project file: one startup kit per site, the CA kept for new sites and
renewals, and the CSR flow in which a site's key never leaves it."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest
from cryptography import x509

from noisyanchor import deploy
from noisyanchor.analyst.config import load_analyst_config
from noisyanchor.cli import main
from noisyanchor.common.errors import (
    AlreadyExistsError,
    ConfigError,
    InvalidInputError,
    NoisyAnchorError,
    PreconditionError,
)
from noisyanchor.common.identity import participant_id
from noisyanchor.deploy.provision import provision, sign_request
from noisyanchor.participant.config import load_participant_config
from noisyanchor.participant.keygen import make_key_and_csr

TEMPLATE = Path(deploy.__file__).parent / "templates" / "federation.toml"
SITES = ("org-a", "org-b", "org-c")


@pytest.fixture
def project(tmp_path) -> Path:
    path = tmp_path / "federation.toml"
    path.write_text(TEMPLATE.read_text())
    return path


def _cert(path: Path) -> x509.Certificate:
    return x509.load_pem_x509_certificate(path.read_bytes())


def test_every_site_gets_a_kit_whose_config_loads_and_whose_certificate_names_it(project):
    done = provision(project)
    assert sorted(done.kits) == ["analyst", *SITES]
    kits = done.out
    ca = _cert(kits / "ca" / "ca.pem")
    assert stat.S_IMODE((kits / "ca" / "ca.key").stat().st_mode) == 0o600
    analyst = load_analyst_config(kits / "analyst" / "analyst.toml")
    assert analyst.participants == SITES and analyst.federation_id == "pilot-2026"
    assert analyst.schema.features == 64 and analyst.host == "0.0.0.0"
    assert analyst.screening == "refuse"  # the project's [federation] screening
    server = _cert(analyst.tls.cert)
    server.verify_directly_issued_by(ca)
    sans = server.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert "analyst.example.org" in sans.get_values_for_type(x509.DNSName)
    assert [str(a) for a in sans.get_values_for_type(x509.IPAddress)] == ["10.0.0.10"]
    validity = server.not_valid_after_utc - server.not_valid_before_utc
    assert abs(validity.days - 365) <= 1  # validity_days of the project
    for site in SITES:
        cfg = load_participant_config(kits / site / f"{site}.toml")
        assert (cfg.id, cfg.server_name, cfg.analyst) == (
            site, "analyst.example.org", "analyst.example.org:50051")
        cert = _cert(cfg.tls.cert)
        cert.verify_directly_issued_by(ca)
        assert participant_id(cert) == site
        assert stat.S_IMODE(cfg.tls.key.stat().st_mode) == 0o600
        assert not (kits / site / "pki" / "ca.key").exists()  # the CA key is never shipped
    with pytest.raises(AlreadyExistsError, match="already provisioned"):
        provision(project)


@pytest.mark.parametrize("old, new, match", [
    ('name = "org-c"', 'name = "org-a"', "unique"),
    ('name = "org-c"', 'name = "' + "c" * 300 + '"', "300 characters"),
    ('names = ["analyst.example.org"]', 'names = ["bad name"]', "DNS name"),
    ('method = "aa-igdp-an"', 'method = "gdp"', r"\[federation\] method"),
    ("features = 64", "features = 0", r"\[schema\] features"),
    ("validity_days = 365", "validity_days = 99999999999",
     r"federation.toml: \[project\] validity_days: validity_days must be 1 to 731 days"),
    ('screening = "refuse"', 'screening = "drop"',
     r"federation.toml: \[federation\] screening: expected one of refuse, exclude, accept"),
    ('# csr = "requests/org-c.csr"', 'csr = "requests/org-c.csr"', "cannot read the CSR"),
])
def test_a_bad_project_writes_nothing(project, old, new, match):
    text = project.read_text()
    assert old in text
    project.write_text(text.replace(old, new, 1))
    with pytest.raises(NoisyAnchorError, match=match):
        provision(project)
    assert not (project.parent / "kits").exists()


def test_a_site_added_later_is_issued_by_the_kept_ca_and_the_analyst_expects_it(project):
    provision(project)
    kits = project.parent / "kits"
    ca_before = (kits / "ca" / "ca.pem").read_bytes()
    kept = kits / "analyst" / "store" / "uploads" / "org-a.bundle"  # the analyst already ran
    kept.parent.mkdir(parents=True)
    kept.write_bytes(b"committed")
    project.write_text(project.read_text() + '\n[[site]]\nname = "org-d"\n')
    done = provision(project, add_sites=("org-d",))
    assert kept.read_bytes() == b"committed"  # nothing stored is lost
    assert sorted(done.kits) == ["analyst", "org-d"]
    assert (kits / "ca" / "ca.pem").read_bytes() == ca_before
    _cert(kits / "org-d" / "pki" / "org-d.pem").verify_directly_issued_by(_cert(kits / "ca" /
                                                                                "ca.pem"))
    assert load_analyst_config(kits / "analyst" / "analyst.toml").participants[-1] == "org-d"
    with pytest.raises(AlreadyExistsError, match="--renew org-d"):
        provision(project, add_sites=("org-d",))


def test_a_site_cannot_be_added_once_the_anchor_agreement_has_started(project):
    """Issue 22: after the dealer's key is published a new site could never get the anchor;
    --add-site refuses, says why and what to do, and writes nothing."""
    provision(project)
    kits = project.parent / "kits"
    keys = kits / "analyst" / "store" / "relay" / "keys"
    keys.mkdir(parents=True)
    (keys / "org-a.pb").write_bytes(b"signed key")
    before = sorted(p.relative_to(kits) for p in kits.rglob("*"))
    analyst_toml = (kits / "analyst" / "analyst.toml").read_bytes()
    project.write_text(project.read_text() + '\n[[site]]\nname = "org-d"\n')
    with pytest.raises(PreconditionError, match=r"cannot add org-d to federation .*: its anchor "
                       r"agreement has started .* exchange keys of org-a.*new \[federation\] id"):
        provision(project, add_sites=("org-d",))
    assert sorted(p.relative_to(kits) for p in kits.rglob("*")) == before
    assert (kits / "analyst" / "analyst.toml").read_bytes() == analyst_toml


def test_renewal_keeps_the_key_and_issues_a_new_certificate(project):
    provision(project)
    kits = project.parent / "kits"
    old = _cert(kits / "org-b" / "pki" / "org-b.pem")
    key = (kits / "org-b" / "pki" / "org-b.key").read_bytes()
    provision(project, renew=("org-b", "analyst"))
    new = _cert(kits / "org-b" / "pki" / "org-b.pem")
    assert new.serial_number != old.serial_number
    assert new.public_key().public_numbers() == old.public_key().public_numbers()
    assert (kits / "org-b" / "pki" / "org-b.key").read_bytes() == key


def test_a_site_that_sends_a_csr_gets_a_kit_without_a_key(project, tmp_path):
    site_dir = tmp_path / "org-c-host"
    request = make_key_and_csr("org-c", site_dir)
    assert stat.S_IMODE(request.key.stat().st_mode) == 0o600
    with pytest.raises(AlreadyExistsError):
        make_key_and_csr("org-c", site_dir)  # never overwrites a key
    provision(project)
    kits = project.parent / "kits"
    sign_request(project, request.csr)
    assert not (kits / "org-c" / "pki" / "org-c.key").exists()
    cert = _cert(kits / "org-c" / "pki" / "org-c.pem")
    from cryptography.hazmat.primitives import serialization

    own = serialization.load_pem_private_key(request.key.read_bytes(), None)
    assert cert.public_key().public_numbers() == own.public_key().public_numbers()
    assert participant_id(cert) == "org-c"
    other = make_key_and_csr("org-z", tmp_path / "z")
    with pytest.raises(NoisyAnchorError, match="no \\[\\[site\\]\\] named 'org-z'"):
        sign_request(project, other.csr)


def test_keygen_refuses_an_id_no_certificate_may_carry(tmp_path):
    with pytest.raises(InvalidInputError):
        make_key_and_csr("../x", tmp_path)


def test_the_project_template_is_complete(project):
    text = project.read_text()
    for key in ("validity_days", "names", "addresses", "bind", "deadline", "[schema]",
                "[model]", "[[site]]", "csr"):
        assert key in text
    with pytest.raises(ConfigError, match="unknown table"):
        project.write_text(text + "\n[extra]\nx = 1\n")
        provision(project)


def test_provision_cli_prints_the_kits_and_refuses_a_second_run(project, capsys):
    import json


    assert main(["provision", "--project", str(project), "--json"]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert sorted(printed["kits"]) == ["analyst", *SITES]
    assert main(["provision", "--project", str(project)]) == 1
    assert "already provisioned" in capsys.readouterr().err
    assert main(["provision", "--project", str(project), "--renew", "org-a"]) == 0


@pytest.mark.parametrize("template", ["federation-breast-cancer.toml", "federation-fair.toml"])
def test_typed_templates_provision_as_they_are_and_pin_the_preprocessing(tmp_path, template):
    import tomllib

    from noisyanchor.common.tabular import TabularSchema

    path = tmp_path / template
    path.write_text((TEMPLATE.parent / template).read_text())
    done = provision(path, tmp_path / "kits")
    analyst = load_analyst_config(done.kits["analyst"] / "analyst.toml")
    digest = TabularSchema.from_toml(tomllib.loads(path.read_text())["schema"], path).digest()
    assert analyst.schema.preprocessing_sha256 == digest
    sites = [name for name in done.kits if name != "analyst"]
    assert len(sites) == 3
    for site in sites:
        cfg = load_participant_config(done.kits[site] / f"{site}.toml")
        assert cfg.preprocessing_sha256 == digest.hex()
        assert cfg.schema is not None and cfg.schema.digest() == digest  # the kit's copy


@pytest.mark.parametrize("template, old, new, key", [
    # h > d: 65 of 64 plain features, 31 of the 30 encoded typed columns.
    ("federation.toml", "# dim = 256 ", "dim = 65 ", r"\[federation\] dim: h = 65 exceeds the "
     r"record width d = 64 \(\[schema\] features\)"),
    ("federation-breast-cancer.toml", "v = 0.02 ", "dim = 31\nprojection_seed = 1\nv = 0.02 ",
     r"\[federation\] dim: h = 31 exceeds the record width d = 30 \(the encoded width"),
    # Refused by the sites' reader only (the analyst needs no projection seed).
    ("federation.toml", "# dim = 256 ", "dim = 16 ", r"\[federation\] projection_seed: is "
     "required with dim"),
    ("federation.toml", "features = 64", "features = 0", r"\[schema\] features"),
])
def test_a_refusal_names_the_project_file_and_its_key_not_a_staged_config(tmp_path, template,
                                                                         old, new, key):
    path = tmp_path / template
    text = (TEMPLATE.parent / template).read_text()
    assert old in text
    path.write_text(text.replace(old, new, 1))
    with pytest.raises(ConfigError, match=f"^{path}: {key}") as refused:
        provision(path, tmp_path / "kits")
    assert ".provision-" not in str(refused.value)
    assert not (tmp_path / "kits").exists()


def test_the_analyst_refuses_a_projection_wider_than_its_records(project):
    done = provision(project)
    config = done.kits["analyst"] / "analyst.toml"
    config.write_text(config.read_text().replace("[federation]\n", "[federation]\ndim = 65\n", 1))
    with pytest.raises(ConfigError, match=rf"^{config}: \[federation\] dim: h = 65 exceeds"):
        load_analyst_config(config)


DRAFT = """[schema]
label = "species"
label_classes = ["adelie", "gentoo"]

[[schema.column]]
name = "island"
type = "categorical"
categories = ["biscoe", "dream"]

[[schema.column]]
name = "mass_g"
unit = "g"
center = 4200.0
scale = 800.0
missing = "fill"
fill = 4200.0
"""


def test_a_reviewed_draft_replaces_the_projects_schema_and_later_runs_keep_it(tmp_path,
                                                                                caplog):
    """Issue 34: a pilot on one's own table took an edited copy of the template to carry the
    drafted [schema]; ``provision --schema`` takes the draft as it is (the one-host template
    unchanged), and later runs keep it, as they keep the deadline: a site added afterwards fits
    the same schema. A site's state folder is made private, so nothing warns about narrowing
    it (it named the staging folder)."""
    import tomllib

    from noisyanchor.common.tabular import TabularSchema

    project = tmp_path / "federation.toml"
    project.write_text((TEMPLATE.parent / "federation-local.toml").read_text())
    draft = tmp_path / "schema.toml"
    draft.write_text(DRAFT)
    digest = TabularSchema.from_toml(tomllib.loads(DRAFT)["schema"], draft).digest()
    with caplog.at_level("WARNING"):
        done = provision(project, tmp_path / "kits", schema=draft)
    assert not [r for r in caplog.records if "open to others" in r.getMessage()]
    for site in SITES:  # before a config is loaded (which narrows it, with a warning)
        assert stat.S_IMODE((done.kits[site] / "state").stat().st_mode) == 0o700
    assert load_analyst_config(done.kits["analyst"] / "analyst.toml") \
        .schema.preprocessing_sha256 == digest
    for site in SITES:
        assert load_participant_config(done.kits[site] / f"{site}.toml").schema.digest() == digest
    with pytest.raises(PreconditionError, match=r"--schema .* is for the first run"):
        provision(project, tmp_path / "kits", renew=("org-a",), schema=draft)
    with project.open("a") as fh:
        fh.write('\n[[site]]\nname = "org-d"\n')
    provision(project, tmp_path / "kits", add_sites=("org-d",))  # the project says features=64
    assert load_participant_config(tmp_path / "kits" / "org-d" / "org-d.toml") \
        .schema.digest() == digest
    assert load_analyst_config(tmp_path / "kits" / "analyst" / "analyst.toml") \
        .schema.preprocessing_sha256 == digest


@pytest.mark.parametrize("text, match", [
    ("[model]\nname = 'logistic'\n", r"no \[schema\] table \(--schema takes schema draft's"),
    (DRAFT.replace('categories = ["biscoe", "dream"]', 'categories = ["biscoe"]'),
     "at least 2 categories"),
])
def test_a_schema_file_without_a_schema_or_with_a_bad_column_is_named(tmp_path, text, match):
    project = tmp_path / "federation.toml"
    project.write_text((TEMPLATE.parent / "federation-local.toml").read_text())
    draft = tmp_path / "schema.toml"
    draft.write_text(text)
    with pytest.raises(InvalidInputError, match=match) as refused:
        provision(project, tmp_path / "kits", schema=draft)
    assert str(draft) in str(refused.value) and ".provision-" not in str(refused.value)
    assert not (tmp_path / "kits").exists()


def _typed_project(tmp_path: Path, columns: str) -> Path:
    """The fair template with ``columns`` as its [[schema.column]] tables."""
    head = (TEMPLATE.parent / "federation-fair.toml").read_text().split("[schema]")[0]
    path = tmp_path / "wide.toml"
    path.write_text(head + '[schema]\nlabel = "y"\n' + columns + "".join(
        f'[[site]]\nname = "site-{s}"\n' for s in "abc"))
    return path


@pytest.mark.slow
def test_a_project_of_100000_columns_or_1000000_categories_is_refused_stating_the_limit(
        tmp_path, capsys):
    """Checked in time linear in the file, and refused above the stated limits by provision
    and schema check (8 CPU-s for the three reads here, most of it tomllib parsing the 5 MB and
    10 MB files; before, a duplicate check by list scans did not finish in 40 s)."""
    path = _typed_project(tmp_path, "".join(f'[[schema.column]]\nname = "c{i}"\n'
                                            for i in range(100_000)))
    with pytest.raises(ConfigError, match=r"wide.toml: \[schema\] column: 100,000 "
                       r"\[\[schema.column\]\] tables, more than the 10,000 a schema may"):
        provision(path, tmp_path / "kits")
    assert main(["schema", "check", "--schema", str(path), "--data", str(path)]) == 1
    assert "100,000 [[schema.column]] tables, more than the 10,000" in capsys.readouterr().err
    path.unlink()
    categories = ", ".join(f'"k{i}"' for i in range(1_000_000))
    path = _typed_project(tmp_path, f'[[schema.column]]\nname = "c"\ntype = "categorical"\n'
                          f"categories = [{categories}]\n")
    with pytest.raises(ConfigError, match=r"declares 1,000,000 categories, more than the "
                       "10,000 a schema may declare"):
        provision(path, tmp_path / "kits")
    assert not (tmp_path / "kits").exists()


def test_a_project_file_over_the_size_limit_is_refused_unread(tmp_path, monkeypatch):
    from noisyanchor.common import tomlconfig

    monkeypatch.setattr(tomlconfig, "MAX_CONFIG_BYTES", 1 << 20)
    path = tmp_path / "big.toml"
    path.write_text(TEMPLATE.read_text() + "#" * (1 << 20) + "\n")
    with pytest.raises(ConfigError, match=r"big.toml: over 1 MiB, more than a config file"):
        provision(path, tmp_path / "kits")

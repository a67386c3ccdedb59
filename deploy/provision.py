"""``noisyanchor provision``: one startup kit per site from a project file (NVIDIA FLARE's
``provision`` convention).

The project file (``deploy/templates/federation.toml``) names the federation, the analyst's
addresses, the protocol, the record schema and the sites. Provisioning writes, under ``--out``:

* ``ca/``: the CA certificate and key (mode 0600) and ``issued.json``, kept by the operator for
  ``--add-site`` and ``--renew`` (never shipped);
* ``analyst/``: ``analyst.toml`` and ``pki/`` (CA certificate, the analyst's certificate with its
  DNS names and IP addresses as SANs, its key);
* ``<site>/``: ``<site>.toml`` and ``pki/`` (CA certificate, the site's certificate and, unless
  the site sent a CSR, its key).

A site that keeps its key to itself runs ``noisyanchor participant keygen`` and sends the CSR;
the project names it (``csr = "..."``) or the operator signs it with ``--sign``; its kit then
holds no key. Every name, path and value is checked, and the configs are loaded by the same
readers the roles use, before anything is written: the kits appear together or not at all.
"""

from __future__ import annotations

import datetime
import json
import logging
import os
import shutil
import socket
import tempfile
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec

from noisyanchor.analyst.config import check_screening, one_host_connections
from noisyanchor.common.durations import (
    check_days,
    human_duration,
    is_relative,
    parse_deadline,
)
from noisyanchor.common.errors import (
    AlreadyExistsError,
    ConfigError,
    InvalidInputError,
    NotFoundError,
    PreconditionError,
)
from noisyanchor.common.files import check_private_key
from noisyanchor.common.identity import participant_id
from noisyanchor.common.tabular import TabularSchema
from noisyanchor.common.tomlconfig import Table, check_id, read_toml
from noisyanchor.deploy.certs import (
    certify,
    check_names,
    key_pem,
    make_ca,
    write_file,
)
from noisyanchor.deploy.launch import toml_text

log = logging.getLogger(__name__)

#: Keys of the project's ``[federation]`` table copied into the analyst's and the sites' configs.
PROTOCOL_KEYS = ("method", "anchors", "dim", "projection_seed", "sigma", "v",
                 "translation_scale", "dealer")

#: Keys of ``[federation]`` only the analyst's config carries.
ANALYST_ONLY_KEYS = ("reference", "deadline", "accept_collusion", "report_projection_cost",
                     "screening")

#: Default certificate validity (days) when the project sets none.
DEFAULT_VALIDITY_DAYS = 365

#: Folder (under the kits folder) of the CA the operator keeps; never a site's name.
CA_FOLDER = "ca"

#: Where provisioning looks for free ports when the project asks for one (``port = 0``): the
#: first free ones from here, so that a one-host pilot gets gRPC's usual 50051 when it is free.
FREE_PORT_START, FREE_PORT_TRIES = 50051, 500


@dataclass(frozen=True)
class Site:
    """One participant site of the project: its id, data path on its host, optional CSR."""

    name: str
    data: str
    csr: Path | None = None


@dataclass(frozen=True)
class Project:
    """A parsed project file (see ``deploy/templates/federation.toml``)."""

    path: Path
    name: str
    validity: datetime.timedelta
    analyst_names: tuple[str, ...]
    analyst_addresses: tuple[str, ...]
    bind: str
    port: int
    health_port: int | None
    federation: dict[str, Any]
    schema: dict[str, Any] | None
    model: dict[str, Any] | None
    sites: tuple[Site, ...]
    #: Whether the project's deadline was given relative to provisioning ("in 7 days").
    relative_deadline: bool = False

    @property
    def site_names(self) -> tuple[str, ...]:
        return tuple(s.name for s in self.sites)

    def site(self, name: str) -> Site:
        for s in self.sites:
            if s.name == name:
                return s
        raise NotFoundError(f"{self.path}: no [[site]] named {name!r} (sites: "
                            f"{', '.join(self.site_names)})")


def load_project(path: Path) -> Project:
    """Read and check a project file (names, addresses, ports, sites)."""
    path = Path(path)
    doc = read_toml(path)
    unknown = sorted(set(doc) - {"project", "analyst", "federation", "schema", "model", "site"})
    if unknown:
        raise ConfigError(f"{path}: unknown table(s) {', '.join(unknown)}")
    proj = Table(doc, "project", path)
    name = check_id(proj.str("name"), f"{path}: [project] name")
    days = proj.int("validity_days", DEFAULT_VALIDITY_DAYS, minimum=1,
                    check=lambda n: check_days(n, "validity_days"))
    proj.done()
    an = Table(doc, "analyst", path)
    names = tuple(an.strs("names", ["localhost"]))
    addresses = tuple(an.strs("addresses", ["127.0.0.1"]))
    try:
        check_names(["site"], [*names, *addresses])
    except InvalidInputError as err:
        raise an.error("names", str(err)) from None
    bind = an.str("bind", "0.0.0.0")
    port = an.int("port", 50051, minimum=0)
    health = an.int("health_port", None, minimum=0)
    an.done()
    if port > 65535 or (health is not None and health > 65535):
        raise ConfigError(f"{path}: [analyst] port and health_port must be 0..65535 (0: a port "
                          "free on this host, chosen when provisioning)")
    fed = dict(doc.get("federation", {}))
    bad = sorted(set(fed) - set(PROTOCOL_KEYS) - set(ANALYST_ONLY_KEYS))
    if bad:
        raise ConfigError(f"{path}: [federation] has unknown key(s) {', '.join(bad)}")
    if "method" not in fed:
        raise ConfigError(f"{path}: [federation] method is required")
    if "screening" in fed:
        Table(doc, "federation", path).str("screening", check=check_screening)
    relative = is_relative(fed.get("deadline"))
    if "deadline" in fed:
        try:
            fed["deadline"] = parse_deadline(fed["deadline"])
        except InvalidInputError as err:
            raise ConfigError(f"{path}: [federation] deadline: {err}") from None
    raw_sites = doc.get("site", [])
    if not isinstance(raw_sites, list) or len(raw_sites) < 2:
        raise ConfigError(f"{path}: at least two [[site]] tables are needed")
    sites = []
    for raw in raw_sites:
        table = Table({"site": raw}, "site", path)
        site_name = table.str("name")
        csr = table.path("csr", None)
        sites.append(Site(site_name, table.str("data", f"data/{site_name}.csv"), csr))
        table.done()
    try:
        check_names([s.name for s in sites])
    except InvalidInputError as err:
        raise ConfigError(f"{path}: [[site]] name: {err}") from None
    if CA_FOLDER in {s.name for s in sites}:
        raise ConfigError(f"{path}: [[site]] name {CA_FOLDER!r} is the folder of the kept CA "
                          "(kits/ca/); choose another name")
    fed.setdefault("dealer", sites[0].name)
    return Project(path, name, datetime.timedelta(days=days), names, addresses, bind, port,
                   health, fed, doc.get("schema"), doc.get("model"), tuple(sites), relative)


# -- values chosen once, at the first provisioning -------------------------------------------
def free_port(host: str, exclude: set[int] | frozenset[int] = frozenset(),
              start: int = FREE_PORT_START, tries: int = FREE_PORT_TRIES) -> int:
    """The first TCP port from ``start``, not in ``exclude``, that nothing listens on at
    ``host`` now.

    Probed by binding it as gRPC will: with ``SO_REUSEADDR`` (a port left in TIME_WAIT is free)
    but not ``SO_REUSEPORT`` (a port a running server holds is not).
    """
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    for port in range(start, min(start + tries, 65536)):
        if port in exclude:
            continue
        with socket.socket(family, socket.SOCK_STREAM) as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                probe.bind((host, port))
            except OSError:
                continue
        return port
    raise InvalidInputError(f"no free TCP port on {host} among {start}..{start + tries - 1}: "
                            "set [analyst] port (and health_port) in the project")


def check_deadline_ahead(project: Project, now: datetime.datetime | None = None) -> None:
    """Refuse a project whose deadline has passed: every site would be refused at once."""
    deadline = project.federation.get("deadline")
    now = now or datetime.datetime.now(datetime.UTC)
    if deadline is not None and deadline <= now:
        raise ConfigError(
            f"{project.path}: [federation] deadline {deadline.isoformat()} is in the past "
            f"({human_duration((now - deadline).total_seconds())} ago): the analyst would refuse "
            "every site ('closed at its deadline'); set a later date-time or a time from now "
            "such as deadline = \"in 7 days\"")


def check_agreement_not_started(out: Path, sites: tuple[str, ...]) -> None:
    """Refuse to add ``sites`` once the federation's anchor agreement has started.

    The dealer seals the anchor seed once, to the sites whose keys it found, and the analyst's
    store is bound to the participants it was created with (issue 22): a site added afterwards
    could never receive the anchor and would wait until the deadline. The analyst's kit under
    ``out`` names its store; exchange keys in it mean the agreement has started. (An analyst on
    another host, whose store is not here, refuses the changed participant list itself when it
    is restarted with the new config.)
    """
    config = out / "analyst" / "analyst.toml"
    if not config.is_file():
        return
    folder = read_toml(config).get("server", {}).get("output_dir")
    if not folder:
        return
    store = Path(folder) if Path(folder).is_absolute() else config.parent / folder
    keys = sorted(p.stem for p in (store / "relay" / "keys").glob("*.pb"))
    if keys:
        fid = read_toml(config).get("federation", {}).get("id", "?")
        raise PreconditionError(
            f"cannot add {', '.join(sites)} to federation {fid!r}: its anchor agreement has "
            f"started (the analyst's store {store} holds the exchange keys of "
            f"{', '.join(keys)}), and a site added now could never receive the anchor: it would "
            "wait until the deadline. Nothing was written. To bring in a new site, provision a "
            "new federation: a new [federation] id in the project, and a new --out")


def _kit_settings(out: Path) -> dict[str, Any]:
    """The port, health port, deadline and ``[schema]`` the analyst's kit under ``out``
    already names."""
    config = out / "analyst" / "analyst.toml"
    if not config.is_file():
        raise NotFoundError(f"no analyst kit under {out} (its {config} names the federation's "
                            "port and deadline)")
    doc = read_toml(config)
    server, fed = doc.get("server", {}), doc.get("federation", {})
    return {"port": server.get("port"), "health_port": server.get("health_port"),
            "deadline": fed.get("deadline"), "schema": doc.get("schema")}


def settle(project: Project, out: Path, *, first: bool) -> Project:
    """The project with the values provisioning decides once filled in.

    At the first provisioning a deadline in the past is refused and ``port = 0`` /
    ``health_port = 0`` become free ports of this host (:func:`free_ports`). Afterwards
    (``--add-site``, ``--renew``, ``--sign``) every kit keeps naming what the analyst's kit
    names: its ports where the project says 0, and always its deadline, so a relative deadline
    ("in 7 days") is not moved by a later run and one extended with ``noisyanchor analyst
    deadline`` is not put back; and its ``[schema]`` (given with ``--schema`` at the first run,
    perhaps), which every site's table must fit.
    """
    if first:
        check_deadline_ahead(project)
        hosts = {"port": project.bind, "health_port": "127.0.0.1"}  # health: 127.0.0.1 only
        taken = {p for p in (project.port, project.health_port) if p}
        chosen: dict[str, int] = {}
        for name, host in hosts.items():
            if getattr(project, name) == 0:
                chosen[name] = free_port(host, taken)
                taken.add(chosen[name])
        return replace(project, **chosen)
    kit = _kit_settings(out)
    fed = dict(project.federation)
    if kit["deadline"] is None:
        fed.pop("deadline", None)
    else:
        if fed.get("deadline") not in (None, kit["deadline"]) and not project.relative_deadline:
            log.warning("the analyst's kit keeps its deadline %s; the project's %s is used only "
                        "when provisioning a new federation (move the deadline with "
                        "'noisyanchor analyst deadline')", kit["deadline"].isoformat(),
                        fed["deadline"].isoformat())
        fed["deadline"] = kit["deadline"]
    ports = {name: kit[name] for name in ("port", "health_port")
             if getattr(project, name) == 0 and kit[name] is not None}
    if kit["schema"] != project.schema:
        log.warning("the analyst's kit keeps its [schema]; the project's is used only when "
                    "provisioning a new federation")
    return replace(project, federation=fed, schema=kit["schema"], **ports)


# -- configs ---------------------------------------------------------------------------------
def analyst_tables(project: Project) -> dict[str, dict[str, Any]]:
    """The analyst's config (paths relative to its kit)."""
    fed = {"id": project.name, "participants": list(project.site_names)} | project.federation
    tables: dict[str, dict[str, Any]] = {"federation": fed}
    if project.schema:
        tables["schema"] = dict(project.schema)
    if project.model:
        tables["model"] = dict(project.model)
    tables["server"] = {"host": project.bind, "port": project.port, "output_dir": "store",
                        "health_port": project.health_port, "log_json": "logs/analyst.jsonl"}
    if project.bind in ("127.0.0.1", "::1", "localhost"):
        # Every site of a one-host federation connects from the same loopback address.
        tables["server"]["max_connections_per_address"] = one_host_connections(
            len(project.site_names))
    tables["tls"] = {"ca": "pki/ca.pem", "cert": "pki/analyst.pem", "key": "pki/analyst.key"}
    return tables


def site_tables(project: Project, site: Site) -> dict[str, dict[str, Any]]:
    """Site ``site``'s config: it connects to the analyst's first name, checked against it,
    and pins the digest of the project's typed columns, if any (the site refuses an analyst
    that serves another preprocessing), and holds those columns (``[schema]``)."""
    protocol = {k: project.federation[k] for k in PROTOCOL_KEYS if k in project.federation}
    typed = bool(project.schema and "column" in project.schema)
    if typed:
        protocol["preprocessing_sha256"] = TabularSchema.from_toml(
            project.schema, project.path).digest().hex()
    # The typed columns travel in the kit too: the site checks its table before connecting.
    schema = {"schema": dict(project.schema or {})} if typed else {}
    return {
        "participant": {"id": site.name, "federation_id": project.name,
                        "analyst": f"{project.analyst_names[0]}:{project.port}",
                        "server_name": project.analyst_names[0], "data": site.data,
                        "state_dir": "state"},
        "protocol": protocol,
        "tls": {"ca": "pki/ca.pem", "cert": f"pki/{site.name}.pem",
                "key": f"pki/{site.name}.key"},
    } | schema


# -- the CA kept by the operator -------------------------------------------------------------
@dataclass
class KeptCa:
    """The operator's CA (``<out>/ca/``) and its record of issued certificates."""

    key: ec.EllipticCurvePrivateKey
    cert: x509.Certificate
    issued: list[dict[str, Any]]

    @classmethod
    def load(cls, out: Path) -> KeptCa:
        folder = Path(out) / "ca"
        if not (folder / "ca.key").is_file():
            raise NotFoundError(f"no CA under {folder}: run 'noisyanchor provision' without "
                                "--add-site/--renew/--sign first")
        key = serialization.load_pem_private_key(
            check_private_key(folder / "ca.key", "the CA's private key").read_bytes(), None)
        if not isinstance(key, ec.EllipticCurvePrivateKey):
            raise InvalidInputError(f"{folder / 'ca.key'} is not an ECDSA key")
        cert = x509.load_pem_x509_certificate((folder / "ca.pem").read_bytes())
        issued_path = folder / "issued.json"
        issued = json.loads(issued_path.read_text()) if issued_path.is_file() else []
        return cls(key, cert, issued)

    def issue(self, name: str, public_key, project: Project, *, server: bool) -> x509.Certificate:
        cert = certify(self.key, self.cert, name, public_key, server=server,
                       dns_names=project.analyst_names if server else (),
                       ip_addresses=project.analyst_addresses if server else (),
                       validity=project.validity)
        self.issued.append({"name": name, "serial": format(cert.serial_number, "x"),
                            "not_after": cert.not_valid_after_utc.isoformat()})
        return cert

    def write(self, out: Path) -> None:
        folder = Path(out) / "ca"
        folder.mkdir(parents=True, exist_ok=True)
        pem = serialization.Encoding.PEM
        write_file(folder / "ca.pem", self.cert.public_bytes(pem))
        write_file(folder / "ca.key", key_pem(self.key), private=True)
        write_file(folder / "issued.json", json.dumps(self.issued, indent=2).encode())


def _csr_public_key(csr_path: Path, site: str):
    """The public key of a site's CSR, checked: valid signature, and it names ``site``."""
    try:
        csr = x509.load_pem_x509_csr(Path(csr_path).read_bytes())
    except (OSError, ValueError) as err:
        raise InvalidInputError(f"cannot read the CSR {csr_path} of {site!r}: {err}") from None
    if not csr.is_signature_valid:
        raise InvalidInputError(f"the CSR {csr_path} is not signed by its own key")
    named = participant_id(csr)  # type: ignore[arg-type]  # same SAN/CN rule as certificates
    if named != site:
        raise InvalidInputError(f"the CSR {csr_path} names {named!r}, not the site {site!r}")
    return csr.public_key()


# -- kits ------------------------------------------------------------------------------------
def _write_kit(root: Path, name: str, tables: dict, ca: KeptCa, cert: x509.Certificate,
               key: ec.EllipticCurvePrivateKey | None) -> Path:
    kit = root / name
    (kit / "pki").mkdir(parents=True, exist_ok=True)
    # The folders a role writes, made now: a kit mounted read-only (containers) gets volumes
    # mounted on them.
    for folder in (("store", "logs") if name == "analyst" else ("state", "data")):
        (kit / folder).mkdir(mode=0o700, exist_ok=True)  # private from the start
    pem = serialization.Encoding.PEM
    write_file(kit / "pki" / "ca.pem", ca.cert.public_bytes(pem))
    write_file(kit / "pki" / f"{name}.pem", cert.public_bytes(pem))
    if key is not None:
        write_file(kit / "pki" / f"{name}.key", key_pem(key), private=True)
    return _write_config(kit / f"{name}.toml", name, tables)


def _write_config(path: Path, name: str, tables: dict) -> Path:
    path.write_text(f"# Startup kit of {name!r}: made by noisyanchor provision; keep the files "
                    "of one kit together\n" + toml_text(tables))
    return path


def _site_kit(root: Path, project: Project, site: Site, ca: KeptCa) -> Path:
    if site.csr is not None:
        key = None
        public = _csr_public_key(site.csr, site.name)
    else:
        key = ec.generate_private_key(ec.SECP256R1())
        public = key.public_key()
    return _write_kit(root, site.name, site_tables(project, site), ca,
                      ca.issue(site.name, public, project, server=False), key)


def _analyst_kit(root: Path, project: Project, ca: KeptCa,
                 key: ec.EllipticCurvePrivateKey | None = None) -> Path:
    key = key or ec.generate_private_key(ec.SECP256R1())
    return _write_kit(root, "analyst", analyst_tables(project), ca,
                      ca.issue("analyst", key.public_key(), project, server=True), key)


def _check_configs(root: Path, names: list[str], project: Project, out: Path) -> None:
    """Load the configs staged under ``root`` with the roles' own readers (every key
    checked); a refusal names the project file and its key (:func:`_as_project_error`)."""
    from noisyanchor.analyst.config import load_analyst_config
    from noisyanchor.participant.config import load_participant_config

    for name in names:
        config = root / name / f"{name}.toml"
        key = root / name / "pki" / f"{name}.key"
        # A CSR site has no key in its kit, and a renewal stages none (the kit keeps its own):
        # an empty stand-in lets the readers check that the config names the file.
        stand_in = not key.exists()
        if stand_in:  # private, as the readers require of a key
            os.close(os.open(key, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
        try:
            (load_analyst_config if name == "analyst" else load_participant_config)(config)
        except InvalidInputError as err:
            raise _as_project_error(err, config, project.path, root, out) from None
        finally:
            if stand_in:
                key.unlink()


#: A site config's tables by the project table they are made from (:func:`site_tables`).
_SITE_TABLES = {"[protocol]": "[federation]", "[participant]": "[[site]]"}


def _as_project_error(err: InvalidInputError, config: Path, project: Path, staging: Path,
                      out: Path) -> InvalidInputError:
    """A refusal of a staged config told as the user wrote it: the project file instead of
    the staged config (which the user never sees, and which is deleted), the project's table
    for a site config's, and the kits folder instead of the staging folder."""
    text = str(err).replace(str(config), str(project))
    if config.stem != "analyst":  # the analyst's tables are the project's own names
        for table, source in _SITE_TABLES.items():
            text = text.replace(f"{project}: {table}", f"{project}: {source}")
    return type(err)(text.replace(str(staging), str(out)))


def _commit(staging: Path, out: Path) -> list[Path]:
    """Move every file of ``staging`` to the same place under ``out``, replacing files of the
    same name and leaving everything else (an analyst's store, a site's state) where it is."""
    out.mkdir(parents=True, exist_ok=True)
    for path in sorted(staging.rglob("*")):
        target = out / path.relative_to(staging)
        if path.is_dir():  # with the staged folder's mode: a site's state/ stays private
            target.mkdir(mode=path.stat().st_mode & 0o777, parents=True, exist_ok=True)
        else:
            os.replace(path, target)
    return [out / item.name for item in sorted(staging.iterdir())]


@dataclass(frozen=True)
class Provisioned:
    """What a provisioning run wrote: the output folder, the kits (by name) and the project
    as provisioned (ports and deadline settled, :func:`settle`)."""

    out: Path
    kits: dict[str, Path]
    project: Project | None = None
    #: ``{kit: files (relative to the kit) this run wrote}``: what must reach each site again.
    changed: dict[str, tuple[str, ...]] | None = None


def provision(project_path: Path, out: Path | None = None, *, add_sites: tuple[str, ...] = (),
              renew: tuple[str, ...] = (), schema: Path | None = None) -> Provisioned:
    """Make (or extend, or renew) the startup kits of a project.

    Parameters
    ----------
    project_path : Path
        The project file.
    out : Path, optional
        Output folder (default: ``kits`` beside the project file).
    add_sites : tuple of str
        Sites of the project to make kits for with the kept CA (the analyst's config is made
        again, naming every site); the first run makes every kit.
    renew : tuple of str
        Sites (or ``analyst``) whose certificates are issued again for their existing key,
        valid for the project's ``validity_days`` from now; ``ca``: the CA's own certificate,
        for the same key and name (:func:`_renew_ca`).
    schema : Path, optional
        A file whose ``[schema]`` (``schema draft``'s output, reviewed) replaces the
        project's, at the first run only: later runs keep the kits' (:func:`settle`).
    """
    project = load_project(project_path)
    out = Path(out) if out is not None else project.path.parent / "kits"
    first = not (out / "ca" / "ca.key").exists()
    if schema is not None:
        if not first:
            raise PreconditionError(f"{out} is already provisioned: its kits keep the [schema] "
                                    f"they were made with; --schema {schema} is for the first "
                                    "run, into a new --out")
        project = replace(project, schema=schema_table(schema))
    for name in (*add_sites, *(r for r in renew if r not in ("analyst", CA_FOLDER))):
        project.site(name)
    if first and (add_sites or renew):
        raise NotFoundError(f"no CA under {out / 'ca'}: run 'noisyanchor provision --project "
                            f"{project.path}' first")
    if first and out.exists() and not _only_site_tables(out, project):
        raise AlreadyExistsError(_not_empty(out))
    if first:
        check_split_fits(out, project, schema or project.path)
    if not first and not (add_sites or renew):
        raise AlreadyExistsError(f"{out} is already provisioned (CA in {out / 'ca'}): use "
                                 "--add-site SITE, --renew SITE, or another --out")
    project = settle(project, out, first=first)
    try:
        staging_parent = out.parent if out.parent.exists() else Path(tempfile.gettempdir())
        staging = Path(tempfile.mkdtemp(prefix=".provision-", dir=staging_parent))
    except OSError as err:
        raise InvalidInputError(f"cannot write the kits to {out}: {err.strerror or err}") \
            from None
    try:
        if first:
            ca_key, ca_cert = make_ca(f"{project.name} CA", project.validity)
            ca = KeptCa(ca_key, ca_cert, [])
            names = ["analyst", *project.site_names]
            _analyst_kit(staging, project, ca)
            for site in project.sites:
                _site_kit(staging, project, site, ca)
        else:
            ca = KeptCa.load(out)
            names = []
            if add_sites:
                check_agreement_not_started(out, add_sites)
            for site_name in add_sites:
                if (out / site_name).exists():
                    raise AlreadyExistsError(f"{out / site_name} exists: use --renew "
                                             f"{site_name} to issue its certificate again")
                _site_kit(staging, project, project.site(site_name), ca)
                names.append(site_name)
            if CA_FOLDER in renew:  # first: certificates renewed with it name its new term
                _renew_ca(staging, out, project, ca)
            for name in (r for r in renew if r != CA_FOLDER):
                _renew(staging, out, project, ca, name)
                names.append(name)
            if add_sites and "analyst" not in names:  # the analyst must expect the new sites
                _reconfigure_analyst(staging, out, project)
                names.append("analyst")
        _check_configs(staging, names, project, out)
        ca.write(staging)
        changed = _changed_files(staging, out)
        moved = _commit(staging, out)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return Provisioned(out, {p.name: p for p in moved if p.name != "ca"}, project, changed)


def _changed_files(staging: Path, out: Path) -> dict[str, tuple[str, ...]]:
    """``{kit: files (relative to the kit)}`` that a run writes new or different from those
    under ``out``: what must reach each kit's holder again."""
    changed = {}
    for kit in sorted(p for p in staging.iterdir() if p.is_dir() and p.name != CA_FOLDER):
        files = tuple(str(f.relative_to(kit)) for f in sorted(kit.rglob("*")) if f.is_file()
                      and not _same_file(f, out / kit.name / f.relative_to(kit)))
        if files:
            changed[kit.name] = files
    return changed


def _same_file(new: Path, old: Path) -> bool:
    try:
        return old.read_bytes() == new.read_bytes()
    except OSError:  # absent (a new file), or not ours to read
        return False


def _renew_ca(staging: Path, out: Path, project: Project, ca: KeptCa) -> None:
    """Issue the CA's certificate again for its key and name, valid ``validity_days`` from now,
    and put it in every kit under ``out`` (``pki/ca.pem``).

    Every certificate the CA issued still verifies against the new one (same issuer name, same
    key), so nothing is re-issued. Kits shipped before keep trusting the old CA certificate
    until it expires: their ``pki/ca.pem`` must be shipped again by then (the run lists them).
    """
    previous = ca.cert
    name = previous.subject.get_attributes_for_oid(x509.NameOID.COMMON_NAME)[0].value
    _, ca.cert = make_ca(str(name), project.validity, key=ca.key)
    ca.issued.append({"name": CA_FOLDER, "serial": format(ca.cert.serial_number, "x"),
                      "not_after": ca.cert.not_valid_after_utc.isoformat(),
                      "renewed": datetime.datetime.now(datetime.UTC).isoformat(),
                      "previous_not_after": previous.not_valid_after_utc.isoformat()})
    pem = ca.cert.public_bytes(serialization.Encoding.PEM)
    for kit in sorted(out.iterdir()):
        if kit.name != CA_FOLDER and (kit / "pki" / "ca.pem").is_file():
            (staging / kit.name / "pki").mkdir(parents=True, exist_ok=True)
            write_file(staging / kit.name / "pki" / "ca.pem", pem)


def schema_table(path: Path) -> dict[str, Any]:
    """The ``[schema]`` table of ``path`` (a reviewed ``schema draft``), its typed columns
    checked here so that a refusal names this file rather than the project."""
    doc = read_toml(path)
    table = doc.get("schema")
    if not isinstance(table, dict):
        raise ConfigError(f"{path}: no [schema] table (--schema takes schema draft's output, or "
                          "any file with a [schema] table)")
    if "column" in table:
        TabularSchema.from_toml(table, path)
    return table


def _only_site_tables(out: Path, project: Project) -> bool:
    """Whether ``out`` holds nothing but what ``data split --out 'kits/{site}/data'`` writes
    for the project's sites (their ``data/`` folders and the summary): the kits are made
    around them."""
    from noisyanchor.deploy.datasplit import SUMMARY

    sites = set(project.site_names)
    return all((p.name == SUMMARY and p.is_file())
               or (p.name in sites and p.is_dir() and [q.name for q in p.iterdir()] == ["data"])
               for p in out.iterdir())


def check_split_fits(out: Path, project: Project, source: Path) -> None:
    """Refuse kits whose sites' tables, dealt into ``out`` by ``data split`` (its summary names
    their columns and label), the project's ``[schema]`` (from ``source``) cannot read: every
    site would be refused at its upload, and withdraw. Only the operator's summary is read,
    never a site's table (a site's export dialect is its own, set in its kit)."""
    from noisyanchor.deploy.datasplit import SUMMARY

    try:
        summary = json.loads((out / SUMMARY).read_text())
    except (OSError, ValueError):  # no summary (or not data split's): nothing to compare
        return
    columns, label = summary.get("columns"), summary.get("label")
    problem = _misfit(project.schema, columns, label) if columns and label else ""
    if problem:
        first = summary.get("sites", {}).get(project.sites[0].name, {}).get("table", "SITE.csv")
        raise ConfigError(
            f"{out / SUMMARY}: the sites' tables have columns {', '.join(map(repr, columns))} "
            f"and the label {label!r}, but the [schema] of {source} {problem}: every "
            f"site would be refused at its upload. Draft one from a site's table, review it "
            f"and give it: noisyanchor schema draft --data {first} --label {label} --out "
            f"schema.toml, then provision --project {project.path} --schema schema.toml "
            f"--out {out} (nothing was written)")


def _misfit(schema: dict[str, Any] | None, columns: list[str], label: str) -> str:
    """What of ``schema`` a table with the header ``columns`` and the label column ``label``
    does not fit (as a site reads it), else empty."""
    if not schema:
        return ""
    if "column" in schema:
        absent = [c.get("name") for c in schema["column"] if c.get("name") not in columns]
        if absent:
            return f"declares column(s) {', '.join(map(repr, absent))}, which they lack"
        named = schema.get("label", "label")
        return f"names the label {named!r}" if named != label else ""
    # Plain: the sites read the label from 'label' (the kits' label_column), every other
    # column but 'split' as a number.
    if label != "label":
        return "is plain, whose sites read the label from a column 'label'"
    features = len([c for c in columns if c not in (label, "split")])
    want = schema.get("features")
    return (f"is plain, with features = {want} numeric columns besides the label, not "
            f"{features}" if want not in (None, features) else "")


def _not_empty(out: Path) -> str:
    """Why a first run refuses ``out``, and what it accepts."""
    from noisyanchor.deploy.datasplit import SUMMARY

    tables = (out / SUMMARY).is_file() or any((p / "data").is_dir() for p in out.iterdir())
    held = "holds more than the project's sites' tables (data split's output) and no CA" \
        if tables else "is not empty and holds no CA"
    return (f"{out} {held}: provision makes the kits into a new or empty folder, or one "
            f"holding only 'noisyanchor data split ... --out {out}/{{site}}/data' for the "
            "project's [[site]] names; move what else is there away, or choose another --out")


def _renew(staging: Path, out: Path, project: Project, ca: KeptCa, name: str) -> None:
    """Issue ``name``'s certificate again for the key it has (copied kit, new certificate)."""
    kit = out / name
    cert_path = kit / "pki" / f"{name}.pem"
    if not cert_path.is_file():
        raise NotFoundError(f"no kit for {name!r} under {out}")
    _stage_certificates(staging, out, name)
    public = x509.load_pem_x509_certificate(cert_path.read_bytes()).public_key()
    cert = ca.issue(name, public, project, server=name == "analyst")
    write_file(staging / name / "pki" / f"{name}.pem",
               cert.public_bytes(serialization.Encoding.PEM))
    tables = analyst_tables(project) if name == "analyst" else site_tables(project,
                                                                           project.site(name))
    _write_config(staging / name / f"{name}.toml", name, tables)


def _reconfigure_analyst(staging: Path, out: Path, project: Project) -> None:
    kit = out / "analyst"
    if not kit.is_dir():
        raise NotFoundError(f"no analyst kit under {out}")
    _stage_certificates(staging, out, "analyst")
    _write_config(staging / "analyst" / "analyst.toml", "analyst", analyst_tables(project))


def _stage_certificates(staging: Path, out: Path, name: str) -> None:
    """Copy kit ``name``'s certificates into its staged copy (unless staged already), so that
    its new config can be checked; never its key, which stays where it is, whoever owns it
    (a kit given to a container's user)."""
    (staging / name / "pki").mkdir(parents=True, exist_ok=True)
    for file in ("ca.pem", f"{name}.pem"):
        if not (staging / name / "pki" / file).exists():
            shutil.copy2(out / name / "pki" / file, staging / name / "pki" / file)


def sign_request(project_path: Path, csr_path: Path, out: Path | None = None) -> Provisioned:
    """Make (again) the kit of the site a CSR names, with the kept CA: the kit holds the
    certificate and no key (the key stays on the site that made the request)."""
    project = load_project(project_path)
    out = Path(out) if out is not None else project.path.parent / "kits"
    try:
        csr = x509.load_pem_x509_csr(Path(csr_path).read_bytes())
    except (OSError, ValueError) as err:
        raise InvalidInputError(f"cannot read the CSR {csr_path}: {err}") from None
    name = participant_id(csr)  # type: ignore[arg-type]
    site = project.site(name)
    ca = KeptCa.load(out)
    project = settle(project, out, first=False)
    staging = Path(tempfile.mkdtemp(prefix=".provision-", dir=out))
    try:
        with_csr = Site(site.name, site.data, Path(csr_path))
        _site_kit(staging, project, with_csr, ca)
        _check_configs(staging, [name], project, out)
        ca.write(staging)
        changed = _changed_files(staging, out)
        moved = _commit(staging, out)
        # A key made for the site earlier is superseded: the site's own key now belongs to the
        # certificate, and a stale one beside it would only mislead.
        (out / name / "pki" / f"{name}.key").unlink(missing_ok=True)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return Provisioned(out, {p.name: p for p in moved if p.name != "ca"}, project, changed)

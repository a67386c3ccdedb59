"""The container image and compose file, checked without a container engine (none here): the
compose file is valid YAML naming files that exist, every service runs a real noisyanchor
command, and the image installs the wheel and runs as a non-root user. With an engine, the
image is built and its entry point run."""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import tomllib
from pathlib import Path

import pytest
import yaml

from noisyanchor.cli import build_parser
from noisyanchor.deploy.provision import provision

ROOT = Path(__file__).resolve().parents[2]
CONTAINER = ROOT / "deploy" / "container"


@pytest.fixture(scope="module")
def compose() -> dict:
    return yaml.safe_load((CONTAINER / "compose.yaml").read_text())


@pytest.fixture(scope="module")
def kits(tmp_path_factory) -> Path:
    """The kits the compose file mounts, made from its project file."""
    root = tmp_path_factory.mktemp("container")
    shutil.copy(CONTAINER / "federation.toml", root / "federation.toml")
    return provision(root / "federation.toml").out


def test_compose_builds_from_existing_files(compose):
    for service in compose["services"].values():  # each can build the one image it runs
        assert service["build"] == compose["services"]["analyst"]["build"]
        assert service["image"] == compose["services"]["analyst"]["image"]
    build = compose["services"]["analyst"]["build"]
    context = (CONTAINER / build["context"]).resolve()
    assert context == ROOT and (context / build["dockerfile"]).is_file()
    for line in (CONTAINER / "Dockerfile").read_text().splitlines():
        if line.startswith("COPY ") and "--from" not in line:
            for source in line.split()[1:-1]:
                assert (context / source).exists(), source


def _roles(compose: dict) -> dict:
    """The services that run a role (every one but the one-shot ownership step)."""
    return {name: s for name, s in compose["services"].items() if name != "kit-owner"}


def test_every_service_mounts_its_kit_and_runs_a_real_command(compose, kits):
    services = _roles(compose)
    sites = tomllib.loads((CONTAINER / "federation.toml").read_text())["site"]
    assert set(services) == {"analyst", *(s["name"] for s in sites)}
    for name, service in services.items():
        mounts = [v.split(":") for v in service["volumes"]]
        kit = [m for m in mounts if m[1] == "/kit"]
        assert len(kit) == 1 and kit[0][2] == "ro"
        source = (CONTAINER / kit[0][0]).relative_to(CONTAINER / "kits")
        assert (kits / source).is_dir(), f"{name} mounts {kit[0][0]}, which provision does not make"
        argv = service["command"]
        config = Path(argv[argv.index("--config") + 1])
        assert config.parent == Path("/kit") and (kits / source / config.name).is_file()
        build_parser(argv).parse_args(argv)  # a real subcommand with valid options
        for writable in (m for m in mounts if m[1] != "/kit"):  # volumes on folders the kit has
            assert (kits / source / Path(writable[1]).relative_to("/kit")).is_dir()
        assert writable[0] in compose["volumes"]


def test_the_analyst_is_reachable_by_its_service_name_and_probed_for_health(compose, kits):
    from noisyanchor.analyst.config import load_analyst_config
    from noisyanchor.participant.config import load_participant_config

    analyst = load_analyst_config(kits / "analyst" / "analyst.toml")
    check = compose["services"]["analyst"]["healthcheck"]["test"]
    assert check[1:] == ["noisyanchor", "analyst", "health", "--port", str(analyst.health_port)]
    build_parser(check[2:]).parse_args(check[2:])
    assert compose["services"]["analyst"]["ports"] == [f"{analyst.port}:{analyst.port}"]
    site = load_participant_config(kits / "org-a" / "org-a.toml")
    assert site.analyst == f"analyst:{analyst.port}" and site.server_name == "analyst"


def test_the_image_installs_the_wheel_and_runs_as_a_non_root_user():
    text = (CONTAINER / "Dockerfile").read_text()
    bases = re.findall(r"^FROM (\S+)", text, re.MULTILINE)
    assert bases and all(re.fullmatch(r"python:3\.1[1-9]-slim", b) for b in bases)
    assert "pip wheel" in text and re.search(r"pip install [^\n]*\.whl", text)
    user = re.findall(r"^USER (\S+)", text, re.MULTILINE)
    assert user and user[-1] not in ("root", "0")
    entry = re.search(r'^ENTRYPOINT \["(\S+)"\]', text, re.MULTILINE).group(1)
    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    assert entry in scripts  # the console script the wheel installs
    assert shutil.which(entry) is not None  # and it exists once the package is installed
    assert subprocess.run([entry, "--version"], capture_output=True, timeout=60).returncode == 0


def _image_uid() -> int:
    """The uid the image runs as: its USER, made by useradd --uid."""
    text = (CONTAINER / "Dockerfile").read_text()
    user = re.findall(r"^USER (\S+)", text, re.MULTILINE)[-1]
    made = re.search(rf"useradd --uid (\d+) .*\b{user}\b", text)
    assert made, f"the Dockerfile's USER {user} is not made with a fixed uid"
    return int(made.group(1))


def _volume(spec: str) -> tuple[str, str, str]:
    """``(source, mount point, mode)`` of a compose volume (a source may hold ``${VAR:?...}``)."""
    match = re.fullmatch(r"(.*):(/[^:]*)(?::(ro|rw))?", spec)
    assert match, spec
    return match.group(1), match.group(2), match.group(3) or "rw"


def _owner_step(service: dict, root: Path) -> list[str]:
    """The kit-owner service's shell command, as compose passes it ($$ -> $), run on the host
    folder ``root`` that its volumes mount (``./kits/<kit>`` at ``/kits/<kit>``, or one kit's
    folder at ``/kit``)."""
    assert service["user"] == "0:0" and service["entrypoint"] == ["sh", "-c"]
    mounts = [_volume(v)[:2] for v in service["volumes"]]
    top = "/kits" if all(m.startswith("/kits/") for _, m in mounts) else "/kit"
    for host, mount in mounts:  # each host folder appears at the same place under the top
        assert Path(host).name == Path(mount).name or mount == top, (host, mount)
    (command,) = service["command"]
    return ["sh", "-c", command.replace("$$", "$").replace(top, str(root))]


@pytest.mark.parametrize("name", ["compose.yaml", "compose.site.yaml"])
def test_the_kit_owner_step_gives_the_kit_files_to_the_uid_the_roles_run_as(name):
    doc = yaml.safe_load((CONTAINER / name).read_text())
    for service in doc["services"].values():  # the CA's key never enters a container
        assert all(not _volume(v)[0].rstrip("/").endswith(("kits", "kits/ca"))
                   for v in service["volumes"]), service["volumes"]
    uid = _image_uid()
    step = doc["services"]["kit-owner"]
    owners = set(re.findall(r"chown -R (\d+):(\d+)", step["command"][0]))
    assert owners == {(str(uid), str(uid))}
    for role, service in _roles(doc).items():  # each starts after it, as the image's user
        assert service["depends_on"]["kit-owner"] == {
            "condition": "service_completed_successfully"}, role
        assert service.get("user") in (None, str(uid), f"{uid}:{uid}"), role
        assert any(v.endswith(":/kit:ro") for v in service["volumes"]), role


@pytest.mark.skipif(os.geteuid() != 0, reason="giving files to another uid needs root")
def test_after_the_owner_step_the_container_user_reads_exactly_key_and_data(compose, tmp_path):
    shutil.copy(CONTAINER / "federation.toml", tmp_path / "federation.toml")
    kits = provision(tmp_path / "federation.toml").out
    (kits / "org-a" / "data" / "org-a.csv").write_text("f0,label\n1,0\n")
    before = {p: p.stat() for p in kits.rglob("*")}
    subprocess.run(_owner_step(compose["services"]["kit-owner"], kits), check=True, timeout=60)
    uid = _image_uid()
    for path, old in before.items():
        new = path.stat()
        given = (path.suffix == ".key" and path.parent.name == "pki") or "data" in \
            path.relative_to(kits).parts[1:2]
        assert (new.st_uid == uid) == (given and path.parent.parent.name != "ca"), path
        assert new.st_mode == old.st_mode, path  # a key stays 0600: only its owner changed
    assert (kits / "ca" / "ca.key").stat().st_uid == before[kits / "ca" / "ca.key"].st_uid
    site = yaml.safe_load((CONTAINER / "compose.site.yaml").read_text())["services"]
    subprocess.run(_owner_step(site["kit-owner"], kits / "org-b"), check=True, timeout=60)
    assert (kits / "org-b" / "pki" / "org-b.key").stat().st_uid == uid
    # The kits stay the operator's to renew: no key needs reading, the folders are still theirs.
    provision(tmp_path / "federation.toml", renew=("org-a", "analyst"))


def test_a_site_on_its_own_host_reaches_the_analyst_by_name_with_its_shipped_kit(compose):
    doc = yaml.safe_load((CONTAINER / "compose.site.yaml").read_text())
    site = doc["services"]["site"]
    assert site["extra_hosts"] == ["${ANALYST_NAME:?set ANALYST_NAME to the analyst's name on "
                                   "its certificate}:${ANALYST_IP:?set ANALYST_IP to the "
                                   "analyst's address}"]
    argv = [a.replace("${SITE:?set SITE to this site's id}", "org-a") for a in site["command"]]
    assert argv == ["participant", "upload", "--config", "/kit/org-a.toml"]
    build_parser(argv).parse_args(argv)
    assert site["image"] == doc["services"]["kit-owner"]["image"] == \
        "${NOISYANCHOR_IMAGE:-" + compose["services"]["analyst"]["image"] + "}"
    assert "state:/kit/state" in site["volumes"] and "state" in doc["volumes"]


def test_the_guide_says_how_the_image_and_names_reach_other_hosts():
    guide = (ROOT / "deploy" / "README.md").read_text()
    for needed in ("docker save", "docker load", "docker push", "--add-host", "extra_hosts",
                   "compose.site.yaml", "kit-owner", "--user"):
        assert needed in guide, needed


def _engine() -> str | None:
    docker = shutil.which("docker")
    if docker is None:
        return None
    ok = subprocess.run([docker, "info"], capture_output=True, timeout=60).returncode == 0
    return docker if ok else None


@pytest.mark.slow
def test_the_image_builds_and_its_entry_point_runs_where_an_engine_exists():
    docker = _engine()
    if docker is None:
        pytest.skip("no container engine reachable (docker info fails)")
    tag = "noisyanchor:test"
    subprocess.run([docker, "build", "-f", str(CONTAINER / "Dockerfile"), "-t", tag, str(ROOT)],
                   check=True, timeout=1800)
    out = subprocess.run([docker, "run", "--rm", tag, "--version"], capture_output=True,
                         text=True, timeout=300)
    assert out.returncode == 0 and "noisyanchor" in out.stdout
    user = subprocess.run([docker, "run", "--rm", "--entrypoint", "id", tag, "-u"],
                          capture_output=True, text=True, timeout=300)
    assert user.stdout.strip() != "0"


def _guide_commands(text: str, inline: bool) -> list[str]:
    """Every ``noisyanchor`` command line of a guide: in its bash blocks, and (``inline``) in
    inline code that gives options."""
    commands = []
    for block in re.findall(r"```bash\n(.*?)```", text, re.DOTALL):
        for line in block.splitlines():  # commands joined by && | ; & and inside for loops
            for part in re.split(r"&&|\||;|&", line.split(" #")[0]):
                part = part.strip().removeprefix("do ").strip()
                if part.startswith("noisyanchor "):
                    commands.append(part)
    if inline:
        commands += re.findall(r"`(noisyanchor [^`]*--[^`]*)`", text.replace("\n", " "))
    # Not a usage synopsis ("[--option ...]", "upload\|status" in a table).
    return [c for c in commands if " [" not in c and "\\|" not in c]


@pytest.mark.parametrize("guide, inline", [("deploy/README.md", True), ("README.md", False)])
def test_every_command_the_guides_show_is_one_the_cli_takes(guide, inline):
    commands = _guide_commands((ROOT / guide).read_text(), inline)
    assert len(commands) >= 5
    for command in commands:
        argv = shlex.split(command)[1:]
        try:
            build_parser(argv).parse_args(argv)
        except SystemExit:
            pytest.fail(f"{guide} shows a command the CLI refuses: {command}")


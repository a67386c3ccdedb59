"""The container image and compose file, checked without a container engine (none here): the
compose file is valid YAML naming files that exist, every service runs a real noisyanchor
command, and the image installs the wheel and runs as a non-root user. With an engine, the
image is built and its entry point run."""

from __future__ import annotations

import re
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
    build = compose["services"]["analyst"]["build"]
    context = (CONTAINER / build["context"]).resolve()
    assert context == ROOT and (context / build["dockerfile"]).is_file()
    for line in (CONTAINER / "Dockerfile").read_text().splitlines():
        if line.startswith("COPY ") and "--from" not in line:
            for source in line.split()[1:-1]:
                assert (context / source).exists(), source


def test_every_service_mounts_its_kit_and_runs_a_real_command(compose, kits):
    services = compose["services"]
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

"""The container image and compose file, checked without a container engine (none here): the
compose file is valid YAML naming files that exist, every service runs a real noisyanchor
command, and the image installs the wheel and runs as a non-root user. With an engine, the
image is built and its entry point run, and the compose pilot runs to every site's predictions."""

from __future__ import annotations

import csv
import os
import re
import shlex
import shutil
import socket
import subprocess
import tomllib
from pathlib import Path

import pytest
import yaml

from noisyanchor.cli import build_parser
from noisyanchor.deploy.datasplit import read_source, split_table
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


def test_the_kits_provisioned_beside_the_compose_file_stay_out_of_the_image_build():
    # provision writes the kits (the CA's key among them) into the build context's folder.
    ignored = (ROOT / ".dockerignore").read_text().splitlines()
    assert (CONTAINER / "kits").relative_to(ROOT).as_posix() in ignored


def _roles(compose: dict) -> dict:
    """The services that run a role (every one but the one-shot ownership step)."""
    return {name: s for name, s in compose["services"].items() if name != "kit-owner"}


def _sites() -> list[str]:
    return [s["name"] for s in tomllib.loads((CONTAINER / "federation.toml").read_text())["site"]]


def test_every_service_mounts_its_kit_and_runs_a_real_command(compose, kits):
    services = _roles(compose)
    sites = _sites()
    assert set(services) == {"analyst", *sites, *(f"{s}-predict" for s in sites)}
    for name, service in services.items():
        mounts = [_volume(v) for v in service["volumes"]]
        kit = [m for m in mounts if m[1] == "/kit"]
        assert len(kit) == 1 and kit[0][2] == "ro"
        source = (CONTAINER / kit[0][0]).relative_to(CONTAINER / "kits")
        assert (kits / source).is_dir(), f"{name} mounts {kit[0][0]}, which provision does not make"
        argv = service["command"]
        config = Path(argv[argv.index("--config") + 1])
        assert config.parent == Path("/kit") and (kits / source / config.name).is_file()
        build_parser(argv).parse_args(argv)  # a real subcommand with valid options
        for host, point, _ in (m for m in mounts if m[1] != "/kit"):  # on folders the kit has
            inside = Path(point).relative_to("/kit")
            assert (kits / source / inside).is_dir()
            # a volume of the file's, or that same folder of the kit on the host
            assert host in compose["volumes"] or Path(host) == Path(kit[0][0]) / inside


def test_each_site_predicts_the_records_data_split_held_back_into_its_own_kit(compose, tmp_path):
    shutil.copy(CONTAINER / "federation.toml", tmp_path / "federation.toml")
    kits = provision(tmp_path / "federation.toml").out
    sites = _sites()
    split_table(read_source("digits"), sites, str(kits / "{site}" / "data"), holdout=0.1)
    for site in sites:
        service = compose["services"][f"{site}-predict"]
        assert service["profiles"] == ["predict"]  # not started by `up`: after the federation
        argv = service["command"]
        assert argv[:2] == ["participant", "predict"]
        mounts = {point: (host, mode) for host, point, mode in map(_volume, service["volumes"])}
        source = (CONTAINER / mounts["/kit"][0]).relative_to(CONTAINER / "kits")
        new = Path(argv[argv.index("--input") + 1])
        assert (kits / source / new.relative_to("/kit")).is_file(), new  # data split wrote it
        out = Path(argv[argv.index("--out") + 1])
        assert mounts[str(out.parent)][1] == "rw"  # lands on the host, in the site's kit
        upload = compose["services"][site]  # the key the upload kept, in the same volume
        assert [v for v in service["volumes"] if v.endswith(":/kit/state")] == \
            [v for v in upload["volumes"] if v.endswith(":/kit/state")]


def test_the_analyst_is_reachable_by_its_service_name_and_probed_for_health(compose, kits):
    from noisyanchor.analyst.config import load_analyst_config
    from noisyanchor.participant.config import load_participant_config

    analyst = load_analyst_config(kits / "analyst" / "analyst.toml")
    check = compose["services"]["analyst"]["healthcheck"]["test"]
    assert check[1:] == ["noisyanchor", "analyst", "health", "--port", str(analyst.health_port)]
    build_parser(check[2:]).parse_args(check[2:])
    # The host's port from the environment, by default the analyst's own.
    assert compose["services"]["analyst"]["ports"] == [
        f"${{NOISYANCHOR_PORT:-{analyst.port}}}:{analyst.port}"]
    site = load_participant_config(kits / "org-a" / "org-a.toml")
    assert site.analyst == f"analyst:{analyst.port}" and site.server_name == "analyst"


def test_the_network_and_volumes_have_the_fixed_names_the_guide_uses(compose):
    names = {key: volume["name"] for key, volume in compose["volumes"].items()}
    names["default"] = compose["networks"]["default"]["name"]
    # The names compose gives them under the project's name, kept whatever `-p` says.
    assert names == {key: f"{compose['name']}_{key}" for key in names}
    guide = (ROOT / "deploy" / "README.md").read_text()
    used = set(re.findall(rf"{compose['name']}_[\w-]+", guide))
    assert used and used <= set(names.values()), used - set(names.values())


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
    predict = doc["services"]["predict"]  # with the state the upload kept, after `up`
    assert predict["profiles"] == ["predict"] and predict["image"] == site["image"]
    assert predict["extra_hosts"] == site["extra_hosts"]
    assert "state:/kit/state" in predict["volumes"]
    argv = [a.replace("${SITE:?set SITE to this site's id}", "org-a").replace("${SITE}", "org-a")
            for a in predict["command"]]
    assert argv == ["participant", "predict", "--config", "/kit/org-a.toml", "--input",
                    "/kit/data/org-a-new.csv", "--out", "/kit/data/org-a-predictions.csv"]
    build_parser(argv).parse_args(argv)


def test_the_guide_says_how_the_image_and_names_reach_other_hosts():
    guide = (ROOT / "deploy" / "README.md").read_text()
    for needed in ("docker save", "docker load", "docker push", "--add-host", "extra_hosts",
                   "compose.site.yaml", "kit-owner", "--user"):
        assert needed in guide, needed


def _engine() -> str | None:
    """A container engine that answers (docker, else podman), or None."""
    for name in ("docker", "podman"):
        found = shutil.which(name)
        if found and subprocess.run([found, "info"], capture_output=True,
                                    timeout=60).returncode == 0:
            return found
    return None


NO_ENGINE = "no container engine reachable (docker info and podman info fail or are missing)"


@pytest.mark.slow
def test_the_image_builds_and_its_entry_point_runs_where_an_engine_exists():
    docker = _engine()
    if docker is None:
        pytest.skip(NO_ENGINE)
    tag = "noisyanchor:test"
    subprocess.run([docker, "build", "-f", str(CONTAINER / "Dockerfile"), "-t", tag, str(ROOT)],
                   check=True, timeout=1800)
    out = subprocess.run([docker, "run", "--rm", tag, "--version"], capture_output=True,
                         text=True, timeout=300)
    assert out.returncode == 0 and "noisyanchor" in out.stdout
    user = subprocess.run([docker, "run", "--rm", "--entrypoint", "id", tag, "-u"],
                          capture_output=True, text=True, timeout=300)
    assert user.stdout.strip() != "0"


def _compose_command(engine: str) -> list[str] | None:
    """The compose front end of ``engine``: ``docker compose``, or ``podman-compose`` (one with
    profiles: 1.1 or later), or None."""
    if Path(engine).name == "docker":
        ok = subprocess.run([engine, "compose", "version"], capture_output=True,
                            timeout=60).returncode == 0
        return [engine, "compose"] if ok else None
    found = shutil.which("podman-compose")
    return [found] if found else None


def _compose_for_test(project: str) -> dict:
    """compose.yaml under its own project, image tag, network and volume names (an operator's
    pilot on the same host keeps its own), building from this repository wherever it is written."""
    doc = yaml.safe_load((CONTAINER / "compose.yaml").read_text())
    doc["name"] = project
    for service in doc["services"].values():
        service["image"] = "noisyanchor:test"
        service["build"]["context"] = str(ROOT)
    for key, volume in doc["volumes"].items():
        volume["name"] = f"{project}_{key}"
    doc["networks"]["default"]["name"] = f"{project}_default"
    return doc


@pytest.mark.e2e
@pytest.mark.slow
@pytest.mark.container
def test_the_compose_pilot_runs_to_every_sites_predictions_where_an_engine_exists(tmp_path):
    engine = _engine()
    if engine is None:
        pytest.skip(NO_ENGINE)
    front = _compose_command(engine)
    if front is None:
        pytest.skip(f"{engine} answers but has no compose front end (docker compose, "
                    "podman-compose)")
    shutil.copy(CONTAINER / "federation.toml", tmp_path / "federation.toml")
    kits = provision(tmp_path / "federation.toml").out
    sites = _sites()
    split_table(read_source("digits"), sites, str(kits / "{site}" / "data"), holdout=0.1)
    project = f"noisyanchor-test-{os.getpid()}"
    doc = _compose_for_test(project)
    (tmp_path / "compose.yaml").write_text(yaml.safe_dump(doc))
    compose = [*front, "-f", str(tmp_path / "compose.yaml"), "-p", project]
    with socket.socket() as s:  # the host's port from the environment: any free one
        s.bind(("127.0.0.1", 0))
        env = {**os.environ, "NOISYANCHOR_PORT": str(s.getsockname()[1])}

    def run(*argv: str, timeout: float) -> subprocess.CompletedProcess:
        return subprocess.run([*compose, *argv], capture_output=True, text=True, env=env,
                              timeout=timeout, cwd=tmp_path)

    try:
        up = run("up", "-d", "--build", timeout=3600)
        assert up.returncode == 0, (up.stdout + up.stderr)[-4000:]
        status = run("exec", "-T", "analyst", "noisyanchor", "analyst", "status", "--config",
                     "/kit/analyst.toml", "--wait", timeout=1800)
        assert status.returncode == 0 and ": done" in status.stdout, \
            (status.stdout + status.stderr)[-4000:]
        for site in sites:
            done = run("--profile", "predict", "run", "--rm", f"{site}-predict", timeout=600)
            assert done.returncode == 0, (done.stdout + done.stderr)[-4000:]
            data = kits / site / "data"
            with (data / f"{site}-new-labels.csv").open(newline="") as fh:
                truth = [row["label"] for row in csv.DictReader(fh)]
            with (data / f"{site}-predictions.csv").open(newline="") as fh:
                predicted = [row["label"] for row in csv.DictReader(fh)]
            assert len(predicted) == len(truth) > 0  # one prediction per held-back record
            # Digits, ten classes (chance 0.1); the federation's model scores ~0.9 held out.
            right = sum(p == t for p, t in zip(predicted, truth, strict=True))
            assert right / len(truth) > 0.7, (site, right / len(truth))
    finally:
        run("--profile", "predict", "down", "-v", timeout=600)
        # Whatever `down` left (podman-compose 1.6 once kept a failed run's volumes and network).
        volumes = [v["name"] for v in doc["volumes"].values()]
        subprocess.run([engine, "volume", "rm", "-f", *volumes], capture_output=True, timeout=300)
        subprocess.run([engine, "network", "rm", doc["networks"]["default"]["name"]],
                       capture_output=True, timeout=300)


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


"""What an operator sees and changes in a federation's kits (issue 25): the one-host template
that provisions as it is, relative deadlines, the refused past deadline, and values chosen once
(ports, deadline) that later runs keep."""

from __future__ import annotations

import datetime as dt
import socket
from pathlib import Path

import pytest

from noisyanchor import deploy
from noisyanchor.analyst.config import load_analyst_config
from noisyanchor.common.errors import ConfigError
from noisyanchor.deploy.provision import free_port, load_project, provision
from noisyanchor.participant.config import load_participant_config

TEMPLATES = Path(deploy.__file__).parent / "templates"
CONTAINER = Path(deploy.__file__).parent / "container"
LOCAL = TEMPLATES / "federation-local.toml"


def _copy(src: Path, tmp_path: Path, *replace: tuple[str, str]) -> Path:
    text = src.read_text()
    for old, new in replace:
        assert old in text, old
        text = text.replace(old, new, 1)
    path = tmp_path / "federation.toml"
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

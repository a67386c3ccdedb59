"""The README's one-host quick start, run as written and counted (its end-to-end test runs it).

The quick start is the first ``bash`` block under the README heading :data:`HEADING`; every line
of it that is neither blank nor a comment is one command, as an operator types it (a ``for``
loop over the three sites is one line, one command). :func:`run_quickstart` runs the lines in
order with ``bash -e`` in a folder of its own where ``deploy`` points at this package's folder,
so the README's relative paths hold; commands sent to the background (``&``) keep running until
the block ends, and then every process the block started is stopped. The first command
(``pip install``) is counted and only run when asked: the installed package runs the rest.
Another walk (``deploy/README.md``'s pilot on one's own table, :data:`OWN_TABLE_HEADING`) is
counted and run the same way, from its heading.
"""

from __future__ import annotations

import os
import re
import shlex
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from noisyanchor.common.errors import NotFoundError
from noisyanchor.deploy.launch import child_env

#: The README heading whose first bash block is the quick start.
HEADING = "## A pilot between organisations, quick start"

#: The deploy/README.md heading whose first bash block walks a pilot on the operator's own table.
OWN_TABLE_HEADING = "### Your own table"

#: The package installer's command, the block's first line.
INSTALL = "pip install"


def quickstart_commands(readme: Path, heading: str = HEADING) -> list[str]:
    """The command lines of the first bash block under ``heading`` (the README's quick start),
    comments stripped."""
    text = Path(readme).read_text()
    start = text.find(heading)
    block = re.search(r"```bash\n(.*?)```", text[start:], re.DOTALL) if start >= 0 else None
    if block is None:
        raise NotFoundError(f"{readme} has no bash block under {heading!r}")
    lines = (re.sub(r"\s+#\s.*$", "", ln).strip() for ln in block.group(1).splitlines())
    return [ln for ln in lines if ln and not ln.startswith("#")]


@dataclass(frozen=True)
class QuickstartRun:
    """Outcome of :func:`run_quickstart`: the commands, the shell's exit status, the time from
    the first to the end of the last, and everything the commands printed."""

    root: Path
    commands: list[str]
    returncode: int
    seconds: float
    output: str


def run_quickstart(root: Path, readme: Path, *, install: bool = False,
                   timeout: float = 900.0, commands: list[str] | None = None, first: int = 1,
                   name: str = "quickstart") -> QuickstartRun:
    """Run the quick start of ``readme`` in ``root`` (see the module docstring).

    ``install``: run the ``pip install`` line too, in the README's folder (the repository);
    otherwise it is only counted. The block is stopped after ``timeout`` seconds.
    ``commands``: these lines instead (part of a block, numbered from ``first``: a walk run in
    parts, with the world changing between them), in ``<name>.sh``, printing to ``<name>.log``.
    """
    root = Path(root)
    root.mkdir(parents=True, exist_ok=True)
    commands = quickstart_commands(readme) if commands is None else commands
    if not (root / "deploy").exists():
        (root / "deploy").symlink_to(Path(__file__).resolve().parent, target_is_directory=True)
    script = ["set -e"]
    for i, command in enumerate(commands, first):
        shown = f"== {i}: {command}"
        if command.startswith(INSTALL):
            if not install:
                script.append(f"echo {shlex.quote(shown + ' (installed already: not run)')}")
                continue
            command = f"(cd {shlex.quote(str(Path(readme).resolve().parent))} && {command})"
        script += [f"echo {shlex.quote(shown)}", command]
    (root / f"{name}.sh").write_text("\n".join(script) + "\n")
    log = root / f"{name}.log"
    begin = time.monotonic()
    with open(log, "wb") as out:
        # A session of its own: the background commands are stopped with the block.
        proc = subprocess.Popen(["bash", f"{name}.sh"], cwd=root, stdout=out,
                                stderr=subprocess.STDOUT, env=child_env(),
                                start_new_session=True)
        try:
            code = proc.wait(timeout)
        except subprocess.TimeoutExpired:
            code = -1
        finally:
            seconds = time.monotonic() - begin
            _stop_session(proc.pid)
    return QuickstartRun(root, commands, code, seconds, log.read_text(errors="replace"))


def _stop_session(pgid: int, grace: float = 10.0) -> None:
    """SIGTERM to the block's process group (the analyst stops within seconds), SIGKILL to
    whatever is left after ``grace`` seconds."""
    try:
        os.killpg(pgid, signal.SIGTERM)
    except ProcessLookupError:
        return
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline:
        try:
            os.killpg(pgid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.1)
    try:
        os.killpg(pgid, signal.SIGKILL)
    except ProcessLookupError:
        pass

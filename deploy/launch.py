"""Writing configs and starting role processes: shared by ``noisyanchor demo`` and the
end-to-end tests.

Every process is ``sys.executable -m noisyanchor ...`` with one BLAS thread (several processes
share few cores; OpenBLAS threads busy-wait under contention).
"""

from __future__ import annotations

import datetime
import json
import os
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from noisyanchor.common.errors import PreconditionError


def _toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, datetime.datetime):  # TOML offset date-time
        return value.isoformat()
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, list | tuple):
        return "[" + ", ".join(_toml_value(v) if isinstance(v, bool | int | float)
                               else json.dumps(str(v)) for v in value) + "]"
    return json.dumps(str(value))


def toml_text(tables: Mapping[str, Mapping[str, Any]]) -> str:
    """TOML for tables of strings, numbers, booleans, date-times, paths and lists of them; a
    list of tables (``column = [{...}, ...]`` under ``schema``) becomes ``[[schema.column]]``.

    Hand-written because the standard library reads TOML but does not write it; JSON string
    escapes are valid TOML basic strings. ``None`` values are left out.
    """
    lines: list[str] = []
    for name, table in tables.items():
        lines.append(f"[{name}]")
        nested = {k: v for k, v in table.items()
                  if isinstance(v, list) and v and all(isinstance(t, Mapping) for t in v)}
        for key, value in table.items():
            if value is not None and key not in nested:
                lines.append(f"{key} = {_toml_value(value)}")
        lines.append("")
        for key, entries in nested.items():
            for entry in entries:
                lines.append(f"[[{name}.{key}]]")
                lines += [f"{k} = {_toml_value(v)}" for k, v in entry.items() if v is not None]
                lines.append("")
    return "\n".join(lines)


def write_toml(path: Path, tables: Mapping[str, Mapping[str, Any]]) -> Path:
    """Write :func:`toml_text` of ``tables`` to ``path``."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(toml_text(tables))
    return path


def child_env() -> dict[str, str]:
    """Environment of a child process: one BLAS thread, unbuffered output.

    Children run ``sys.executable -m noisyanchor``, so they import the same installed package.
    """
    env = dict(os.environ)
    env.update(OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1", PYTHONUNBUFFERED="1")
    return env


def start(args: Sequence[str], log_path: Path) -> subprocess.Popen:
    """Start ``noisyanchor ARGS`` as a separate OS process, output to ``log_path``."""
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with open(log_path, "wb") as log:
        return subprocess.Popen([sys.executable, "-m", "noisyanchor", *map(str, args)],
                                stdout=log, stderr=subprocess.STDOUT, env=child_env())


def wait_for_port(port_file: Path, proc: subprocess.Popen, timeout: float = 60.0) -> int:
    """The port an analyst wrote to ``port_file`` once listening (bounded wait)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if port_file.is_file():
            text = port_file.read_text().strip()
            if text:
                return int(text)
        if proc.poll() is not None:
            raise PreconditionError(f"the analyst exited with status {proc.returncode} before "
                                    "listening")
        time.sleep(0.05)
    raise PreconditionError(f"the analyst did not listen within {timeout:g} s")


def stop(proc: subprocess.Popen, timeout: float = 10.0) -> None:
    """Terminate ``proc`` (SIGTERM, then SIGKILL after ``timeout``) and reap it."""
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()

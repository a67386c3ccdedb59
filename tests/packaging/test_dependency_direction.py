"""Dependencies point toward ``common/``: a test fails when a forbidden import arrow appears.

Every ``import``/``from`` statement of every module is read (function-level imports included),
so a lazy import cannot hide an arrow. Allowed targets per folder:

* ``common`` and ``protos``: the shared layer; ``common`` may use the generated wire code.
* ``participant`` and ``analyst``: ``common``, ``protos`` and themselves, never each other,
  ``experiments`` or ``deploy``.
* ``experiments``, ``deploy`` and the ``noisyanchor`` CLI sit on top and may import any role.
"""

from __future__ import annotations

import ast
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SHARED = {"common", "protos"}
ALLOWED = {
    "protos": {"protos"},
    "common": SHARED,
    "participant": SHARED | {"participant"},
    "analyst": SHARED | {"analyst"},
}


def _folders() -> dict[str, Path]:
    """Top-level package name under ``noisyanchor`` -> its folder, from pyproject."""
    mapping = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"][
        "package-dir"]
    return {name.split(".")[1]: ROOT / folder for name, folder in mapping.items()
            if name.count(".") == 1}


def _imported_roles(path: Path) -> set[str]:
    """Second components of every ``noisyanchor.X...`` module that ``path`` imports."""
    roles = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                 else [node.module or ""] if isinstance(node, ast.ImportFrom) and not node.level
                 else [])
        for name in names:
            parts = name.split(".")
            if parts[0] == "noisyanchor" and len(parts) > 1:
                roles.add(parts[1])
            if isinstance(node, ast.ImportFrom) and name == "noisyanchor":
                roles.update(a.name for a in node.names)
    return roles


@pytest.mark.parametrize("role", sorted(ALLOWED))
def test_role_imports_only_what_it_may(role):
    folder = _folders()[role]
    bad = {str(p.relative_to(ROOT)): sorted(r - ALLOWED[role])
           for p in folder.rglob("*.py") if (r := _imported_roles(p)) - ALLOWED[role]}
    assert not bad, f"forbidden imports from {role}/: {bad}"


def test_the_checker_sees_lazy_and_from_imports(tmp_path):
    mod = tmp_path / "m.py"
    mod.write_text("def f():\n    from noisyanchor.analyst import federation\n"
                   "from noisyanchor import experiments\nimport noisyanchor.participant.run\n")
    assert _imported_roles(mod) == {"analyst", "experiments", "participant"}

"""The protocol core is free of any transport: no module it imports, directly or through other
noisyanchor modules, imports ``grpc``, the protobuf runtime or the generated code
(``noisyanchor.protos``). Read from the import graph of the source (function-level imports
included, as the direction test reads it), so a lazy import cannot hide an arrow.
"""

from __future__ import annotations

import ast
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

#: The core's modules (issue 32): the analyst's, the site's and the messages both share.
CORE = ("noisyanchor.analyst.core", "noisyanchor.participant.core",
        "noisyanchor.common.bundles", "noisyanchor.common.protocol_messages")

#: Imports the core must never reach.
FORBIDDEN = ("grpc", "google.protobuf", "noisyanchor.protos")


def _package_dirs() -> dict[str, Path]:
    mapping = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"][
        "package-dir"]
    return {name: ROOT / folder for name, folder in mapping.items()}


PACKAGES = _package_dirs()


def _source(module: str) -> Path | None:
    """The file of noisyanchor module ``module`` (None: not one of ours)."""
    package = max((p for p in PACKAGES if module == p or module.startswith(p + ".")),
                  key=len, default=None)
    if package is None:
        return None
    base = PACKAGES[package].joinpath(*module[len(package):].split(".")[1:])
    for path in (base.with_suffix(".py"), base / "__init__.py"):
        if path.is_file():
            return path
    return None


def _imports(path: Path) -> set[str]:
    """Every module ``path`` imports (``from a import b`` counts ``a`` and ``a.b``)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
            found.add(node.module)
            found.update(f"{node.module}.{a.name}" for a in node.names)
    return found


def _forbidden_chains(start: str) -> list[str]:
    """``"x <- y <- start"`` for every forbidden import reachable from ``start``."""
    parent: dict[str, str] = {}
    todo, seen, bad = [start], {start}, []
    while todo:
        module = todo.pop()
        source = _source(module)
        for name in sorted(_imports(source) if source else ()):
            if any(name == f or name.startswith(f + ".") for f in FORBIDDEN):
                chain = [name, module]
                while chain[-1] in parent:
                    chain.append(parent[chain[-1]])
                bad.append(" <- ".join(chain))
            elif name.startswith("noisyanchor.") and name not in seen and _source(name):
                seen.add(name)
                parent[name] = module
                todo.append(name)
    return bad


def _core_modules() -> list[str]:
    modules = []
    for name in CORE:
        source = _source(name)
        assert source is not None, f"core module {name} is missing"
        if source.name == "__init__.py":
            modules += [f"{name}.{p.stem}" if p.stem != "__init__" else name
                        for p in sorted(source.parent.glob("*.py"))]
        else:
            modules.append(name)
    return modules


@pytest.mark.parametrize("module", _core_modules())
def test_the_core_imports_no_transport(module):
    assert not _forbidden_chains(module), (
        f"{module} reaches a transport: " + "; ".join(_forbidden_chains(module)))


def test_the_checker_follows_imports_through_other_modules():
    # The gRPC adapter reaches the generated code through common.wire_messages.
    assert any("noisyanchor.protos" in chain and "noisyanchor.common.wire_messages" in chain
               for chain in _forbidden_chains("noisyanchor.analyst.storage"))
    assert any(chain.startswith("grpc <- noisyanchor.analyst.service")
               for chain in _forbidden_chains("noisyanchor.analyst.service"))

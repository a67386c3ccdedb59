"""The package installs under one import name, ``noisyanchor``, from the top-level folders.

The role folders (``common/``, ``analyst/``, ...) stay at the top of the repository and are mapped
to ``noisyanchor.<folder>`` by pyproject's ``package-dir``. A wheel must hold nothing else at its
top level, so a user's own ``common`` package cannot clash with ours.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _setuptools_table() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    """A wheel built from a copy of the working tree (no build isolation: offline and quick).

    The copy leaves out build folders, so no stale file of an earlier build can slip in.
    """
    src, out = tmp_path_factory.mktemp("src") / "noisyanchor", tmp_path_factory.mktemp("wheel")
    shutil.copytree(ROOT, src, ignore=shutil.ignore_patterns(
        ".git", "build", "dist", "*.egg-info", "__pycache__", ".*_cache", "runs", ".venv"))
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation",
                    "--quiet", "-w", str(out), str(src)], check=True, timeout=300)
    (path,) = out.glob("noisyanchor-*.whl")
    return path


def test_every_package_folder_is_mapped_and_listed():
    table = _setuptools_table()
    mapping, listed = table["package-dir"], set(table["packages"])
    assert set(mapping) == listed
    for name, folder in mapping.items():
        assert (ROOT / folder / "__init__.py").is_file(), f"{name} -> {folder} has no __init__.py"
        for sub in (ROOT / folder).iterdir():
            if (sub / "__init__.py").is_file():
                assert f"{name}.{sub.name}" in listed, f"{sub} is not installed"


def test_wheel_has_one_top_level_name(wheel):
    names = zipfile.ZipFile(wheel).namelist()
    top = {n.split("/")[0] for n in names if not n.split("/")[0].endswith((".dist-info", ".data"))}
    assert top == {"noisyanchor"}
    # What the code reads at run time ships with it: templates, configs, the proto sources.
    for needed in ("noisyanchor/deploy/templates/analyst.toml",
                   "noisyanchor/experiments/configs/digits.toml",
                   "noisyanchor/analyst/status_page.html",
                   "noisyanchor/protos/v1/analyst.proto", "noisyanchor/protos/v1/release.proto",
                   "noisyanchor/protos/generate.py", "noisyanchor/protos/v1/analyst_pb2.pyi",
                   "noisyanchor/py.typed"):
        assert needed in names


def test_wheel_install_imports_beside_a_users_own_common_package(wheel, tmp_path):
    site = tmp_path / "site"
    subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--target",
                    str(site), str(wheel)], check=True, timeout=300)
    user = tmp_path / "user"
    (user / "common").mkdir(parents=True)
    (user / "common" / "__init__.py").write_text("MINE = True\n")
    code = ("import common, noisyanchor.common.gdp as g, noisyanchor.protos.v1.release_pb2_grpc; "
            "import noisyanchor.cli; assert common.MINE; print(g.__file__)")
    out = subprocess.run([sys.executable, "-c", code], cwd=user, capture_output=True, text=True,
                         env={"PYTHONPATH": f"{user}:{site}", "PATH": ""}, timeout=120)
    assert out.returncode == 0, out.stderr
    assert Path(out.stdout.strip()).is_relative_to(site)


def test_version_flag_prints_the_package_version():
    from noisyanchor import __version__

    out = subprocess.run([sys.executable, "-m", "noisyanchor", "--version"], capture_output=True,
                         text=True, timeout=60)
    assert out.returncode == 0 and out.stdout.strip() == f"noisyanchor {__version__}"
    meta = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert meta["version"] == __version__
    assert (ROOT / "LICENSE").read_text().lstrip().startswith("Apache License")
    assert "Apache-2.0" in str(meta["license"])

"""One protocol, two transports (issue 32): the same 3-site federation (same seeds, same data)
over noisyanchor's gRPC service (processes over mutual TLS) and over the Flower app on Flower's
simulation engine (Ray) gives the same ``Z``, the same model and the same predictions at every
site; after the Flower run, ``participant predict`` runs offline as a process on what the
ClientApp kept. Ray leaves no process behind."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("flwr")

from noisyanchor.common.models.container import load_arrays
from noisyanchor.deploy.demo import run_demo

pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.extended]

P, SEED = 3, 5

#: Relative tolerance of every comparison (issue 32: ``Z`` and the model to 1e-12).
RTOL = 1e-12


def _descendants(pid: int) -> list[int]:
    """Every live process below ``pid`` (from /proc)."""
    parents: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                parents[int(entry.name)] = int((entry / "stat").read_text().rsplit(")", 1)[1]
                                               .split()[1])
            except (OSError, IndexError, ValueError):
                continue
    found, frontier = [], [pid]
    while frontier:
        kids = [c for c, p in parents.items() if p in frontier]
        found += kids
        frontier = kids
    return found


def _close(a: np.ndarray, b: np.ndarray) -> bool:
    scale = max(float(np.max(np.abs(a))), np.finfo(float).tiny)
    return a.shape == b.shape and float(np.max(np.abs(a - b))) <= RTOL * scale


def _same_arrays_file(a: Path, b: Path, fmt: str) -> None:
    left, right = load_arrays(a.read_bytes(), fmt), load_arrays(b.read_bytes(), fmt)
    assert set(left.arrays) == set(right.arrays), (a, b)
    for name, array in left.arrays.items():
        if array.dtype.kind == "f":
            assert _close(array, right.arrays[name]), f"{a.name}: {name}"
        else:
            assert np.array_equal(array, right.arrays[name]), f"{a.name}: {name}"


def test_grpc_and_flower_give_the_same_z_model_and_predictions(tmp_path):
    before = set(_descendants(os.getpid()))
    grpc = run_demo(participants=P, colluder=None, seed=SEED, workdir=tmp_path / "grpc")
    flower = run_demo(participants=P, colluder=None, seed=SEED, workdir=tmp_path / "flower",
                      transport="flower")
    assert flower["transport"] == "flower" and flower["z_matches_inprocess"]
    result = {name: Path(s["folder"]) / "store" / "result" for name, s in
              (("grpc", grpc), ("flower", flower))}
    for name in ("z.npy", "rotations.npy", "means.npy"):
        assert _close(np.load(result["grpc"] / name), np.load(result["flower"] / name)), name
    for name in ("labels.npy", "tags.npy"):
        assert np.array_equal(np.load(result["grpc"] / name), np.load(result["flower"] / name))
    _same_arrays_file(result["grpc"] / "downstream.model", result["flower"] / "downstream.model",
                      "noisyanchor.model")
    for pid in grpc["sites"]:
        for folder in ("grpc", "flower"):  # each site's kept model is its part of the result
            kept = tmp_path / folder / "state" / pid / "site-model.bin"
            assert kept.read_bytes() == (result[folder] / f"site-{pid}.model").read_bytes()
        _same_arrays_file(result["grpc"] / f"site-{pid}.model",
                          result["flower"] / f"site-{pid}.model", "noisyanchor.site-model")
        assert np.array_equal(np.loadtxt(tmp_path / "grpc" / "predictions" / f"{pid}.csv",
                                         delimiter=",", skiprows=1),
                              np.loadtxt(tmp_path / "flower" / "predictions" / f"{pid}.csv",
                                         delimiter=",", skiprows=1))
        assert grpc["sites"][pid]["federation"] == flower["sites"][pid]["federation"]
    # A real `participant predict` process on the Flower run's state folder: no analyst runs.
    out = tmp_path / "p1-offline.csv"
    subprocess.run([sys.executable, "-m", "noisyanchor", "participant", "predict", "--config",
                    str(tmp_path / "flower" / "p1.toml"), "--input",
                    str(tmp_path / "flower" / "new" / "p1.csv"), "--out", str(out)],
                   check=True, timeout=120, capture_output=True)
    assert out.read_bytes() == (tmp_path / "flower" / "predictions" / "p1.csv").read_bytes()
    # Ray's processes (GCS, raylet, workers) are gone once the simulation returned.
    deadline = time.monotonic() + 30
    while (left := set(_descendants(os.getpid())) - before) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert not left, [Path(f"/proc/{p}/cmdline").read_bytes()[:80] for p in left]

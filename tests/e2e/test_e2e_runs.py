"""Whole runs as separate processes over mutual TLS (``noisyanchor demo``): the collaboration
matrix equals the in-process simulator's, the analyst's store never holds the anchor in honest
runs, and the colluder's attack reconstructs what the engine says it can."""

from __future__ import annotations

import json
import stat
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from noisyanchor.analyst.storage import read_bundle
from noisyanchor.common.gdp import anchor_from_seed
from noisyanchor.common.json_vocabulary import problems
from noisyanchor.common.methods import Method
from noisyanchor.deploy.demo import run_demo
from noisyanchor.deploy.launch import child_env
from noisyanchor.experiments.simulate import SimulationConfig, prepare

pytestmark = pytest.mark.e2e

P, DIM, SEED = 3, 16, 7


def anchor_traces(store: Path, seed: bytes, anchor: np.ndarray) -> list[str]:
    """Where the store holds the anchor seed or the anchor ``A``; empty when it holds neither.

    Checks every file byte for byte (the seed, its hex, the raw bytes of rows of ``A``) and
    every stored array of shape ``(r, d)`` against ``A`` (tolerance 1e-6).
    """
    found = []
    needles = [seed, seed.hex().encode(), anchor[0].tobytes(), anchor[-1].tobytes()]
    for path in sorted(p for p in store.rglob("*") if p.is_file()):
        raw = path.read_bytes()
        if any(n in raw for n in needles):
            found.append(f"{path.relative_to(store)}: bytes")
        arrays = []
        if path.suffix == ".bundle":
            arrays = list(read_bundle(path, root=path.parent)[1].values())
        elif path.suffix == ".npy":
            arrays = [np.load(path)]
        for arr in arrays:
            if arr.shape == anchor.shape and np.allclose(arr, anchor, atol=1e-6):
                found.append(f"{path.relative_to(store)}: array")
    return found


def _secrets(method: str, sigma: float, v: float, colluder) -> tuple[bytes, np.ndarray]:
    fed = prepare(SimulationConfig(method=method, participants=P, dim=DIM, sigma=sigma, v=v,
                                   colluder=colluder, seed=SEED, utility=False))
    return fed.shared_seed, anchor_from_seed(fed.shared_seed, fed.r, fed.d)


def _check_honest_run(s: dict, root: Path, method: str, sigma: float, v: float) -> None:
    """A demo run without a colluder (summary ``s``, folder ``root``) matches the simulator and
    leaves neither the anchor nor anyone's secrets on disk."""
    assert s["z_matches_inprocess"] and s["z_max_rel_diff"] <= 1e-12
    # The analyst, every site's upload and every site's prediction of its held-back records.
    assert len(s["pids"]) == 2 * P + 1 and len(set(s["pids"].values())) == 2 * P + 1
    assert s["attacks"] == {} and s["tls"]["mutual"]
    assert s["solver"]["name"] == ("gopp" if method == "aa-igdp-an" else "procrustes")
    assert 0.5 < s["utility"]["balanced_accuracy"] <= 1.0
    assert anchor_traces(root / "store", *_secrets(method, sigma, v, None)) == []
    assert not list(root.rglob("secrets.npz"))  # nobody was told to keep secrets


# aa-igdp-an (anchor noise, the default method) runs through the demo command below.
@pytest.mark.parametrize("method, sigma, v", [("aa-igdp", 0.0, 0.0), ("aa-igdp-pn", 0.1, 0.0)])
def test_honest_run_matches_the_simulator_and_never_stores_the_anchor(tmp_path, method, sigma,
                                                                      v):
    s = run_demo(participants=P, method=method, sigma=sigma, v=v, dim=DIM, colluder=None,
                 seed=SEED, workdir=tmp_path)
    _check_honest_run(s, tmp_path, method, sigma, v)


@pytest.mark.slow  # two whole demos with a colluder's disclosure and the attack
@pytest.mark.extended
@pytest.mark.parametrize("method, attack", [("aa-igdp", "known_anchor"), ("c-gdp", "known_secret")])
def test_colluder_run_discloses_and_the_attack_inverts_noiseless_uploads(tmp_path, method,
                                                                         attack):
    s = run_demo(participants=P, method=method, dim=DIM, v=0.0, colluder=0, seed=SEED,
                 workdir=tmp_path)
    assert s["z_matches_inprocess"]
    assert {"p0-collude", "attack"} <= set(s["pids"])
    kept = [p.relative_to(tmp_path) for p in tmp_path.rglob("secrets.npz")]
    assert kept == [Path("state/p0/secrets.npz")]  # only the colluder keeps its secrets
    assert stat.S_IMODE((tmp_path / kept[0]).stat().st_mode) == 0o600  # readable by owner only
    assert set(s["attacks"][attack]["per_target"]) == {"p1", "p2"}
    assert s["attacks"][attack]["relative_error"] < 1e-9  # exact up to rounding without noise
    traces = anchor_traces(tmp_path / "store", *_secrets(method, 0.0, 0.0, 0))
    if method == "aa-igdp":  # the disclosure carries A: the inspection must see it
        assert traces == ["disclosures/p0.bundle: bytes", "disclosures/p0.bundle: array"]
    else:  # C-GDP has no anchor; its common key is disclosed instead
        assert traces == []


def test_demo_command_prints_the_pinned_summary_keys_and_names_its_folder(tmp_path):
    out = subprocess.run([sys.executable, "-m", "noisyanchor", "demo", "--participants", "3",
                          "--dim", "8", "--seed", "3", "--json"], capture_output=True, text=True,
                         timeout=600, check=True, env=child_env(), cwd=tmp_path)
    s = json.loads(out.stdout)
    assert not problems(s)  # the --json vocabulary (tests/cli/test_json_vocabulary.py)
    for key in ("participants", "tls", "pids", "z_matches_inprocess", "attacks", "utility",
                "seconds"):
        assert key in s
    assert s["participants"] == 3 and s["z_matches_inprocess"] is True
    assert set(s["pids"]) == {"analyst", "p0", "p1", "p2", "p0-collude", "attack",
                              "p0-predict", "p1-predict", "p2-predict"}
    # default: colluder p0; the paper's attacks and the corrected estimators (issue 12)
    assert set(s["attacks"]) == set(Method.AA_IGDP_AN.attacks) >= {"known_anchor", "mp", "op",
                                                                   "am"}
    assert s["seconds"] < 600
    # The results stay in a new folder under the working directory, named in the summary.
    folder = Path(s["folder"])
    assert folder.parent == tmp_path and folder.name.startswith("noisyanchor-demo-")
    for name in ("summary.md", "summary.json", "fig_sites.png", "fig_attacks.png"):
        assert (folder / name).is_file(), name
    assert json.loads((folder / "summary.json").read_text())["sites"] == s["sites"]
    for pid, site in s["sites"].items():  # every site predicted records it never uploaded
        assert site["held_back"] > 0 and 0.5 < site["federation"]["held_back_accuracy"] <= 1
        assert (folder / "predictions" / f"{pid}.csv").is_file()
    text = (folder / "summary.md").read_text()
    assert "| p1 |" in text and "**op**: error" in text


def test_demo_text_ends_with_its_folder_and_its_honest_run_never_stores_the_anchor(tmp_path):
    """The demo command's text; the honest anchor-noise run it made is checked as the other
    honest runs are (one run for both: each demo starts 2p + 1 processes)."""
    here = tmp_path / "here"
    out = subprocess.run([sys.executable, "-m", "noisyanchor", "demo", "--participants", str(P),
                          "--method", "aa-igdp-an", "--sigma", "0", "--v", "0.02", "--dim",
                          str(DIM), "--colluder", "-1", "--seed", str(SEED), "--workdir", here],
                         capture_output=True, text=True, timeout=600, check=True,
                         env=child_env(), cwd=tmp_path)
    lines = out.stdout.strip().splitlines()
    assert lines[-1].startswith(f"results in {here} (summary.json, summary.md, fig_sites.png)")
    assert sum(line.startswith("site p") and "records it never uploaded" in line
               for line in lines) == P
    _check_honest_run(json.loads((here / "summary.json").read_text()), here, "aa-igdp-an", 0.0,
                      0.02)

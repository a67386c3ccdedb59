"""``noisyanchor simulate`` end to end on the bundled digits data."""

import json
import subprocess
import sys

import numpy as np
import pytest

from noisyanchor.common.methods import Method
from noisyanchor.experiments.simulate import SimulationConfig, simulate


def _cli(*args: str) -> dict:
    out = subprocess.run([sys.executable, "-m", "noisyanchor", "simulate", "--json", *args],
                         capture_output=True, text=True, timeout=300, check=True)
    return json.loads(out.stdout)


def test_simulate_cli_prints_the_pinned_json_keys():
    s = _cli("--method", "aa-igdp-an", "--participants", "4", "--v", "0.01", "--dim", "16",
             "--seed", "3")
    for key in ("method", "participants", "dim", "anchors", "sigma", "v", "v_pt", "solver",
                "attacks", "utility"):
        assert key in s
    for key in ("iterations", "converged", "certified", "certificate_min_eig", "seconds",
                "rotational_error"):
        assert key in s["solver"]
    # The paper's attacks keep their names; the corrected estimators join them (issue 12).
    assert set(s["attacks"]) == set(Method.AA_IGDP_AN.attacks) >= {"known_anchor", "mp", "op",
                                                                   "am"}
    assert s["anchor_noise_estimate"] == pytest.approx(0.01, rel=0.2)  # from the residuals
    errors = {a: e["relative_error"] for a, e in s["attacks"].items()}
    assert s["strongest_attack"]["all"]["attack"] == min(errors, key=errors.get)
    assert s["strongest_attack"]["paper"]["attack"] == min(("mp", "op", "am"), key=errors.get)
    assert s["dim"] == 16 and s["anchors"] == 64 and s["participants"] == 4
    assert s["solver"]["certified"] is True
    assert 0.5 < s["utility"]["balanced_accuracy"] <= 1.0
    ml = s["attack_diagnostics"]["ml"]  # the ML attack's starts and convergence, per target
    assert set(ml) == {"1", "2", "3"} and all(f["starts"] >= 2 for f in ml.values())
    assert "known records" in s["attacks_skipped"]["known_input_17"]  # no side knowledge


def test_simulate_without_anchors_has_no_v_pt_and_prints_it_as_such():
    """Regression (issue 13): `simulate --method c-gdp --anchors 3` raised TypeError formatting
    v_PT, which methods without anchors do not have."""
    assert _cli("--method", "c-gdp", "--anchors", "3", "--no-utility")["v_pt"] is None
    out = subprocess.run([sys.executable, "-m", "noisyanchor", "simulate", "--method", "c-gdp",
                          "--anchors", "3", "--no-utility", "--seed", "1"],
                         capture_output=True, text=True, timeout=300, check=True)
    assert "v_PT=n/a" in out.stdout


def test_anchor_noise_has_one_default_for_simulate_and_demo():
    """Regression (issue 13): simulate defaulted v to 0 (exact reconstructions, no warning)
    while the demo used 0.02; both now take common.methods.DEFAULT_ANCHOR_NOISE."""
    import inspect

    from noisyanchor.common.methods import DEFAULT_ANCHOR_NOISE
    from noisyanchor.deploy.demo import run_demo

    s = _cli("--method", "aa-igdp-an", "--participants", "3", "--no-utility", "--seed", "2")
    assert s["v"] == DEFAULT_ANCHOR_NOISE > 0
    assert min(a["relative_error"] for a in s["attacks"].values()) > 1e-4  # noise is visible
    assert _cli("--method", "aa-igdp", "--participants", "3", "--no-utility")["v"] == 0.0
    assert inspect.signature(run_demo).parameters["v"].default == DEFAULT_ANCHOR_NOISE
    for command in ("simulate", "demo"):  # the help states the default
        shown = subprocess.run([sys.executable, "-m", "noisyanchor", command, "--help"],
                               capture_output=True, text=True, timeout=60, check=True).stdout
        assert str(DEFAULT_ANCHOR_NOISE) in " ".join(shown.split()), command
    assert SimulationConfig(method="aa-igdp-an").v == DEFAULT_ANCHOR_NOISE
    assert SimulationConfig(method="c-gdp").v == 0.0


def test_simulate_is_reproducible_from_its_seed():
    cfg = SimulationConfig(method="aa-igdp-an", participants=3, v=0.01, dim=8, seed=5,
                           utility=False)
    a, b = simulate(cfg), simulate(cfg)
    np.testing.assert_array_equal(a.alignment.z, b.alignment.z)


@pytest.mark.parametrize("method", list(Method))
def test_every_method_reports_exactly_its_attacks(method):
    cfg = SimulationConfig(method=method.value, participants=3, dim=8, seed=1,
                           sigma=0.1 if method.data_noise else 0.0,
                           v=0.01 if method.anchor_noise else 0.0, utility=False)
    summary = simulate(cfg).summary()
    assert set(summary["attacks"]) == set(method.attacks)
    if method in (Method.C_GDP, Method.AA_IGDP):
        for res in summary["attacks"].values():
            assert res["relative_error"] < 1e-9  # noiseless: exact reconstruction


def test_noiseless_c_gdp_and_aa_igdp_have_equal_utility_above_i_gdp():
    acc = {m: simulate(SimulationConfig(method=m, participants=5, seed=2, colluder=None))
           .summary()["utility"]["balanced_accuracy"] for m in ("c-gdp", "aa-igdp", "i-gdp")}
    assert acc["c-gdp"] == pytest.approx(acc["aa-igdp"], abs=1e-9)
    assert acc["aa-igdp"] > acc["i-gdp"] + 0.3


def test_i_gdp_utility_is_what_the_participant_index_alone_gives():
    """I-GDP's Z shares no feature across participants, only which participant a row is from:
    its utility sits near the participant-only classifier's, below chance (0.1 on digits),
    while a method that aligns the participants is far above that reference."""
    util = {m: simulate(SimulationConfig(method=m, participants=10, seed=3, colluder=None))
            .summary()["utility"] for m in ("i-gdp", "aa-igdp")}
    reference = util["i-gdp"]["participant_only_balanced_accuracy"]
    assert reference == util["aa-igdp"]["participant_only_balanced_accuracy"]  # same rows
    assert reference < 0.1
    assert abs(util["i-gdp"]["balanced_accuracy"] - reference) < 0.05
    assert util["aa-igdp"]["balanced_accuracy"] > reference + 0.5


def test_simulate_cli_precision_reaches_the_gopp_solver():
    runs = {pr: _cli("--method", "aa-igdp-an", "--v", "0.02", "--seed", "3", "--no-utility",
                     "--precision", pr)["solver"] for pr in ("double", "mixed")}
    assert runs["double"]["mixed_precision_steps"] == 0
    assert runs["mixed"]["mixed_precision_steps"] > 0
    assert runs["mixed"]["certified"] and runs["double"]["certified"]
    assert runs["mixed"]["objective"] == pytest.approx(runs["double"]["objective"], rel=1e-12)

"""A tiny sweep and its report end to end: files, numbers, resumption, identity linkage."""

import dataclasses
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from noisyanchor.common.json_vocabulary import problems
from noisyanchor.common.methods import Method
from noisyanchor.experiments.bench import BenchConfig, prepare_bench
from noisyanchor.experiments.report import make_report
from noisyanchor.experiments.simulate import simulate
from noisyanchor.experiments.sweep import CONTROL_DRAW, ROWS_FILE, draw_federation, run_sweep

TINY = """
name = "tiny"
dataset = "digits"
max_records = 700
participants = 3
dim = 8
draws = 10
sigma_range = [0.0, 10.0]
v_range = [0.0, 1.0]
episodes = 200
workers = 2
grid_every = 3
bootstrap = 40
seed = 11
models = ["logistic", "knn"]
auditors = ["pca", "pixel"]
control_translation_scales = [1.0]
replicates = 2
known_records = [2, 9]
known_sample = true
holdout_fraction = 0.1
membership_every = 5
min_draws = 8
"""
MODELS, AUDITORS = ("logistic", "knn"), ("pca", "pixel")
#: The attacks without a colluder TINY runs (d = 8: m = 9 is d + 1), by distances alone,
#: restricted by the labels every upload carries (and decoded from the spectral filter), and
#: with a candidate pool.
KNOWN = ("known_input_2", "known_input_9", "known_input_label_2", "known_input_label_9",
         "known_input_label_spectral_2", "known_input_label_spectral_9", "distance_match_2",
         "distance_match_9")
ALONE = {*KNOWN, "known_sample", "known_sample_pooled"}
#: Attacks on the uploads alone: every threat allows them, so every attack set but the paper's
#: holds them.
UPLOADS = ("ica",)


def _alone(method: str) -> set[str]:
    """The attacks without a colluder that apply to ``method`` (I-GDP has no common frame)."""
    return {*ALONE, *UPLOADS} - ({"known_sample_pooled"} if method == "i-gdp" else set())
FIGURES = ("fig_linkage.png", "fig_utility.png", "fig_frontier.png", "fig_solver.png",
           "fig_grid.png", "fig_claims.png", "fig_threats.png", "fig_membership.png")


def _cli(*args):
    return subprocess.run([sys.executable, "-m", "noisyanchor", "experiment", *args],
                          capture_output=True, text=True, timeout=300, check=True)


def _rows(out: Path) -> list[dict]:
    return [json.loads(line) for line in (out / ROWS_FILE).read_text().splitlines()]


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("sweep")
    (tmp / "tiny.toml").write_text(TINY)
    out = tmp / "res"
    for run in (_cli("sweep", "--config", str(tmp / "tiny.toml"), "--out", str(out),
                     "--no-progress", "--json"),
                _cli("report", "--results", str(out), "--command", "tiny test",
                     "--claim-bootstrap", "100", "--json")):
        assert not problems(json.loads(run.stdout))  # tests/cli/test_json_vocabulary.py
    return tmp / "tiny.toml", out


def test_sweep_writes_one_row_per_method_draw_and_replicate(tiny):
    _, out = tiny
    rows = _rows(out)
    keys = {(r["method"], r["draw"], r["translation_scale"], r["replicate"]) for r in rows}
    assert len(keys) == len(rows) == 2 * (3 + 1 + 10 * 3)  # controls, I-GDP at s = 1, draws
    for m in ("c-gdp-pn", "aa-igdp-pn", "aa-igdp-an"):
        for k in (0, 1):
            assert {d for mm, d, _, kk in keys if mm == m and kk == k} == set(range(10))
    assert {s for mm, _, s, _ in keys if mm == "i-gdp"} == {1.0, 100.0}
    for r in rows:
        # every method gets a row for every attack that applies to it, I-GDP included
        assert set(r["linkage"]) == set(Method(r["method"]).attacks) | _alone(r["method"])
        assert {"iterations", "converged", "certified", "seconds"} <= set(r["solver"])
        assert r["cpu_seconds"] > 0
    # replicated deployments differ (own split, F, galleries, keys), each seeded
    first = {(r["method"], r["draw"]): r for r in rows if r["replicate"] == 0}
    second = {(r["method"], r["draw"]): r for r in rows if r["replicate"] == 1}
    assert first[("aa-igdp-an", 3)]["noise"] != second[("aa-igdp-an", 3)]["noise"]
    assert first[("c-gdp", -1)]["linkage"] != second[("c-gdp", -1)]["linkage"]


def test_known_input_from_d_plus_1_records_links_at_the_projection_floor_on_every_method(tiny):
    """Without data noise (noiseless controls and anchor noise, whose data uploads are
    noiseless) the known-input attack with d + 1 = 9 records decodes every record exactly: its
    linkage is the noiseless colluder's (the projection floor) on every method, I-GDP included,
    and its relative error is rounding."""
    rows = _rows(tiny[1])
    for r in rows:
        if r["method"] in ("c-gdp", "aa-igdp", "i-gdp", "aa-igdp-an") and (
                r["translation_scale"] == 100.0):
            assert r["relative_error"]["known_input_9"] < 1e-9, r["method"]
            floor = next(c for c in rows if c["method"] == "c-gdp"
                         and c["replicate"] == r["replicate"])["linkage"]["known_secret"]
            assert r["linkage"]["known_input_9"] == floor


def test_rows_carry_every_model_every_auditor_and_the_strongest_attack(tiny):
    """Every draw is scored by every model (selected on validation) and linked by every
    auditor; ``strongest`` names the attack with the highest linkage, among all and among the
    paper's (MP/OP/AM on anchor noise)."""
    rows = _rows(tiny[1])
    for r in rows:
        assert set(r["utility_by_model"]) == set(MODELS)
        assert r["utility"] == r["utility_by_model"]["logistic"]["utility"]
        assert all(isinstance(u["converged"], bool) for u in r["utility_by_model"].values())
        assert set(r["linkage_by_auditor"]) == set(AUDITORS)
        assert r["linkage"] == r["linkage_by_auditor"]["pca"]
        for auditor, link in r["linkage_by_auditor"].items():
            best = r["strongest"]["linkage"][auditor]
            chosen = r["selection_linkage_by_auditor"][auditor]
            assert set(chosen) == set(link)  # every attack also on the held-out galleries
            # the colluder's attacks and those on the uploads alone (I-GDP: ICA only)
            colluder = {a: v for a, v in chosen.items() if a not in ALONE}
            if r["method"] == "i-gdp":
                assert best["paper"] is None and set(colluder) == set(UPLOADS)
            # chosen on the selection galleries, reported on the others
            assert best["all"]["attack"] == max(colluder, key=colluder.get)
            assert link[best["all"]["attack"]] == best["all"]["linkage"]
            known = {a: chosen[a] for a in (*KNOWN, *UPLOADS)}
            assert best["analyst"]["attack"] == max(known, key=known.get)
            if r["method"] == "aa-igdp-an":
                paper = {a: chosen[a] for a in ("mp", "op", "am")}
                assert best["paper"]["attack"] == max(paper, key=paper.get)
                assert best["paper"]["linkage"] == link[best["paper"]["attack"]]
        if r["method"] == "aa-igdp-an" and r["v"] > 0:
            assert r["v_hat"] == pytest.approx(r["v"], rel=0.25)  # from the anchor residuals


def test_report_files_exist_and_controls_equal_the_simulator(tiny):
    cfg_path, out = tiny
    for name in (*FIGURES, "summary.md", "summary.json", "fits.json"):
        assert (out / name).stat().st_size > 0, name
    summary = json.loads((out / "summary.json").read_text())["studies"]["3"]
    bench = prepare_bench(BenchConfig.from_toml(cfg_path), 3)
    for m in ("c-gdp", "aa-igdp", "i-gdp"):
        fed = draw_federation(bench, Method(m), CONTROL_DRAW, 0.0)
        fed = dataclasses.replace(fed, config=dataclasses.replace(fed.config, utility=True))
        sim = simulate(fed.config, federation=fed).summary()
        assert summary["controls"][m]["utility"] == sim["utility"]["balanced_accuracy"]
        for attack, res in sim["attacks"].items():
            # ICA's unmixing, often unconverged on pixels, carries rounding-level differences
            # between the sweep's and the simulator's uploads into its estimate.
            assert summary["controls"][m]["relative_error"][attack] == pytest.approx(
                res["relative_error"], rel=0.05 if attack in UPLOADS else 1e-12), attack
    # Noiseless C-GDP and AA-I-GDP give the same Z up to a rotation: same utility and linkage.
    c, aa = summary["controls"]["c-gdp"], summary["controls"]["aa-igdp"]
    assert c["utility"] == pytest.approx(aa["utility"], abs=1e-12)
    assert c["linkage"]["known_secret"] == aa["linkage"]["known_anchor"]


def test_report_from_the_audit_copy_alone_remakes_the_claims_without_the_image_grid(tiny,
                                                                                     tmp_path):
    """`audit-rows` then `report` on a folder holding only meta.json and rows.jsonl.gz (a fresh
    checkout): the same studies as from the full rows, every figure but fig_grid (the audit copy
    drops the reconstructions), and the report says why on stderr."""
    import shutil

    _, out = tiny
    full = tmp_path / "full"
    shutil.copytree(out, full)
    _cli("audit-rows", "--results", str(full))
    audit = tmp_path / "audit"
    audit.mkdir()
    for name in ("meta.json", "rows.jsonl.gz"):
        shutil.copy(full / name, audit / name)
    run = _cli("report", "--results", str(audit), "--command", "tiny test",
               "--claim-bootstrap", "100", "--json")
    assert "fig_grid.png (image data only) is not drawn" in run.stderr
    assert json.loads(run.stdout)["figures"] == [
        f for f in json.loads((out / "summary.json").read_text())["figures"]
        if f != "fig_grid.png"]
    assert (json.loads((audit / "summary.json").read_text())["studies"]
            == json.loads((out / "summary.json").read_text())["studies"])


def test_paired_private_data_noise_runs_coincide(tiny):
    _, out = tiny
    pairs = json.loads((out / "summary.json").read_text())["studies"]["3"]["pairs"]
    assert pairs["pairs"] == 10 and pairs["identical_linkage_pairs"] == 10
    assert pairs["max_relative_z_difference"] < 1e-12  # Corollary 3.3 coupling, fp rounding
    assert pairs["max_relative_error_difference"] < 1e-9


def test_report_judges_every_claim_in_every_replicate_on_its_axes_with_intervals(tiny):
    """Matched-linkage claims under every (model, auditor) pair, utility-only claims once per
    model, linkage-only claims once per auditor, in every replicate; robust only when every
    one holds; a replicate with fewer draws than min_draws is "not enough draws"."""
    from noisyanchor.experiments.claims import CLAIM_AXES, CLAIMS, POOLED_CLAIMS
    from noisyanchor.experiments.intervals import VERDICTS

    _, out = tiny
    summary = json.loads((out / "summary.json").read_text())["studies"]["3"]
    by_rep = summary["claims_by_replicate"]
    assert set(by_rep) == {"0", "1"} and summary["replicates"] == 2
    axes = {"pair": {f"{m}/{a}" for m in MODELS for a in AUDITORS}, "model": set(MODELS),
            "auditor": set(AUDITORS)}
    for claim in CLAIMS:
        for rep in by_rep.values():
            assert set(rep[claim]) == axes[CLAIM_AXES[claim]], claim
            assert all(res["verdict"] in VERDICTS for res in rep[claim].values())
        pooled = summary["claims_pooled"].get(claim, {})
        assert (claim in POOLED_CLAIMS) == bool(pooled)  # pooled on the same axes
        assert not pooled or set(pooled) == axes[CLAIM_AXES[claim]]
        assert summary["robust"][claim] == all(
            res["verdict"] == "holds" for rep in [*by_rep.values(), {claim: pooled}]
            for res in rep[claim].values())
    for claim, res in summary["claim_intervals"].items():  # replicate 0, primary axis
        assert res["verdict"] == summary["claims"][claim]
        if res["interval"] is not None:
            assert res["interval"][0] <= res["interval"][1]
    assert summary["claims"]["pn_pairs_identical"] == "holds"
    text = (out / "summary.md").read_text()
    assert ("| claim | judged per | replicate 0 | replicate 1 | pooled | deployment level "
            "| robust |") in text
    # the deployment level: k = 2 estimates, t with 1 degree of freedom, on every pooled axis
    for claim, per in summary["claims_deployment_level"].items():
        assert set(per) == set(summary["claims_pooled"][claim])
        for res in per.values():
            assert res is None or (res["deployments"] == 2 and res["df"] == 1)
    # constants, not hard-coded text: the low-linkage grid and chance
    assert "12.4%, 12.9%, ..., 19.9%" in text and "(chance 10.0%)" in text
    tables = summary["strongest_attacks"]
    assert set(tables) == set(AUDITORS)
    for per in tables.values():
        an = per["aa-igdp-an"]
        assert sum(an["strongest_draws"]["all"].values()) == an["draws"] == 20
        assert set(an["strongest_draws"]["paper"]) <= {"mp", "op", "am"}
        assert len(an["per_draw"]) == 20
    scales = summary["i_gdp_by_translation_scale"]
    assert set(scales) == {"1.0", "100.0"} and set(scales["1.0"]) == set(MODELS)
    threats = summary["threat_table"]
    assert set(threats) == {m.value for m in Method}  # every method gets a row
    # I-GDP: no colluder attack, but ICA on the uploads alone is in every threat's set
    assert set(threats["i-gdp"]["sets"]) == {"all", "analyst", "public"}
    assert set(threats["aa-igdp-an"]["sets"]) == {"paper", "all", "analyst", "public"}


def test_claims_need_the_stated_minimum_of_draws(tiny):
    """The same rows judged with a minimum above the 10 draws per replicate: every claim that
    rests on draws says so instead of a verdict."""
    from noisyanchor.experiments.claims import judge
    from noisyanchor.experiments.report import LOW_GRID
    from noisyanchor.experiments.study import Study, load_rows

    meta, rows = load_rows(tiny[1])
    bench = meta["benches"]["3"]
    views = {f"{m}/{a}": Study(rows, bench, np.random.default_rng(0), 0, model=m, auditor=a,
                               full=False) for m in MODELS for a in AUDITORS}
    judged = judge(views, ("logistic", "pca"), np.random.default_rng(1), 20, 11, LOW_GRID)
    for claim, per in judged.items():
        if claim != "noiseless_c_eq_aa_gt_i":  # single noiseless runs: judged by test records
            assert {r["verdict"] for r in per.values()} == {"not enough draws"}, claim


def test_membership_inference_is_reported_per_method_and_noise_beside_utility(tiny):
    rows = _rows(tiny[1])
    with_mi = [r for r in rows if r["membership"]]
    cfg, benches = BenchConfig.from_toml(tiny[0]), {}
    assert {r["draw"] for r in with_mi} == {-1, 0, 5}  # the controls and every 5th draw
    for r in with_mi:
        for model in MODELS:
            mi = r["membership"]["model"][model]
            assert 0 <= mi["loss_threshold"]["auc"] <= 1
            assert 0 <= mi["loss_threshold"]["tpr_at_1pct_fpr"] <= 1
            assert mi["shadow"]["shadow_models"] == 2
            assert mi["lira"]["shadow_models"] == mi["lira_offline"]["shadow_models"] == 2
            assert 0 <= mi["lira"]["tpr_at_0_1pct_fpr"] <= mi["lira"]["tpr_at_1pct_fpr"] <= 1
        z = r["membership"].get("z")
        assert z is None or all(0 <= v["auc"] <= 1 for v in z.values())
        # the known-input attacker's own records of each target are not scored as members
        bench = benches.setdefault(r["replicate"], prepare_bench(cfg, 3,
                                                                 replicate=r["replicate"]))
        unknown = sum(len(rows) - len(bench.known[i]) for i, rows in enumerate(bench.rows)
                      if i != cfg.colluder)
        assert z is None or {v["members"] for v in z.values()} == {unknown}
    summary = json.loads((tiny[1] / "summary.json").read_text())["studies"]["3"]
    table = summary["membership"]
    assert {"c-gdp", "aa-igdp", "i-gdp", "aa-igdp-an", "aa-igdp-pn", "c-gdp-pn"} <= set(table)
    assert set(table["aa-igdp"]) == {"none"} and len(table["aa-igdp-an"]) >= 1
    cell = table["aa-igdp"]["none"]["model"]["logistic"]
    assert {"utility", "loss_threshold", "shadow"} <= set(cell)
    for entry in (e for bins in table.values() for e in bins.values()):  # measured intervals
        for got in [*entry["z"].values(), *(c["loss_threshold"] for c in entry["model"].values())]:
            low, high = got["auc_interval"]
            assert low - 1e-12 <= got["auc"] <= high + 1e-12 and got["rows"] >= 1
    assert "## Membership inference" in (tiny[1] / "summary.md").read_text()


def test_the_ml_attack_reports_its_convergence_in_every_row_and_the_report(tiny):
    rows = [r for r in _rows(tiny[1]) if r["method"] == "aa-igdp-an"]
    for r in rows:
        ml = r["attack_diagnostics"]["ml"]
        assert set(ml) == {"1", "2"} and all(f["starts"] >= 2 for f in ml.values())
    summary = json.loads((tiny[1] / "summary.json").read_text())["studies"]["3"]
    assert summary["ml_attack"]["targets"] == 2 * len(rows)
    assert summary["ml_attack"]["start_beat_reported"] == 0  # the best start is the one reported
    for f in (f for r in rows for f in r["attack_diagnostics"]["ml"].values()):
        assert f["objective"] == max(f["start_objectives"])
    assert "## Maximum-likelihood attack: starts and convergence" in (
        tiny[1] / "summary.md").read_text()


def test_summary_quotes_the_fitted_numbers(tiny):
    _, out = tiny
    text = (out / "summary.md").read_text()
    summary = json.loads((out / "summary.json").read_text())["studies"]["3"]
    assert "tiny test" in text
    assert f"{100 * summary['controls']['c-gdp']['utility']:.1f}%" in text
    fits = json.loads((out / "fits.json").read_text())["3"]
    util = fits["aa-igdp-an/utility"]
    assert len(util["grid"]) == len(util["fit"]) == len(util["low"]) == len(util["high"])
    counts = summary["solver"]
    assert counts["below_v_pt"]["draws"] + counts["above_v_pt"]["draws"] == 10


def test_killed_sweep_resumes_only_the_missing_rows(tiny, tmp_path):
    cfg_path, out = tiny
    lines = (out / ROWS_FILE).read_text().splitlines()
    resumed = tmp_path / "resumed"
    resumed.mkdir()
    (resumed / "meta.json").write_text((out / "meta.json").read_text())
    (resumed / ROWS_FILE).write_text("\n".join(lines[:-5]) + "\n" + lines[-5][:20])  # torn line
    result = run_sweep(BenchConfig.from_toml(cfg_path), resumed, progress=False)
    assert 0 < result["ran"] < 10
    rows = _rows_tolerant(resumed)
    assert len({(r["method"], r["draw"], r["translation_scale"], r["replicate"])
                for r in rows}) == len(lines)
    again = run_sweep(BenchConfig.from_toml(cfg_path), resumed, progress=False)
    assert again["ran"] == 0 and again["rows_written"] == 0


def _rows_tolerant(out: Path) -> list[dict]:
    rows = []
    for line in (out / ROWS_FILE).read_text().splitlines():
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError:
            continue
    return rows


@pytest.mark.slow  # a 9-draw sweep of 120 synthetic identities: ~30 s
@pytest.mark.extended
def test_identity_data_gets_cross_record_identity_linkage(tmp_path):
    cfg = BenchConfig.from_dict({
        "name": "ids", "dataset": "synthetic", "synthetic_identities": 120, "participants": [3],
        "split": "identity", "projection": "svd", "dim": 12, "draws": 9, "episodes": 300,
        "workers": 2, "grid_every": 100, "bootstrap": 20, "sigma_range": [0.0, 3.0],
        "v_range": [0.0, 0.5], "auditor_components": 12})
    run_sweep(cfg, tmp_path, progress=False)
    rows = _rows(tmp_path)
    ctrl = next(r for r in rows if r["method"] == "c-gdp")
    assert ctrl["identity_linkage"]["known_secret"] > 0.5  # well above chance 0.1
    noisy = [r["identity_linkage"]["known_secret"] for r in rows if r["method"] == "c-gdp-pn"]
    assert np.isfinite(noisy).all()
    res = make_report(tmp_path, resamples=10)
    assert "fig_grid.png" not in res["figures"]  # tabular rows: no image grid
    summary = json.loads((tmp_path / "summary.json").read_text())["studies"]["3"]
    assert summary["metric"] == "identity"  # the CelebA protocol's default
    assert summary["controls"]["c-gdp"]["linkage"] == ctrl["identity_linkage"]
    make_report(tmp_path, tmp_path / "exact", resamples=10, metric="exact")
    exact = json.loads((tmp_path / "exact" / "summary.json").read_text())["studies"]["3"]
    assert exact["controls"]["c-gdp"]["linkage"] == ctrl["linkage"]


@pytest.mark.slow  # h=100, r=400: one capped GPM solve and its certificate take ~10 s
@pytest.mark.extended
def test_mnist_protocol_config_runs_on_user_idx_files(tmp_path, rng, write_idx):
    """The unchanged MNIST config (h=100, r=400, p=10) on small stand-in IDX files."""
    n = 500
    write_idx(tmp_path / "img", rng.integers(0, 256, (n, 28, 28), dtype=np.uint8), 0x08)
    write_idx(tmp_path / "lab", (np.arange(n) % 10).astype(np.uint8), 0x08)
    cfg_path = Path(__file__).resolve().parents[2] / "experiments" / "configs" / "mnist.toml"
    out = tmp_path / "res"
    _cli("sweep", "--config", str(cfg_path), "--out", str(out), "--draws", "1",
         "--data", str(tmp_path / "img"), "--labels", str(tmp_path / "lab"), "--no-progress")
    rows = _rows(out)
    assert len(rows) == 3 + 3
    assert {r["d"] for r in rows} == {100} and {r["r"] for r in rows} == {400}


@pytest.mark.slow  # three tasks of the committed digits sweep at its size: ~20 s
@pytest.mark.extended
def test_committed_digits_rows_are_reproduced_by_the_current_code():
    """Spot check of experiments/results/digits: a control (with its coupled C-GDP row) and
    two draws, of the last replicated deployments, recomputed from the config the sweep
    recorded match the committed rows (rows.jsonl, or its committed audit copy rows.jsonl.gz):
    results are measured, not written by hand."""
    from noisyanchor.experiments.study import load_rows
    from noisyanchor.experiments.sweep import _Decoder, noise_levels, run_task

    results = Path(__file__).resolve().parents[2] / "experiments" / "results" / "digits"
    # rows.jsonl (~17 MB) is not committed: its audit copy rows.jsonl.gz carries utility/linkage
    meta, rows = load_rows(results)
    cfg = BenchConfig.from_dict(meta["config"])
    committed = {(r["method"], r["draw"], r.get("replicate", 0)): r
                 for r in rows if r["translation_scale"] == cfg.translation_scale}
    last = cfg.replicates - 1
    for method, draw, replicate in (("aa-igdp", CONTROL_DRAW, 0), ("aa-igdp-an", 5, last),
                                    ("aa-igdp-pn", 5, min(1, last))):
        bench = prepare_bench(cfg, 10, replicate=replicate)
        level = (0.0 if draw == CONTROL_DRAW
                 else float(noise_levels(cfg, 10, Method(method), replicate)[draw]))
        for row in run_task(bench, _Decoder(bench), (10, method, draw, level)):
            old = committed[(row["method"], row["draw"], replicate)]
            # Tolerances allow a different BLAS to flip a prediction or two (1 / 1,000 episodes).
            assert row["utility"] == pytest.approx(old["utility"], abs=0.005)
            for attack, value in old["linkage"].items():
                assert row["linkage"][attack] == pytest.approx(value, abs=0.005), attack


def test_committed_digits_report_is_what_markdown_makes_of_its_numbers():
    """experiments/results/digits: summary.md is the markdown of summary.json's numbers, and
    THREAT_MODEL.md's generated digits section is what they render to (nothing edited by hand
    after the report)."""
    from noisyanchor.experiments.report import markdown
    from noisyanchor.experiments.threat_model import markers, render

    root = Path(__file__).resolve().parents[2]
    results = root / "experiments" / "results" / "digits"
    config = json.loads((results / "meta.json").read_text())["config"]
    doc = json.loads((results / "summary.json").read_text())
    main = doc["studies"][str(doc["main_p"])]
    others = [doc["studies"][p] for p in doc["studies"]] if len(doc["studies"]) > 1 else []
    assert markdown(main, config, others, doc["command"], doc["runtime"], doc["resamples"],
                    doc["figures"]) == (results / "summary.md").read_text()
    start, end = markers(config["name"])
    section = (root / "THREAT_MODEL.md").read_text().split(start + "\n", 1)[1].split(end)[0]
    assert section == render(config, main, Path("experiments/results/digits"))


def test_threat_model_section_is_regenerated_in_place(tiny, tmp_path):
    """`report --threat-model FILE` rewrites only its own marked section: the hand-written text
    around it stays, and a second run leaves the file as the first left it."""
    from noisyanchor.experiments.threat_model import markers, update_threat_model

    _, out = tiny
    config = json.loads((out / "meta.json").read_text())["config"]
    summary = json.loads((out / "summary.json").read_text())["studies"]["3"]
    doc = tmp_path / "THREAT_MODEL.md"
    doc.write_text("# Threat model\n\nhand-written intro\n")
    update_threat_model(doc, config, summary, out)
    first = doc.read_text()
    start, end = markers("tiny")
    assert first.startswith("# Threat model\n\nhand-written intro\n") and start in first
    section = first.split(start)[1].split(end)[0]
    assert "| method | analyst + colluder | analyst alone | analyst + public data |" in section
    # I-GDP gets a row; no colluder attack applies to it, ICA on the uploads alone does
    igdp = section.split("| i-gdp (noiseless) | ")[1].split("\n")[0]
    assert igdp.split(" | ")[0].endswith("(ica)")
    for claim in summary["claims"]:
        assert summary["claim_intervals"][claim]["verdict"] in section
    doc.write_text(first + "\nmore hand-written text\n")
    update_threat_model(doc, config, summary, out)
    assert doc.read_text() == first + "\nmore hand-written text\n"


def test_runtime_counts_every_tasks_cpu_when_an_earlier_run_went_unrecorded(tmp_path):
    """A sweep resumed after a run that ended before recording itself: the runtime line adds
    every task's CPU time from the rows (a coupled C-GDP row's time counted once, with its
    AA-I-GDP task's)."""
    from noisyanchor.experiments.report import runtime_text

    run = {"seconds": 10.0, "ran": 1, "task_cpu_seconds": 3.0, "workers": 2, "cpu_count": 2,
           "load_average_start": [1, 1, 1], "load_average_end": [2, 2, 2],
           "finished_utc": "2026-01-01T00:00:00+00:00"}
    (tmp_path / "runs.jsonl").write_text(json.dumps(run) + "\n")
    rows = [{"method": "aa-igdp-pn", "cpu_seconds": 3.0},
            {"method": "c-gdp-pn", "cpu_seconds": 3.0},
            {"method": "aa-igdp-an", "cpu_seconds": 5.0}]
    text = runtime_text(tmp_path, rows)
    assert text.endswith("all 2 tasks of the rows, an unrecorded earlier run's included, took "
                         "8 CPU-s (0.1 min on 2 cores of their own)")
    assert "all 2 tasks" not in runtime_text(tmp_path, rows[:2])  # one task: the run's own

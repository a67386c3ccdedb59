"""A site's kept state and local prediction, in process: the key file holds exactly the map
from raw records into the upload's frame, the seeds of a pending upload are reused until it
commits, the predictor is h(N_i(M_i(x F))), and new records must have the upload's columns."""

from __future__ import annotations

import csv
import json
import stat
from dataclasses import replace

import numpy as np
import pytest

from noisyanchor.common.downstream import fit_downstream
from noisyanchor.common.errors import IntegrityError, InvalidInputError, PreconditionError
from noisyanchor.common.files import atomic_write
from noisyanchor.common.gdp import gaussian_projection, sample_key
from noisyanchor.common.models import SiteModel, export_estimator
from noisyanchor.common.splits import TEST, TRAIN
from noisyanchor.deploy.launch import write_toml
from noisyanchor.participant.config import load_participant_config
from noisyanchor.participant.gain import ensure_gain, gain_line, labelled_gain, site_gain
from noisyanchor.participant.local_baseline import (
    LOCAL_BASELINE_FILE,
    keep_local_baseline,
    local_baseline,
    train_local_baseline,
)
from noisyanchor.participant.predict import (
    SITE_MODEL_FILE,
    SitePredictor,
    load_predictor,
    predict,
    predicted_chunks,
    prediction_records,
    write_predictions,
)
from noisyanchor.participant.site_state import (
    SiteKey,
    keep_site_key,
    keep_with_digest,
    load_site_key,
    records_digest,
    upload_seed_path,
    upload_seeds,
)

D_IN, H, N = 6, 4, 90


@pytest.fixture
def site(tmp_path, rng):
    """A kit config, its raw records (CSV), the kept key and the cached site model of a
    federation whose alignment sends the site's frame to Z's by a known N_i."""
    y = np.arange(N) % 3
    x = rng.standard_normal((N, D_IN)) + 2.0 * np.eye(D_IN)[y]
    names = [f"c{j}" for j in range(D_IN)]
    (tmp_path / "site.csv").write_text(
        ",".join([*names, "label"]) + "\n"
        + "\n".join(",".join([*(repr(float(v)) for v in row), str(lab)])
                    for row, lab in zip(x, y, strict=True)) + "\n")
    for name in ("ca.pem", "c.pem", "k"):  # the config checks the TLS files exist
        (tmp_path / name).write_text("unused offline")
    (tmp_path / "k").chmod(0o600)  # and that the key is private
    cfg_path = write_toml(tmp_path / "site.toml", {
        "participant": {"id": "org-a", "federation_id": "fed", "analyst": "127.0.0.1:1",
                        "data": tmp_path / "site.csv", "state_dir": tmp_path / "state"},
        "protocol": {"method": "aa-igdp-an", "dim": H, "projection_seed": 5, "v": 0.01,
                     "dealer": "org-a"},
        "tls": {"ca": tmp_path / "ca.pem", "cert": tmp_path / "c.pem", "key": tmp_path / "k"}})
    cfg = load_participant_config(cfg_path)
    f = gaussian_projection(D_IN, H, np.random.default_rng(5))
    key = sample_key(H, rng)
    tags = np.where(np.arange(N) % 4 == 0, TEST, TRAIN).astype("|i1")
    keep_site_key(cfg, SiteKey("fed", "org-a", "aa-igdp-an", key, f, D_IN, tags,
                               records_digest(x, y), tuple(names)))
    # The analyst's side: N_i maps the site's upload frame to Z's; the model is fitted on Z.
    rotation, mean, shift = (np.linalg.qr(rng.standard_normal((H, H)))[0],
                             rng.standard_normal(H), rng.standard_normal(H))
    t = (x @ f) @ key.rotation + key.translation
    z = (t - mean) @ rotation + shift
    fitted = fit_downstream(z, y, tags)
    model = export_estimator(fitted.estimator, fitted.center, fitted.scale)
    part = SiteModel("fed", "org-a", "aa-igdp-an", "gopp", rotation, mean, shift, model, "",
                     {"name": "logistic", "balanced_accuracy": 0.9},
                     {"balanced_accuracy": float(fitted.utility.balanced_accuracy),
                      "n_test": int((tags == TEST).sum())})
    atomic_write(cfg.state_dir / SITE_MODEL_FILE, part.to_bytes())
    return {"cfg": cfg, "x": x, "y": y, "z": z, "model": model, "tags": tags, "names": names,
            "path": cfg_path, "tmp": tmp_path}


def test_the_predictor_maps_raw_records_to_their_rows_of_z(site):
    predictor = load_predictor(site["cfg"])  # offline: the cached site model
    # h(N_i(M_i(x F))) on the uploaded records is h on their rows of Z.
    np.testing.assert_allclose(predictor.rows(site["x"]), site["z"], rtol=0, atol=1e-12)
    np.testing.assert_allclose(predictor.predict_proba(site["x"]),
                               site["model"].predict_proba(site["z"]), rtol=0, atol=1e-12)
    out = predict(site["path"], site["tmp"] / "site.csv")  # a label column is ignored
    np.testing.assert_array_equal(out.labels, site["model"].predict(site["z"]))
    assert out.rows.tolist() == list(range(1, N + 1)) and out.classes.tolist() == [0, 1, 2]
    path = out.write_csv(site["tmp"] / "p.csv")
    lines = path.read_text().splitlines()
    assert lines[0] == "row,line,label,p_0,p_1,p_2" and len(lines) == N + 1
    assert lines[1].startswith("1,2,")  # record 1 is on line 2, under the header


def test_new_records_must_have_the_uploads_columns(site):
    cfg, key = site["cfg"], load_site_key(site["cfg"])
    swapped = site["names"][1:2] + site["names"][:1] + site["names"][2:]
    bad = site["tmp"] / "swapped.csv"
    bad.write_text(",".join(swapped) + "\n" + ",".join(["0"] * D_IN) + "\n")
    with pytest.raises(InvalidInputError, match="column 1 is 'c1' but the upload's column 1 "
                                                "was 'c0'"):
        prediction_records(cfg, bad, key)
    with pytest.raises(InvalidInputError, match="has 5 feature columns but org-a's upload had 6"):
        predict(cfg, np.zeros((2, 5)))


def test_the_key_file_is_private_and_refuses_another_site(site, tmp_path):
    cfg = site["cfg"]
    assert stat.S_IMODE(cfg.state_dir.stat().st_mode) == 0o700
    assert stat.S_IMODE((cfg.state_dir / "site-key.bin").stat().st_mode) == 0o600
    other = cfg.with_overrides(id="org-b")
    with pytest.raises(PreconditionError, match="key of 'org-a' in federation 'fed', not of "
                                                "'org-b'"):
        load_site_key(other)
    with pytest.raises(PreconditionError, match="no kept key at"):
        load_site_key(cfg.with_overrides(state_dir=tmp_path / "elsewhere"))


def test_a_withheld_model_is_said_when_predicting(site):
    key = load_site_key(site["cfg"])
    part = SiteModel("fed", "org-a", "aa-igdp-an", "gopp", np.eye(H), np.zeros(H), np.zeros(H),
                     None, "k-NN is never returned to sites", {}, {})
    with pytest.raises(PreconditionError, match="did not return a model to org-a: k-NN"):
        SitePredictor(key, part)


def test_an_edit_of_the_kept_site_model_is_refused(site):
    """Issue 30, item 4: the kept file's whole SHA-256 is recorded (when fetched, or at its
    first read), so an edited digit of its JSON header is refused, not used."""
    path = site["cfg"].state_dir / SITE_MODEL_FILE
    load_predictor(site["cfg"])  # the first read records the digest
    raw = path.read_bytes()
    at = raw.index(b"0.9")  # the federation's balanced accuracy, in the JSON header
    atomic_write(path, raw[:at] + b"0.8" + raw[at + 3:])
    with pytest.raises(IntegrityError, match=r"changed since it was fetched.*--refresh"):
        load_predictor(site["cfg"])


def test_pending_upload_seeds_are_reused_until_removed(site):
    cfg = site["cfg"]
    first = upload_seeds(cfg)
    assert upload_seeds(cfg) == first  # an interrupted run draws the same key, noise, split
    assert stat.S_IMODE(upload_seed_path(cfg).stat().st_mode) == 0o600
    upload_seed_path(cfg).unlink()
    assert upload_seeds(cfg) != first  # fresh OS entropy once the upload committed


def test_gain_compares_local_only_with_the_federation_on_the_sites_test_rows(site):
    cfg = site["cfg"]
    predictor = load_predictor(cfg)
    report = ensure_gain(cfg, predictor.key, predictor.site)
    test = site["tags"] == TEST
    from noisyanchor.common.downstream import held_out_metrics

    alone = fit_downstream(site["x"], site["y"], site["tags"]).utility.balanced_accuracy
    ours = held_out_metrics(site["y"][test], site["model"].predict(site["z"][test]))
    assert report["local_only_balanced_accuracy"] == pytest.approx(alone, abs=1e-12)
    assert report["federation_balanced_accuracy"] == pytest.approx(ours["balanced_accuracy"],
                                                                   abs=1e-12)
    assert report["gain"] == pytest.approx(ours["balanced_accuracy"] - alone, abs=1e-12)
    # The paired interval on the same rows, as common.comparison computes it.
    lo, hi = report["gain_interval"]
    assert lo <= report["gain"] <= hi and report["confidence"] == 0.95
    assert report["gain_not_told"] is None and report["test_classes"] == 3
    assert report["interval_method"].startswith("stratified paired bootstrap")
    assert report["local_only_trained_on"].startswith("org-a's own training rows, raw records")
    assert json.loads((cfg.state_dir / "gain.json").read_text()) == report
    line = gain_line(report)
    assert f"on org-a's {int(test.sum())} test rows: {report['gain']:+.3f} balanced accuracy " \
           f"from joining, 95% interval [{lo:+.3f}, {hi:+.3f}]" in line
    # Records changed since the upload: the kept baseline does not read them (issue 31); to
    # train it again from them, the kept split no longer applies, and it says so.
    (cfg.state_dir / "gain.json").unlink()
    with open(cfg.data, "a") as fh:
        fh.write(",".join(["0"] * D_IN) + ",1\n")
    assert ensure_gain(cfg, predictor.key, predictor.site) == report
    (cfg.state_dir / "gain.json").unlink()
    (cfg.state_dir / LOCAL_BASELINE_FILE).unlink()
    with pytest.raises(PreconditionError, match="not the ones org-a uploaded"):
        ensure_gain(cfg, predictor.key, predictor.site)


def test_predictions_speak_the_schemas_label_texts(site, monkeypatch):
    from types import SimpleNamespace

    from noisyanchor.participant import run
    from noisyanchor.participant.predict import class_names

    tabular = SimpleNamespace(label_classes=("red", "green", "blue"))
    monkeypatch.setattr(run, "kept_schema", lambda cfg: SimpleNamespace(tabular=tabular))
    out = predict(site["cfg"], site["x"][:4])
    assert out.class_names == ("red", "green", "blue")
    by_code = {0: "red", 1: "green", 2: "blue"}
    assert out.names == [by_code[int(c)] for c in out.labels]
    lines = out.write_csv(site["tmp"] / "named.csv").read_text().splitlines()
    assert lines[0] == "row,line,label,p_red,p_green,p_blue"
    assert lines[1].split(",")[2] == by_code[int(out.labels[0])]
    # Label texts a spreadsheet would run are written inert (issue 30, item 6).
    tabular.label_classes = ("=HYPERLINK(\"http://x\")", "+cmd", "-x")
    path = predict(site["cfg"], site["x"][:4]).write_csv(site["tmp"] / "f.csv")
    with path.open(newline="") as fh:
        labels = {row[2] for row in list(csv.reader(fh))[1:]}
    assert labels and labels <= {"'=HYPERLINK(\"http://x\")", "'+cmd", "'-x"}
    tabular.label_classes = ("red", "green")
    with pytest.raises(InvalidInputError, match="names 2 label classes"):
        class_names(site["cfg"], np.array([0, 1, 2]))


def test_a_site_with_few_test_rows_is_told_why_no_gain_is_told(site):
    predictor = load_predictor(site["cfg"])
    tags = site["tags"].copy()
    tags[np.flatnonzero(tags == TEST)[5:]] = TRAIN  # 5 test rows left
    report = site_gain(site["cfg"], replace(predictor.key, tags=tags), predictor.site)
    assert report["gain"] is None and report["gain_interval"] is None
    assert report["test_rows"] == 5 and "only 5 labelled rows, fewer than the 20" in \
        report["gain_not_told"]
    line = gain_line(report)
    assert line.startswith("on org-a's 5 test rows: gain not told: only 5 labelled rows")
    assert "federation model" not in line  # no balanced accuracy of 5 rows is told


def test_a_site_whose_test_rows_hold_one_class_compares_the_recall_of_that_class(site):
    predictor = load_predictor(site["cfg"])
    tags = np.full(N, TRAIN, dtype="|i1")
    tags[np.flatnonzero(site["y"] == 0)[:21]] = TEST  # 21 test rows, all of class 0
    report = site_gain(site["cfg"], replace(predictor.key, tags=tags), predictor.site)
    assert report["gain"] is None and report["test_classes"] == 1
    assert "hold one class (0)" in report["gain_not_told"]
    own = report["own_class"]
    assert own["measure"] == "recall of class 0" and own["gain_not_told"] is None
    assert own["gain"] == pytest.approx(own["federation_recall"] - own["local_only_recall"],
                                        abs=1e-12)
    assert "recall of class 0, federation model" in gain_line(report)


def test_labelled_new_records_are_scored_against_the_local_only_model(site):
    cfg, x, y = site["cfg"], site["x"], site["y"]
    predictor = load_predictor(cfg)
    scored = labelled_gain(cfg, predictor, x, y)
    from noisyanchor.common.downstream import held_out_metrics

    alone = fit_downstream(x, y, site["tags"]).predict(x)
    assert scored["test_rows"] == N and scored["test_classes"] == 3
    assert scored["federation_balanced_accuracy"] == pytest.approx(held_out_metrics(
        y, site["model"].predict(site["z"]))["balanced_accuracy"], abs=1e-12)
    assert scored["local_only_balanced_accuracy"] == pytest.approx(
        held_out_metrics(y, alone)["balanced_accuracy"], abs=1e-12)
    lo, hi = scored["gain_interval"]
    assert lo <= scored["gain"] <= hi


def test_predict_labels_prints_and_reports_the_gain_on_the_input(site, capsys):
    from noisyanchor.cli import main

    argv = ["participant", "predict", "--config", str(site["path"]), "--input",
            str(site["tmp"] / "site.csv"), "--out", str(site["tmp"] / "p.csv")]
    assert main([*argv, "--labels", "label", "--json"]) == 0
    scored = json.loads(capsys.readouterr().out)["labelled_gain"]
    assert scored["label_column"] == "label" and scored["test_rows"] == N
    assert scored["gain_interval"] is not None
    assert main([*argv, "--labels", "label"]) == 0
    assert f"gain on the {N} records of" in capsys.readouterr().out
    assert main([*argv, "--labels", "truth"]) == 1
    assert "no label column 'truth'" in capsys.readouterr().err


def test_a_site_without_the_model_is_told_the_analysts_comparison_on_its_rows_of_z(site):
    key = load_site_key(site["cfg"])
    analyst = {"balanced_accuracy": 0.9, "gain": 0.05, "gain_interval": [0.01, 0.09],
               "confidence": 0.95, "interval_method": "stratified paired bootstrap: ...",
               "gain_not_told": None, "federation_balanced_accuracy": 0.9,
               "local_only_balanced_accuracy": 0.85, "test_rows": 23, "test_classes": 3,
               "own_class": None, "local_only_trained_on": "this site's own training rows of Z"}
    part = SiteModel("fed", "org-a", "aa-igdp-an", "gopp", np.eye(H), np.zeros(H), np.zeros(H),
                     None, "k-NN is never returned to sites", {"name": "knn"}, analyst)
    report = site_gain(site["cfg"], key, part)
    assert report["gain"] == 0.05 and report["gain_interval"] == [0.01, 0.09]
    assert report["local_only_trained_on"] == "this site's own training rows of Z"
    assert report["federation"]["computed_by"] == "the analyst"
    older = SiteModel("fed", "org-a", "aa-igdp-an", "gopp", np.eye(H), np.zeros(H),
                      np.zeros(H), None, "k-NN is never returned to sites", {"name": "knn"},
                      {"balanced_accuracy": 0.9})
    report = site_gain(site["cfg"], key, older)
    assert report["gain"] is None and "the analyst sent no comparison" in \
        report["gain_not_told"]
    assert gain_line(report).startswith("on org-a's 23 test rows: gain not told: the "
                                        "federation's model is not returned to org-a")


def test_scikit_learns_warnings_go_to_the_debug_log_not_the_sites_terminal(site, monkeypatch,
                                                                           caplog):
    """Regression (issue 34): a scikit-learn UserWarning reached the site's terminal."""
    import logging
    import warnings

    from noisyanchor.common import downstream
    from noisyanchor.participant import local_baseline
    from noisyanchor.participant.gain import site_gain

    real = downstream.fit_downstream

    def warning_fit(*args, **kwargs):
        warnings.warn("A single label was found in 'y_true' and 'y_pred'.", UserWarning,
                      stacklevel=1)
        return real(*args, **kwargs)

    monkeypatch.setattr(local_baseline, "fit_downstream", warning_fit)
    predictor = load_predictor(site["cfg"])
    caplog.set_level(logging.DEBUG, logger="noisyanchor.participant.gain")
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # one that escaped would fail here
        report = site_gain(site["cfg"], predictor.key, predictor.site)
    assert report["local_only_balanced_accuracy"] is not None
    assert "UserWarning: A single label was found" in caplog.text


def test_prediction_applies_the_uploads_range_and_unit_checks(site, monkeypatch, caplog):
    """A column of the new records in another unit is warned about, naming the column, the
    first line and the likely unit; ``strict`` refuses the table instead."""
    from noisyanchor.common.schema import RecordSchema
    from noisyanchor.common.tabular import NumericColumn, TabularSchema
    from noisyanchor.participant import run

    tabular = TabularSchema(tuple(NumericColumn(f"c{j}", min=-10.0, max=10.0, unit="g")
                                  for j in range(D_IN)), label="label")
    monkeypatch.setattr(run, "kept_schema", lambda cfg: RecordSchema.typed(tabular))
    x = site["x"][:8].copy()
    x[:, 2] *= 1e-3  # kg where g is declared
    x[:, 2] += 1e-4  # (no value exactly 0: all in the declared range's smallest thousandth)
    path = site["tmp"] / "monday.csv"
    path.write_text(",".join(site["names"]) + "\n" + "\n".join(
        ",".join(repr(float(v)) for v in row) for row in x) + "\n")
    key = load_site_key(site["cfg"])
    with caplog.at_level("WARNING"):
        prediction_records(site["cfg"], path, key)
    assert [r.getMessage() for r in caplog.records if "column" in r.getMessage()] == []
    x[:, 2] *= 1e6  # now in mg: every value far outside
    path.write_text(",".join(site["names"]) + "\n" + "\n".join(
        ",".join(repr(float(v)) for v in row) for row in x) + "\n")
    with caplog.at_level("WARNING"):
        prediction_records(site["cfg"], path, key)
    [warned] = [r.getMessage() for r in caplog.records if "column" in r.getMessage()]
    assert warned.startswith(f"{path}: column 'c2' [g]: ") and "first on line 2" in warned
    assert "it looks like mg where g is declared" in warned
    with pytest.raises(InvalidInputError, match=r"column 'c2' \[g\].*refused: --strict"):
        prediction_records(site["cfg"], path, key, strict=True)


def test_the_kept_baseline_round_trips_and_refuses_an_edit_or_nan(site):
    """Issue 31, item 3: the local-only baseline kept at upload is an arrays file with a JSON
    header whose whole SHA-256 is kept beside it: read back as written; a digit edited in its
    header, or NaN in its arrays, is refused."""
    cfg = site["cfg"]
    key = load_site_key(cfg)
    made = train_local_baseline(key, site["x"], site["y"], "logistic")
    path = keep_local_baseline(cfg, made)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    kept = local_baseline(cfg, key, "logistic")
    test = site["tags"] == TEST
    np.testing.assert_array_equal(kept.test_x, site["x"][test])
    np.testing.assert_array_equal(kept.test_labels, site["y"][test])
    assert kept.c == made.c and kept.fits(key, "logistic") and not kept.fits(key, "mlp")
    alone = fit_downstream(site["x"], site["y"], site["tags"])
    np.testing.assert_array_equal(kept.predict(site["x"]), alone.predict(site["x"]))
    raw = path.read_bytes()
    at = raw.index(b'"c":') + 4  # a digit of the chosen C, in the JSON header
    digit = raw[at:at + 1]
    assert digit.isdigit()
    atomic_write(path, raw[:at] + (b"2" if digit != b"2" else b"3") + raw[at + 1:])
    with pytest.raises(IntegrityError, match=r"changed since it was kept.*remove it"):
        local_baseline(cfg, key, "logistic")
    bad = replace(made, test_x=np.where(np.arange(D_IN) == 2, np.nan, made.test_x))
    keep_with_digest(path, bad.to_bytes())  # digests consistent: the NaN itself is refused
    with pytest.raises(InvalidInputError, match="'test_x' holds NaN or Inf"):
        local_baseline(cfg, key, "logistic")


def test_gain_with_the_kept_baseline_does_not_open_the_training_table(site):
    """With the baseline kept, gain.json is computed with the site's table moved away, and is
    the one a state folder without it computes (training it from the table, then keeping it)."""
    cfg = site["cfg"]
    predictor = load_predictor(cfg)
    assert not (cfg.state_dir / LOCAL_BASELINE_FILE).exists()  # a folder from before
    trained = ensure_gain(cfg, predictor.key, predictor.site)
    assert (cfg.state_dir / LOCAL_BASELINE_FILE).is_file()
    (cfg.state_dir / "gain.json").unlink()
    cfg.data.rename(site["tmp"] / "moved-away.csv")
    assert ensure_gain(cfg, predictor.key, predictor.site) == trained
    scored = labelled_gain(cfg, predictor, site["x"], site["y"])
    assert scored["local_only_balanced_accuracy"] is not None


def test_chunked_prediction_equals_one_shot_prediction(site, rng):
    """``participant predict`` reads, predicts and writes a chunk at a time: the same rows,
    lines, labels and probabilities (to 1e-12) as the whole table at once, and with --labels
    the same paired comparison."""
    cfg = site["cfg"]
    n = 3000
    y = rng.integers(0, 3, n)
    x = rng.standard_normal((n, D_IN)) + 2.0 * np.eye(D_IN)[y]
    path = site["tmp"] / "many.csv"
    body = [",".join([*(repr(float(v)) for v in row), str(lab)]) for row, lab in zip(x, y,
                                                                                     strict=True)]
    body.insert(1000, "")  # a blank line: lines and rows part
    path.write_text(",".join([*site["names"], "label"]) + "\n" + "\n".join(body) + "\n")
    predictor = load_predictor(cfg)
    whole = predict(cfg, path)
    out = site["tmp"] / "chunked.csv"
    parts = list(predicted_chunks(cfg, predictor, path, labels="label", chunk_rows=257))
    assert len(parts) == -(-n // 257)
    write_predictions(out, (p for _, p in parts))
    with out.open(newline="") as fh:
        rows = list(csv.reader(fh))
    assert rows[0] == ["row", "line", "label", "p_0", "p_1", "p_2"] and len(rows) == n + 1
    body_out = np.array(rows[1:], dtype=float)
    np.testing.assert_array_equal(body_out[:, 0], whole.rows)
    np.testing.assert_array_equal(body_out[:, 1], whole.lines)
    assert whole.lines[1000] == whole.rows[1000] + 2  # past the blank line
    np.testing.assert_array_equal(body_out[:, 2], whole.labels)
    np.testing.assert_allclose(body_out[:, 3:], whole.probabilities, rtol=0, atol=1e-12)
    from noisyanchor.participant.gain import labelled_comparison, site_baseline

    baseline = site_baseline(cfg, predictor)
    chunked = labelled_comparison(cfg, predictor.key, np.concatenate([d.labels for d, _ in parts]),
                                  np.concatenate([p.labels for _, p in parts]),
                                  np.concatenate([baseline.predict(d.x) for d, _ in parts]), "")
    assert chunked == labelled_gain(cfg, predictor, x, y)


def test_a_refused_chunked_prediction_leaves_no_output(site, monkeypatch):
    """--strict refuses a column far out of range only once every chunk is read: the chunks
    written so far are not left behind as a partial output."""
    from noisyanchor.common.schema import RecordSchema
    from noisyanchor.common.tabular import NumericColumn, TabularSchema
    from noisyanchor.participant import run

    tabular = TabularSchema(tuple(NumericColumn(f"c{j}", min=-10.0, max=10.0, unit="g")
                                  for j in range(D_IN)), label="label")
    monkeypatch.setattr(run, "kept_schema", lambda cfg: RecordSchema.typed(tabular))
    x = site["x"].copy()
    x[-1, 2] = 1e6  # far, in the last chunk only
    path = site["tmp"] / "far.csv"
    path.write_text(",".join(site["names"]) + "\n" + "\n".join(
        ",".join(repr(float(v)) for v in row) for row in x) + "\n")
    out = site["tmp"] / "refused.csv"
    predictor = load_predictor(site["cfg"])
    chunks = (p for _, p in predicted_chunks(site["cfg"], predictor, path, strict=True,
                                             chunk_rows=16))
    with pytest.raises(InvalidInputError, match="refused: --strict; nothing was predicted"):
        write_predictions(out, chunks)
    assert sorted(p.name for p in site["tmp"].iterdir() if "refused" in p.name) == []


def test_nan_in_the_kept_site_map_is_refused_naming_the_file_and_array(site):
    """Issue 30, item 4: the site's map R_i kept with NaN, its whole-file digest written
    to match (what someone who can write the state folder could do), is refused by name, never
    used to predict."""
    import hashlib

    from noisyanchor.common.models.container import dump_arrays, load_arrays
    from noisyanchor.common.models.site_model import SITE_MODEL_FORMAT
    from noisyanchor.participant.predict import SITE_MODEL_DIGEST_FILE

    state = site["cfg"].state_dir
    kept = load_arrays((state / SITE_MODEL_FILE).read_bytes(), SITE_MODEL_FORMAT)
    rotation = kept.arrays["rotation"].copy()
    rotation[0, 1] = np.nan
    raw = dump_arrays(SITE_MODEL_FORMAT, kept.meta, kept.arrays | {"rotation": rotation})
    atomic_write(state / SITE_MODEL_FILE, raw)
    atomic_write(state / SITE_MODEL_DIGEST_FILE, hashlib.sha256(raw).hexdigest().encode())
    with pytest.raises(InvalidInputError, match=r"site-model.*'rotation' holds NaN or Inf"):
        load_predictor(site["cfg"])

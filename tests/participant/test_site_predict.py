"""A site's kept state and local prediction, in process: the key file holds exactly the map
from raw records into the upload's frame, the seeds of a pending upload are reused until it
commits, the predictor is h(N_i(M_i(x F))), and new records must have the upload's columns."""

from __future__ import annotations

import csv
import json
import stat

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
from noisyanchor.participant.gain import ensure_gain, gain_line
from noisyanchor.participant.predict import (
    SITE_MODEL_FILE,
    SitePredictor,
    load_predictor,
    predict,
    prediction_records,
)
from noisyanchor.participant.site_state import (
    SiteKey,
    keep_site_key,
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
    assert json.loads((cfg.state_dir / "gain.json").read_text()) == report
    assert f"on org-a's {int(test.sum())} test rows" in gain_line(report)
    # Records changed since the upload: the kept split no longer applies, and it says so.
    (cfg.state_dir / "gain.json").unlink()
    with open(cfg.data, "a") as fh:
        fh.write(",".join(["0"] * D_IN) + ",1\n")
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

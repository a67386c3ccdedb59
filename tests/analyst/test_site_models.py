"""The analyst keeps the fitted model as arrays and packages every site's part: its own map
N_i, the model and the metrics (the federation's and its own test rows'); the part is served
only to its site, only once the federation is done, and never when the store was altered."""

from __future__ import annotations

import json

import numpy as np
import pytest

from noisyanchor.analyst.config import AnalystConfig
from noisyanchor.analyst.contributions import site_view
from noisyanchor.analyst.federation import Federation
from noisyanchor.analyst.site_models import KNN_WITHHELD, MODEL_FILE, site_model_file
from noisyanchor.analyst.storage import Store
from noisyanchor.common.errors import IntegrityError, PermissionDeniedError, PreconditionError
from noisyanchor.common.models import load_model, load_site_model
from noisyanchor.common.splits import TEST, TRAIN
from noisyanchor.common.tomlconfig import TlsFiles
from noisyanchor.common.wire import BundleStream, bundle_spec, iter_chunks
from noisyanchor.participant.compute import compute_upload

IDS, N, D, R = ("a", "b", "c"), 60, 5, 16


def _config(tmp_path, **changes) -> AnalystConfig:
    tls = TlsFiles(tmp_path / "ca.pem", tmp_path / "a.pem", tmp_path / "a.key")
    base = dict(federation_id="f", participants=IDS, method="aa-igdp-an", anchors=R, dim=D,
                sigma=0.0, v=0.01, reference="a", max_iter=200, tol=1e-9,
                output_dir=tmp_path / "store", tls=tls)
    return AnalystConfig(**(base | changes))


def _records(rng, n: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    y = np.arange(n) % 3
    x = 2.0 * np.eye(D)[y] + 0.5 * rng.standard_normal((n, D))
    tags = np.where(np.arange(n) % 4 == 0, TEST, TRAIN).astype("|i1")
    return x, y.astype("<i8"), tags


def _upload(fed: Federation, pid: str, arrays: dict) -> None:
    spec = bundle_spec("f", fed.method.value, arrays)
    fed.upload(pid, BundleStream(spec, iter_chunks(arrays, chunk_size=512)))


def _federation(tmp_path, rng, model="logistic", upload=IDS):
    fed = Federation(_config(tmp_path, model=model), Store(tmp_path / "store"))
    keys, data = {}, {}
    for k, pid in enumerate(upload):
        x, y, tags = _records(rng, N)
        up, state = compute_upload("aa-igdp-an", x, np.random.default_rng(k),
                                   shared_seed=b"s" * 32, anchors=R, v=0.01)
        _upload(fed, pid, {"data": up.data, "anchor": up.anchor, "labels": y, "tags": tags})
        keys[pid], data[pid] = state.key, (x, y, tags)
    fed.wait(60)
    return fed, keys, data


def test_every_site_gets_its_map_and_the_model_that_predicts_its_rows_of_z(tmp_path, rng):
    fed, keys, data = _federation(tmp_path, rng)
    assert fed.state == "done"
    result = json.loads((fed.store.result / "result.json").read_text())
    model = load_model((fed.store.result / MODEL_FILE).read_bytes())
    z = np.load(fed.store.result / "z.npy")
    labels = np.load(fed.store.result / "labels.npy")
    for pid in IDS:
        part = load_site_model(fed.site_model(pid))
        assert part.participant == pid and part.solver == "gopp"
        x, _, tags = data[pid]
        a, b = result["row_ranges"][pid]
        # The site's own path: x -> M_i (its key) -> N_i -> model gives its rows of Z.
        t = x @ keys[pid].rotation + keys[pid].translation
        np.testing.assert_allclose(part.map_rows(t), z[a:b], rtol=0, atol=1e-9)
        np.testing.assert_allclose(part.model.predict_proba(part.map_rows(t)),
                                   model.predict_proba(z[a:b]), rtol=0, atol=1e-9)
        test = tags == TEST
        site = result["model"]["sites"][pid]
        own = {k: v for k, v in part.site_metrics.items() if k != "contribution"}
        assert site == own and site["n_test"] == int(test.sum())
        assert site["accuracy"] == pytest.approx(
            float(np.mean(model.predict(z[a:b][test]) == labels[a:b][test])), abs=1e-12)
        assert part.federation_metrics["balanced_accuracy"] == \
            result["model"]["balanced_accuracy"]
        # 15 test rows a site: no gain against its local-only model is told, and it says why.
        assert site["gain"] is None and site["gain_not_told"].startswith(
            "only 15 labelled rows, fewer than the 20")
        assert site["local_only_trained_on"].startswith("this site's own training rows of Z")
        assert fed.site_model(pid) == fed.site_model(pid, pid)  # the same bytes every time


def test_the_result_says_what_each_site_contributed_and_each_part_only_its_own(tmp_path, rng):
    fed, _, _ = _federation(tmp_path, rng)
    result = json.loads((fed.store.result / "result.json").read_text())
    contributions = result["contributions"]
    assert contributions["computed"] and contributions["left_out"] == list(IDS)
    assert contributions["extra_fits"] == len(IDS) and not contributions["sampled"]
    assert contributions["full"] == {pid: result["model"]["sites"][pid]["balanced_accuracy"]
                                     for pid in IDS}
    assert {j: set(row) for j, row in contributions["matrix"].items()} == {
        j: set(IDS) - {j} for j in IDS}
    for pid in IDS:
        view = load_site_model(fed.site_model(pid)).site_metrics["contribution"]
        assert view == site_view(contributions, pid)
        assert all(f'"{other}"' not in json.dumps(view) for other in IDS)


def test_without_a_model_no_contribution_is_measured(tmp_path, rng):
    fed, _, _ = _federation(tmp_path, rng, model="none")
    result = json.loads((fed.store.result / "result.json").read_text())
    assert result["contributions"]["computed"] is False
    assert "no fitted model" in result["contributions"]["reason"]
    part = load_site_model(fed.site_model("a"))
    assert part.site_metrics["contribution"]["computed"] is False


def test_another_sites_part_is_refused(tmp_path, rng):
    fed, _, _ = _federation(tmp_path, rng)
    with pytest.raises(PermissionDeniedError, match="'a' may fetch only its own site model, not "
                                                    "'b'"):
        fed.site_model("a", "b")
    with pytest.raises(PermissionDeniedError, match="not a participant"):
        fed.site_model("zed")


def test_before_the_federation_is_done_the_refusal_names_whom_it_waits_for(tmp_path, rng):
    fed, _, _ = _federation(tmp_path, rng, upload=("a",))
    fed.withdraw("c", "no data this week")
    with pytest.raises(PreconditionError, match=r"waiting for the upload\(s\) of b, c \(1 of 3 "
                                                r"committed\); c withdrew: no data this week"):
        fed.site_model("a")


def test_an_altered_site_model_is_not_sent(tmp_path, rng):
    fed, _, _ = _federation(tmp_path, rng)
    path = fed.store.result / site_model_file("b")
    raw = bytearray(path.read_bytes())
    raw[-3] ^= 0xFF
    path.write_bytes(bytes(raw))
    with pytest.raises(IntegrityError, match=r"site-b\.model does not match the SHA-256"):
        fed.site_model("b")


def test_a_knn_model_is_kept_but_not_returned_to_sites(tmp_path, rng):
    fed, _, _ = _federation(tmp_path, rng, model="knn")
    result = json.loads((fed.store.result / "result.json").read_text())
    assert result["model"]["returned_to_sites"] is False
    assert load_model((fed.store.result / MODEL_FILE).read_bytes()).name == "knn"
    part = load_site_model(fed.site_model("a"))
    assert part.model is None and part.model_withheld == KNN_WITHHELD
    assert part.site_metrics["n_test"] == N // 4  # the metrics still come back


def test_without_a_model_every_site_still_gets_its_map(tmp_path, rng):
    fed, _, _ = _federation(tmp_path, rng, model="none")
    part = load_site_model(fed.site_model("c"))
    assert part.model is None and "fits no downstream model" in part.model_withheld
    assert part.rotation.shape == (D, D)


def test_a_large_site_model_streams_in_bounded_chunks():
    from noisyanchor.analyst.service import SITE_MODEL_CHUNK, AnalystServicer

    raw = bytes(range(256)) * 1000  # 256 kB: 4 chunks
    parts = list(AnalystServicer._site_model_parts("p0", raw))
    assert parts[0].header.nbytes == len(raw) and len(parts) == 1 + 4
    assert [len(p.chunk) for p in parts[1:]] == [SITE_MODEL_CHUNK] * 3 + [len(raw) - 3 *
                                                                          SITE_MODEL_CHUNK]


def test_a_sites_key_and_map_decode_every_row_of_z_as_the_am_attack_does(tmp_path, rng):
    """THREAT_MODEL.md: a stolen site state (key O_a) with its map R_a is the AM attack's
    calibration Q = Pi(O_a R_a); with the analyst's Z it decodes every other site's records."""
    from noisyanchor.common.attacks import relative_error
    from noisyanchor.common.linalg import polar_factor

    fed, keys, data = _federation(tmp_path, rng)
    part = load_site_model(fed.site_model("a"))
    q = polar_factor(keys["a"].rotation @ part.rotation)
    z = np.load(fed.store.result / "z.npy")
    result = json.loads((fed.store.result / "result.json").read_text())
    for pid in ("b", "c"):
        a, b = result["row_ranges"][pid]
        x_hat = (z[a:b] - part.shift) @ q.T
        # v = 0.01, d = 5: the alignment's residual rotation only (a random one: ~1.4).
        assert relative_error(x_hat, data[pid][0]) < 0.1


@pytest.mark.parametrize("method, sigma, v", [
    ("c-gdp", 0.0, 0.0), ("c-gdp-pn", 0.05, 0.0), ("i-gdp", 0.0, 0.0), ("aa-igdp", 0.0, 0.0),
    ("aa-igdp-pn", 0.05, 0.0), ("aa-igdp-an", 0.0, 0.01)])
def test_every_method_returns_a_map_that_predicts_like_the_analyst(tmp_path, rng, method,
                                                                  sigma, v):
    """Whatever the method, h(N_i(M_i(x))) at the site is the analyst's h on that record's row
    of Z, up to the private-data noise the upload added (none for the other methods)."""
    from noisyanchor.common.methods import Method
    from noisyanchor.participant.predict import SitePredictor
    from noisyanchor.participant.site_state import SiteKey, records_digest

    cfg = _config(tmp_path, method=method, sigma=sigma, v=v,
                  anchors=R if Method(method).uses_anchor else None)
    fed = Federation(cfg, Store(tmp_path / "store"))
    keys, records = {}, {}
    for k, pid in enumerate(IDS):
        x, y, tags = _records(rng, N)
        up, state = compute_upload(method, x, np.random.default_rng(k), shared_seed=b"s" * 32,
                                   anchors=R, sigma=sigma, v=v, translation_scale=10.0)
        arrays = {"data": up.data} | ({"anchor": up.anchor} if up.anchor is not None else {})
        _upload(fed, pid, arrays | {"labels": y, "tags": tags})
        keys[pid] = SiteKey("f", pid, method, state.key, None, D, tags, records_digest(x, y))
        records[pid] = x
    fed.wait(60)
    result = json.loads((fed.store.result / "result.json").read_text())
    z = np.load(fed.store.result / "z.npy")
    model = load_model((fed.store.result / MODEL_FILE).read_bytes())
    for pid in IDS:
        predictor = SitePredictor(keys[pid], load_site_model(fed.site_model(pid)))
        a, b = result["row_ranges"][pid]
        rows = predictor.rows(records[pid])
        # Z's rows carry the upload's noise sigma W_i (N_i is a rotation: norms are kept).
        diff = float(np.max(np.linalg.norm(rows - z[a:b], axis=1)))
        assert diff <= (1e-9 if not sigma else 6 * sigma * np.sqrt(D)), diff
        if not sigma:
            np.testing.assert_allclose(predictor.predict_proba(records[pid]),
                                       model.predict_proba(z[a:b]), rtol=0, atol=1e-9)


def test_the_analyst_compares_each_site_with_a_local_only_model_on_its_rows_of_z(rng):
    from noisyanchor.analyst.site_models import site_gain
    from noisyanchor.common.comparison import GAIN_FIELDS
    from noisyanchor.common.downstream import fit_downstream, held_out_metrics

    z, y, tags = _records(rng, 120)
    test = tags == TEST
    federation = np.where(np.arange(int(test.sum())) % 6 == 0, 0, y[test])
    fields = site_gain("logistic", z, y, tags, federation)
    assert set(GAIN_FIELDS) <= set(fields) and fields["test_rows"] == 30
    alone = fit_downstream(z, y, tags).utility.balanced_accuracy
    ours = held_out_metrics(y[test], federation)["balanced_accuracy"]
    assert fields["local_only_balanced_accuracy"] == pytest.approx(alone, abs=1e-12)
    assert fields["gain"] == pytest.approx(ours - alone, abs=1e-12)
    lo, hi = fields["gain_interval"]
    assert lo <= fields["gain"] <= hi
    assert fields["federation_trained_on"] == "every site's training rows of Z"


def test_the_result_from_memory_maps_and_z_on_disk_equals_the_in_memory_path(tmp_path, rng):
    """Issue 31: uploads read as memory maps and Z written into z.npy give the Z and the model
    metrics of the in-memory path (bundles copied into memory, Z an array) to 1e-12."""
    from noisyanchor.analyst.site_models import downstream_result
    from noisyanchor.analyst.storage import read_bundle
    from noisyanchor.common.alignment import align

    fed, _, _ = _federation(tmp_path, rng)
    result = json.loads((fed.store.result / "result.json").read_text())
    bundles = [read_bundle(fed.store.upload_path(pid), root=fed.store.root)[1] for pid in IDS]
    assert not any(isinstance(a, np.memmap) for b in bundles for a in b.values())
    cfg = fed.config
    in_memory = align(fed.method, [b["data"] for b in bundles], [b["anchor"] for b in bundles],
                      reference=0, max_iter=cfg.max_iter, tol=cfg.tol, precision=cfg.precision,
                      stopping=cfg.stopping, gopp_method=cfg.gopp_method)
    np.testing.assert_allclose(fed.store.result_array("z.npy"), in_memory.z, rtol=0, atol=1e-12)
    model, _, contributions, _ = downstream_result(
        federation_id="f", method=fed.method, participants=list(IDS), model_name="logistic",
        alignment=in_memory, labels=np.concatenate([b["labels"] for b in bundles]),
        tags=np.concatenate([b["tags"] for b in bundles]))
    for key in ("balanced_accuracy", "participant_only_balanced_accuracy", "c", "n_train"):
        assert result["model"][key] == pytest.approx(model[key], abs=1e-12)
    for pid in IDS:
        assert result["model"]["sites"][pid]["balanced_accuracy"] == pytest.approx(
            model["sites"][pid]["balanced_accuracy"], abs=1e-12)
    for j, row in contributions["matrix"].items():
        assert result["contributions"]["matrix"][j] == pytest.approx(row, abs=1e-12)


def test_an_out_of_core_fit_is_exported_and_scored_as_the_in_memory_one(tmp_path, rng):
    """``[model] fit = "out-of-core"``: result.json says so, and every site's part holds a
    logistic model that gives its rows of Z the labels the analyst scored."""
    fed = Federation(_config(tmp_path, fit="out-of-core"), Store(tmp_path / "store"))
    for k, pid in enumerate(IDS):
        x, y, tags = _records(rng, N)
        up, _ = compute_upload("aa-igdp-an", x, np.random.default_rng(k),
                               shared_seed=b"s" * 32, anchors=R, v=0.01)
        _upload(fed, pid, {"data": up.data, "anchor": up.anchor, "labels": y, "tags": tags})
    fed.wait(60)
    assert fed.state == "done"
    result = json.loads((fed.store.result / "result.json").read_text())
    assert result["model"]["fit"] == "out-of-core" and result["model"]["name"] == "logistic"
    z = np.load(fed.store.result / "z.npy")
    labels = np.load(fed.store.result / "labels.npy")
    for pid in IDS:
        part = load_site_model(fed.site_model(pid))
        a, b = result["row_ranges"][pid]
        test = np.load(fed.store.result / "tags.npy")[a:b] == TEST
        assert part.model.name == "logistic"
        assert result["model"]["sites"][pid]["accuracy"] == pytest.approx(float(np.mean(
            part.model.predict(z[a:b][test]) == labels[a:b][test])), abs=1e-12)

"""Every site leaves with a model it can use, over real processes and mutual TLS: three sites
upload once, each fetches its own part of the result and predicts records it never uploaded;
on its own test rows its predictions equal the analyst's for those rows of Z; another site's map
is refused; a model file altered to carry a pickle payload is refused at load without running
it; predict before the federation is done says whom it waits for; the local-only baseline kept
at upload spares predict the training table, with the same gain.json."""

from __future__ import annotations

import csv
import json
import pickle
import re
import stat
import time
from pathlib import Path

import numpy as np
import pytest
from e2e_support import FEDERATION, free_port

from noisyanchor.common.errors import PermissionDeniedError
from noisyanchor.common.models import load_model
from noisyanchor.common.splits import TEST
from noisyanchor.deploy.demo import wait_for_result, write_analyst, write_participant
from noisyanchor.deploy.launch import start, stop, wait_for_port
from noisyanchor.experiments.datasets import load_digits
from noisyanchor.participant.config import load_participant_config
from noisyanchor.participant.gain import GAIN_FILE
from noisyanchor.participant.local_baseline import LOCAL_BASELINE_FILE
from noisyanchor.participant.local_state import receipt_path
from noisyanchor.participant.predict import SITE_MODEL_DIGEST_FILE, SITE_MODEL_FILE, predict
from noisyanchor.participant.site_state import SITE_KEY_FILE, load_site_key

pytestmark = pytest.mark.e2e

IDS = ("p0", "p1", "p2")
#: Records each site holds back from its upload (its "Monday's records").
HELD_BACK = 40
#: Predicted probabilities at a site against the analyst's for the same rows of Z (absolute):
#: the same arithmetic on the same numbers, apart from BLAS summation order.
PROBA_ATOL = 1e-9
TIMEOUT = 120.0
NAMES = [f"f{j}" for j in range(64)]


def _csv(path: Path, x: np.ndarray, labels: np.ndarray | None = None) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", newline="") as fh:
        out = csv.writer(fh)
        out.writerow(NAMES + (["label"] if labels is not None else []))
        for k, row in enumerate(x):
            out.writerow([repr(float(v)) for v in row]
                         + ([int(labels[k])] if labels is not None else []))
    return path


def _read_predictions(path: Path) -> tuple[list[str], np.ndarray, np.ndarray]:
    with path.open(newline="") as fh:
        rows = list(csv.reader(fh))
    body = np.array(rows[1:], dtype=float)
    np.testing.assert_array_equal(body[:, 1], body[:, 0] + 1)  # record k on line k + 1
    return rows[0], body[:, 2].astype(int), body[:, 3:]


def _run(args: list, log: Path, procs: list, timeout: float = TIMEOUT) -> tuple[int, str]:
    proc = start(args, log)
    procs.append(proc)
    code = proc.wait(timeout)
    return code, log.read_text(errors="replace")


@pytest.fixture(scope="module")
def federation(tmp_path_factory):
    root = tmp_path_factory.mktemp("sites")
    digits = load_digits()
    order = np.random.default_rng(3).permutation(len(digits.x))
    shares = np.array_split(order, len(IDS))
    data, held = {}, {}
    for pid, rows in zip(IDS, shares, strict=True):
        keep, back = rows[HELD_BACK:], rows[:HELD_BACK]
        data[pid] = _csv(root / "data" / f"{pid}.csv", digits.x[keep], digits.y[keep])
        held[pid] = (digits.x[back], digits.y[back], digits.x[keep], digits.y[keep])
    files = write_analyst(root, IDS, federation_id=FEDERATION, method="aa-igdp-an", anchors=64,
                          dim=16, sigma=0.0, v=0.02, accept_collusion=False, data=data,
                          extra={"federation": {"projection_seed": 7}})
    procs: list = []
    port = free_port()
    analyst = start(["analyst", "serve", "--config", files.analyst_config, "--port", port],
                    root / "analyst.log")
    procs.append(analyst)
    try:
        assert wait_for_port(files.port_file, analyst) == port
        configs = {pid: write_participant(files, pid, federation_id=FEDERATION,
                                          address=f"127.0.0.1:{port}", method="aa-igdp-an",
                                          anchors=64, dim=16, projection_seed=7, sigma=0.0,
                                          v=0.02, timeout=TIMEOUT)
                   for pid in IDS}
        # Before any upload: predict says what the federation is waiting for.
        early = _run(["participant", "predict", "--config", configs["p0"], "--input",
                      data["p0"], "--out", root / "early.csv"], root / "early.log", procs)
        uploads = [start(["participant", "upload", "--config", configs[pid]],
                         root / f"{pid}-upload.log") for pid in IDS]
        procs.extend(uploads)
        for pid, p in zip(IDS, uploads, strict=True):
            assert p.wait(TIMEOUT) == 0, (root / f"{pid}-upload.log").read_text()
        wait_for_result(files.store, analyst, TIMEOUT)
        yield {"root": root, "files": files, "configs": configs, "held": held, "data": data,
               "early": early, "procs": procs}
    finally:
        for p in procs:
            stop(p)


def test_predict_before_the_federation_is_done_names_whom_it_waits_for(federation):
    code, text = federation["early"]
    assert code == 1
    assert "FAILED_PRECONDITION" in text and "waiting for the upload(s) of p0, p1, p2" in text
    assert not (federation["root"] / "early.csv").exists()


def test_every_site_predicts_records_it_never_uploaded(federation):
    root = federation["root"]
    for pid, cfg in federation["configs"].items():
        x_new, y_new, _, _ = federation["held"][pid]
        new = _csv(root / "new" / f"{pid}.csv", x_new)  # no label column
        out = root / "out" / f"{pid}.csv"
        code, text = _run(["participant", "predict", "--config", cfg, "--input", new, "--out",
                           out], root / f"{pid}-predict.log", federation["procs"])
        assert code == 0, text
        header, labels, proba = _read_predictions(out)
        assert header == ["row", "line", "label", *(f"p_{c}" for c in range(10))]
        assert len(labels) == HELD_BACK  # one output row per input row
        np.testing.assert_allclose(proba.sum(axis=1), 1.0, atol=1e-12)
        np.testing.assert_array_equal(labels, np.argmax(proba, axis=1))
        # Digits with anchor noise v = 0.02 and h = 16: the federation's model scores ~0.9;
        # chance is 0.1.
        assert np.mean(labels == y_new) > 0.75, (pid, np.mean(labels == y_new))
        assert "nothing about the records left this host" in text
        assert f"on {pid}'s" in text and "from joining" in text


def test_predict_with_labels_scores_the_federation_against_the_local_only_model(federation):
    root, pid = federation["root"], "p2"
    x_new, y_new, _, _ = federation["held"][pid]
    labelled = _csv(root / "labelled" / f"{pid}.csv", x_new, y_new)
    code, text = _run(["participant", "predict", "--config", federation["configs"][pid],
                       "--input", labelled, "--out", root / "labelled-out.csv", "--labels",
                       "label", "--json"], root / "labelled.log", federation["procs"])
    assert code == 0, text
    scored = json.loads(text[text.index("{"):])["labelled_gain"]
    _, labels, _ = _read_predictions(root / "labelled-out.csv")
    assert scored["test_rows"] == HELD_BACK and scored["label_column"] == "label"
    assert scored["federation_balanced_accuracy"] == pytest.approx(
        float(np.mean([np.mean(labels[y_new == c] == c) for c in np.unique(y_new)])),
        abs=1e-12)
    lo, hi = scored["gain_interval"]
    assert lo <= scored["gain"] <= hi


def test_predictions_on_own_test_rows_equal_the_analysts_rows_of_z(federation):
    store = federation["files"].store / "result"
    result = json.loads((store / "result.json").read_text())
    model = load_model((store / "downstream.model").read_bytes())
    z = np.load(store / "z.npy")
    root = federation["root"]
    for pid, cfg_path in federation["configs"].items():
        cfg = load_participant_config(cfg_path)
        key = load_site_key(cfg)
        _, _, x_up, y_up = federation["held"][pid]
        test = key.tags == TEST
        a, b = result["row_ranges"][pid]
        z_test = z[a:b][test]
        rows = _csv(root / "own" / f"{pid}.csv", x_up[test])
        out = root / "own-out" / f"{pid}.csv"
        code, text = _run(["participant", "predict", "--config", cfg_path, "--input", rows,
                           "--out", out], root / f"{pid}-own.log", federation["procs"])
        assert code == 0, text
        _, labels, proba = _read_predictions(out)
        np.testing.assert_array_equal(labels, model.predict(z_test))
        np.testing.assert_allclose(proba, model.predict_proba(z_test), rtol=0, atol=PROBA_ATOL)
        # The Python function gives the same, from the records as an array.
        again = predict(cfg, x_up[test])
        np.testing.assert_array_equal(again.labels, labels)
        # The analyst's per-site metrics are those rows' (same labels, same predictions).
        site = result["model"]["sites"][pid]
        assert site["n_test"] == int(test.sum())
        assert site["accuracy"] == pytest.approx(float(np.mean(labels == y_up[test])), abs=1e-12)


def test_gain_is_reported_and_the_state_folder_is_private(federation):
    for pid, cfg_path in federation["configs"].items():
        cfg = load_participant_config(cfg_path)
        gain = json.loads((cfg.state_dir / GAIN_FILE).read_text())
        assert gain["participant"] == pid and gain["test_rows"] > 0
        assert gain["gain"] == pytest.approx(gain["federation_balanced_accuracy"]
                                             - gain["local_only_balanced_accuracy"], abs=1e-12)
        assert gain["federation_balanced_accuracy"] == pytest.approx(
            gain["federation"]["analyst_reported_balanced_accuracy"], abs=1e-12)
        lo, hi = gain["gain_interval"]  # ~110 test rows a site: told, with its interval
        assert lo <= gain["gain"] <= hi and gain["gain_not_told"] is None
        assert stat.S_IMODE(cfg.state_dir.stat().st_mode) == 0o700
        kept = (SITE_KEY_FILE, SITE_MODEL_FILE, SITE_MODEL_DIGEST_FILE, GAIN_FILE,
                receipt_path(cfg).name, LOCAL_BASELINE_FILE, "local-baseline.sha256")
        for name in kept:
            assert stat.S_IMODE((cfg.state_dir / name).stat().st_mode) == 0o600, name
        # Only what prediction and status need: no pending seeds, no exchange key, no colluder
        # secrets.
        assert sorted(p.name for p in cfg.state_dir.iterdir()) == sorted(kept)
    root = federation["root"]
    code, text = _run(["participant", "status", "--config", federation["configs"]["p1"]],
                      root / "p1-status.log", federation["procs"])
    assert code == 0 and "gain on p1's" in text and "local-only" in text, text
    # Its own contribution aggregates, over the two other sites (never one of theirs alone).
    assert "contribution (leave-one-site-out" in text and "per site over 2" in text, text


def test_another_sites_map_is_refused(federation):
    cfg = load_participant_config(federation["configs"]["p0"])
    from noisyanchor.participant.run import analyst_client

    with analyst_client(cfg, 10.0) as client, pytest.raises(
            PermissionDeniedError, match="'p0' may fetch only its own site model, not 'p1'"):
        client.fetch_site_model("p1")


class _Payload:
    """Unpickling this creates ``marker``: the tests check it never happens."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return (Path.touch, (self.marker,))


def test_a_model_file_carrying_a_pickle_is_refused_without_running_it(federation):
    root = federation["root"]
    marker = root / "payload-ran"
    payload = pickle.dumps(_Payload(marker))
    cfg_path = federation["configs"]["p2"]
    cfg = load_participant_config(cfg_path)
    (cfg.state_dir / SITE_MODEL_FILE).write_bytes(payload)  # the site's cached copy
    new = _csv(root / "new" / "p2-again.csv", federation["held"]["p2"][0][:5])
    code, text = _run(["participant", "predict", "--config", cfg_path, "--input", new, "--out",
                       root / "p2-again.csv"], root / "p2-pickle.log", federation["procs"])
    assert code == 1 and "a Python pickle, which is never loaded" in text, text
    # At the analyst: the stored part replaced by the payload is refused, not sent.
    stored = federation["files"].store / "result" / "site-p2.model"
    original = stored.read_bytes()
    stored.write_bytes(payload)
    code, text = _run(["participant", "predict", "--config", cfg_path, "--input", new, "--out",
                       root / "p2-again.csv", "--refresh"], root / "p2-refresh.log",
                      federation["procs"])
    assert code == 1 and "DATA_LOSS" in text, text
    assert not marker.exists()
    stored.write_bytes(original)
    code, text = _run(["participant", "predict", "--config", cfg_path, "--input", new, "--out",
                       root / "p2-again.csv", "--refresh"], root / "p2-fixed.log",
                      federation["procs"])
    assert code == 0, text  # fetched again: the verified copy replaces the altered one
    assert len(_read_predictions(root / "p2-again.csv")[1]) == 5


def _keys(value) -> set:
    """Every mapping key of a JSON-like object, at any depth."""
    if isinstance(value, dict):
        return set(value).union(*(_keys(v) for v in value.values()))
    if isinstance(value, list):
        return set().union(*(_keys(v) for v in value))
    return set()


def test_each_site_sees_its_own_results_and_the_federations_never_anothers(federation):
    """Issue 30, item 3: ``participant status`` (JSON and text), the cached site model and
    gain.json carry no other site's entry (common.visibility); the analyst's store keeps all."""
    from noisyanchor.common.models.site_model import load_site_model

    root = federation["root"]
    for pid, cfg_path in federation["configs"].items():
        others = set(IDS) - {pid}
        code, text = _run(["participant", "status", "--json", "--config", cfg_path],
                          root / f"{pid}-status.log", federation["procs"])
        assert code == 0, text
        status = json.loads(text[text.index("{"):])
        assert status["result"]["row_ranges"].keys() == {pid}
        assert status["result"]["model"]["sites"].keys() == {pid}
        assert not _keys(status) & others, (pid, _keys(status) & others)
        code, text = _run(["participant", "status", "--config", cfg_path],
                          root / f"{pid}-status-text.log", federation["procs"])
        assert code == 0 and f"on {pid}'s" in text
        assert not any(f"on {other}'s" in text for other in others), text
        cfg = load_participant_config(cfg_path)
        cached = load_site_model((cfg.state_dir / SITE_MODEL_FILE).read_bytes())
        assert not _keys(cached.federation_metrics) & others
        assert not _keys(json.loads((cfg.state_dir / GAIN_FILE).read_text())) & others
    stored = json.loads((federation["files"].store / "result" / "result.json").read_text())
    assert stored["row_ranges"].keys() == set(IDS)



def _json(text: str) -> dict:
    return json.loads(text[text.index("{"):])


def test_a_site_sees_its_own_state_and_its_committed_upload_without_the_analyst(federation):
    """Issue 34, item 3: a rerun of a committed upload says so at once with its receipt, with
    the analyst running and once it is stopped (SIGTERM); ``participant status`` then shows
    what the site keeps and says the analyst is unreachable, with the keys of its online
    answer."""
    root, procs = federation["root"], federation["procs"]
    cfg_path = federation["configs"]["p1"]
    cfg = load_participant_config(cfg_path)
    receipt = json.loads(receipt_path(cfg).read_text())
    code, text = _run(["participant", "status", "--json", "--config", cfg_path],
                      root / "p1-online.json", procs)
    assert code == 0, text
    online = _json(text)
    assert online["analyst_reachable"] is True and online["source"] == "analyst"
    assert online["upload_receipt"] == receipt and online["site_model"]["kept"] is True
    for analyst in ("running", "stopped"):
        code, text = _run(["participant", "upload", "--config", cfg_path],
                          root / f"p1-again-{analyst}.log", procs)
        assert code == 0, text
        assert re.search(r"p1: upload of \d+ records \(\d+ bytes\) already committed; receipt "
                         rf"{receipt['receipt']}, received .+ UTC \(.+ ago\), kept in ", text), text
        assert ("the analyst still holds it" in text) is (analyst == "running"), text
        if analyst == "running":
            stop(procs[0])  # the analyst, SIGTERM
    started = time.monotonic()
    code, text = _run(["participant", "status", "--config", cfg_path], root / "p1-offline.log",
                      procs)
    took = time.monotonic() - started
    assert code == 0, text
    assert f"the analyst at {cfg.analyst} did not answer within 3 s: nothing listens" in text
    assert f"upload committed: receipt {receipt['receipt']}" in text
    assert "site model kept in " in text and "gain on p1's" in text, text
    assert re.search(r"the analyst's last answer, .+ ago\): federation \S+ done", text), text
    code, text = _run(["participant", "status", "--json", "--config", cfg_path],
                      root / "p1-offline.json", procs)
    assert code == 0, text
    offline = _json(text)
    assert offline.keys() == online.keys()
    assert offline["analyst_reachable"] is False and offline["source"] == "local"
    assert offline["unreachable"]["address"] == cfg.analyst
    assert offline["gain"] == online["gain"] and offline["state"] == "done"
    print(f"participant status with the analyst stopped: {took:.1f} s")  # measured, not checked


def test_predict_needs_no_network_once_the_site_model_is_kept(federation):
    """Last in this module: the analyst is stopped, and every site still predicts."""
    root = federation["root"]
    stop(federation["procs"][0])  # the analyst
    for pid, cfg in federation["configs"].items():
        new = _csv(root / "new" / f"{pid}-offline.csv", federation["held"][pid][0][:3])
        code, text = _run(["participant", "predict", "--config", cfg, "--input", new, "--out",
                           root / "offline" / f"{pid}.csv"], root / f"{pid}-offline.log",
                          federation["procs"])
        assert code == 0, text
        assert len(_read_predictions(root / "offline" / f"{pid}.csv")[1]) == 3


def test_predict_with_the_kept_baseline_never_opens_the_training_table(federation):
    """Issue 31, item 3: the local-only baseline is trained when the upload commits; with the
    site's table moved away predict still tells the gain, the same gain.json as a state folder
    without the baseline (from before it was kept), which trains it from the table once."""
    root, pid = federation["root"], "p1"
    cfg_path = federation["configs"][pid]
    cfg = load_participant_config(cfg_path)
    new = _csv(root / "new" / "p1-moved.csv", federation["held"][pid][0][:7])
    argv = ["participant", "predict", "--config", cfg_path, "--input", new, "--out",
            root / "p1-moved-out.csv"]
    data = Path(cfg.data)
    moved = data.with_name("moved-away.csv")
    data.rename(moved)
    try:
        (cfg.state_dir / GAIN_FILE).unlink()
        code, text = _run(argv, root / "p1-moved.log", federation["procs"])
        assert code == 0 and f"on {pid}'s" in text and "from joining" in text, text
        kept = json.loads((cfg.state_dir / GAIN_FILE).read_text())
    finally:
        moved.rename(data)
    for name in (GAIN_FILE, LOCAL_BASELINE_FILE, "local-baseline.sha256"):
        (cfg.state_dir / name).unlink()
    code, text = _run(argv, root / "p1-trained.log", federation["procs"])
    assert code == 0, text
    assert json.loads((cfg.state_dir / GAIN_FILE).read_text()) == kept
    assert (cfg.state_dir / LOCAL_BASELINE_FILE).is_file()  # kept, for the next time

"""The analyst screens every upload before alignment and applies ``[federation] screening``:
``refuse`` discards the named site's upload until it uploads again, ``exclude`` aligns the
others exactly as a federation without that site, ``accept`` goes on and records it."""

from __future__ import annotations

import json
import secrets

import numpy as np
import pytest

from noisyanchor.analyst.config import AnalystConfig
from noisyanchor.analyst.federation import SCREENING_FILE, Federation
from noisyanchor.analyst.release_service import load_collection
from noisyanchor.analyst.screening import REFUSED
from noisyanchor.analyst.storage import Store
from noisyanchor.common.errors import FederationFailedError, PreconditionError
from noisyanchor.common.progress import result_lines
from noisyanchor.common.tomlconfig import TlsFiles
from noisyanchor.common.wire import BundleStream, bundle_spec, iter_chunks
from noisyanchor.participant.compute import compute_upload

IDS, N, D, R = ("a", "b", "c", "e"), 60, 5, 12


def _config(tmp_path, name: str, participants=IDS, **changes) -> AnalystConfig:
    tls = TlsFiles(tmp_path / "ca.pem", tmp_path / "a.pem", tmp_path / "a.key")
    return AnalystConfig(**dict(
        federation_id="f", participants=participants, method="aa-igdp", anchors=R, dim=D,
        sigma=0.0, v=0.0, reference="a", max_iter=100, tol=1e-9,
        output_dir=tmp_path / name, tls=tls) | changes)


@pytest.fixture
def tables(rng):
    """Each site's records, labels and train/test tags; b's column 2 in another unit
    (x10,000): its upload and a fixed one."""
    xs = {pid: rng.standard_normal((N, D)) for pid in IDS}
    labels = {pid: (x[:, 0] + 0.3 * rng.standard_normal(N) > 0).astype("<i8")
              for pid, x in xs.items()}
    tags = {pid: (np.arange(N) % 3 == 0).astype("|i1") * 2 for pid in IDS}  # every third: test
    poisoned = xs["b"].copy()
    poisoned[:, 2] *= 1e4
    return xs, poisoned, labels, tags


def _upload(fed: Federation, pid: str, x, labels, tags, seed: bytes, key: int) -> None:
    up, _ = compute_upload("aa-igdp", x, np.random.default_rng(key), shared_seed=seed,
                           anchors=R)
    arrays = {"data": up.data, "anchor": up.anchor, "labels": labels, "tags": tags}
    fed.upload(pid, BundleStream(bundle_spec("f", "aa-igdp", arrays),
                                 iter_chunks(arrays, chunk_size=4096), None))


def _run(fed: Federation, tables, seed: bytes, sites=IDS, poisoned=True) -> dict:
    xs, bad, labels, tags = tables
    for k, pid in enumerate(IDS):
        if pid in sites:
            _upload(fed, pid, bad if pid == "b" and poisoned else xs[pid], labels[pid],
                    tags[pid], seed, k)
    fed.wait(120)
    return fed.status("a")  # what another site sees


def test_refuse_aligns_nothing_names_the_site_and_goes_on_once_it_uploads_again(tmp_path,
                                                                                tables):
    seed = secrets.token_bytes(32)
    fed = Federation(_config(tmp_path, "store"), Store(tmp_path / "store"))
    status = _run(fed, tables, seed)
    assert status["state"] == "collecting" and status["committed"] == ["a", "c", "e"]
    assert not fed.store.result.exists()
    [told] = status["withdrawn"]
    assert told.participant_id == "b" and told.reason.startswith(REFUSED)
    assert "run 'noisyanchor participant upload' again" in told.reason
    kept = json.loads((fed.store.root / SCREENING_FILE).read_text())
    assert kept["policy"] == "refuse" and kept["flagged"] == ["b"]
    assert {f["check"] for f in kept["findings"]} >= {"spread"}
    # b fixes its table and uploads again: screened again, aligned, done.
    xs, _, labels, tags = tables
    fed.rejoin("b")  # what taking part again does (participant upload: Status rejoin)
    _upload(fed, "b", xs["b"], labels["b"], tags["b"], seed, 1)
    fed.wait(120)
    status = fed.status("a")
    assert status["state"] == "done" and not status["withdrawn"]
    result = json.loads(status["result_json"])
    assert result["participants"] == list(IDS) and result["screening"]["findings"] == []


def test_exclude_gives_the_others_exactly_the_federation_without_that_site(tmp_path, tables):
    seed = secrets.token_bytes(32)
    fed = Federation(_config(tmp_path, "with", screening="exclude"), Store(tmp_path / "with"))
    _run(fed, tables, seed)
    result = json.loads(fed.store.read_result("result.json"))  # the operator's whole result
    assert result["participants"] == ["a", "c", "e"]
    assert result["screening"]["excluded"] == ["b"] and result["screening"]["policy"] == \
        "exclude"
    others = ("a", "c", "e")
    alone = Federation(_config(tmp_path, "without", participants=others),
                       Store(tmp_path / "without"))
    _run(alone, tables, seed, sites=others)
    reference = json.loads(alone.store.read_result("result.json"))
    z, z_ref = (np.load(tmp_path / name / "result" / "z.npy") for name in ("with", "without"))
    np.testing.assert_allclose(z, z_ref, rtol=0, atol=1e-9)
    for pid in others:  # each remaining site's balanced accuracy, to 1e-9
        assert result["model"]["sites"][pid]["balanced_accuracy"] == pytest.approx(
            reference["model"]["sites"][pid]["balanced_accuracy"], abs=1e-9)
    [line] = [x for x in result_lines(result) if "screening" in x]
    assert line.startswith("  screening (exclude): b excluded: b's records are spread")
    collection = load_collection(fed)  # DP releases: rows and maps of the aligned sites only
    assert collection.participants == others
    with pytest.raises(PreconditionError, match="'b' has no rows in the aligned result"):
        collection.scores("b", np.ones(D))
    with pytest.raises(FederationFailedError, match=r"'b' was excluded .* by the analyst's "
                       r"screening before alignment"):
        fed.site_model("b")


def test_accept_aligns_every_site_and_records_the_finding(tmp_path, tables):
    fed = Federation(_config(tmp_path, "store", screening="accept"),
                     Store(tmp_path / "store"))
    status = _run(fed, tables, secrets.token_bytes(32))
    result = json.loads(status["result_json"])
    assert status["state"] == "done" and result["participants"] == list(IDS)
    assert result["screening"]["flagged"] == ["b"] and result["screening"]["excluded"] == []
    [line] = [x for x in result_lines(result) if "screening" in x]
    assert line.startswith("  screening (accept): b aligned anyway: b's records are spread")

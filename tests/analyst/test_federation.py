"""The analyst's state machine in-process: one-shot uploads, alignment result, attack from the
store."""

from __future__ import annotations

import json
import os
import secrets
import subprocess
import sys

import numpy as np
import pytest

from noisyanchor.analyst.attack import attack_store
from noisyanchor.analyst.config import AnalystConfig
from noisyanchor.analyst.federation import Federation
from noisyanchor.analyst.storage import Store
from noisyanchor.common.attacks import relative_error
from noisyanchor.common.errors import (
    AlreadyExistsError,
    InvalidInputError,
    NotFoundError,
    PermissionDeniedError,
    PreconditionError,
)
from noisyanchor.common.gdp import anchor_from_seed
from noisyanchor.common.json_vocabulary import problems
from noisyanchor.common.tomlconfig import TlsFiles
from noisyanchor.common.wire import BundleStream, bundle_spec, iter_chunks, proto_receipt
from noisyanchor.participant.compute import compute_upload

P, N, D, R = 3, 30, 5, 12


def _config(tmp_path, **changes) -> AnalystConfig:
    tls = TlsFiles(tmp_path / "ca.pem", tmp_path / "a.pem", tmp_path / "a.key")
    base = dict(federation_id="f", participants=("a", "b", "c"), method="aa-igdp", anchors=R,
                dim=D, sigma=0.0, v=0.0, reference="a", max_iter=100, tol=1e-9,
                output_dir=tmp_path / "store", tls=tls, accept_collusion=True)
    return AnalystConfig(**(base | changes))


def _send(fed, pid, kind, arrays, *, trailer=False):
    """Commit ``arrays``: digests in the header, or (``trailer=True``) after the chunks."""
    spec = bundle_spec("f", "aa-igdp", arrays)
    stream = BundleStream(spec.without_digests() if trailer else spec,
                          iter_chunks(arrays, chunk_size=100),
                          [a.sha256 for a in spec.arrays] if trailer else None)
    action = fed.upload if kind == "upload" else fed.disclose
    return action(pid, stream)


@pytest.fixture
def uploads(rng):
    seed = secrets.token_bytes(32)
    xs = [rng.standard_normal((N, D)) for _ in range(P)]
    out = [compute_upload("aa-igdp", x, np.random.default_rng(i), shared_seed=seed, anchors=R)
           for i, x in enumerate(xs)]
    return seed, xs, out


def test_uploads_align_and_the_colluder_attack_recovers_the_others_exactly(tmp_path, rng,
                                                                            uploads):
    seed, xs, out = uploads
    fed = Federation(_config(tmp_path), Store(tmp_path / "store"))
    for pid, (up, _) in zip("abc", out, strict=True):
        assert fed.status(pid)["state"] == "collecting"
        _send(fed, pid, "upload", {"data": up.data, "anchor": up.anchor,
                                   "labels": np.zeros(N, "<i8"), "tags": np.zeros(N, "|i1")})
    fed.wait(60)
    status = fed.status("b")
    assert status["state"] == "done" and status["committed"] == ["a", "b", "c"]
    # Each site sees its own entries only (issue 30, item 3); the store keeps them all.
    assert json.loads(status["result_json"])["row_ranges"] == {"b": [N, 2 * N]}
    result = json.loads((tmp_path / "store" / "result" / "result.json").read_text())
    assert result["row_ranges"] == {"a": [0, N], "b": [N, 2 * N], "c": [2 * N, 3 * N]}
    z = np.load(tmp_path / "store" / "result" / "z.npy")
    # Noiseless Procrustes: Z = X O_s + 1 Psi_s^T with s = a (SPEC section 2), to 1e-9.
    key_a = out[0][1].key
    np.testing.assert_allclose(z, np.vstack(xs) @ key_a.rotation + key_a.translation, atol=1e-9)

    with pytest.raises(PreconditionError, match="exactly one"):
        attack_store(tmp_path / "store")
    _send(fed, "a", "disclosure", {"data": xs[0], "rotation": key_a.rotation,
                                   "translation": key_a.translation,
                                   "anchor": anchor_from_seed(seed, R, D)})
    summary = attack_store(tmp_path / "store")
    assert summary["colluder"] == "a" and summary["targets"] == ["b", "c"]
    for name, files in summary["reconstructions"].items():
        for pid, path in files.items():
            err = relative_error(np.load(path), xs["abc".index(pid)])
            assert err < 1e-8, name  # exact without noise (SPEC section 3)


def test_the_analyst_alone_attacks_from_known_records_and_a_public_sample(tmp_path, uploads):
    """``--alone``: no disclosure is read; d + 1 records of participant b known to the analyst
    give b's records exactly (SPEC section 3, known input), the known-sample attacks run on
    everyone, and what lacks side knowledge is skipped with the reason."""
    store, xs = _aligned_store_with_two_disclosures(tmp_path, uploads)
    rng = np.random.default_rng(3)
    known = {"b": xs[1][rng.permutation(N)[:D + 1]]}
    public = rng.standard_normal((200, D))
    summary = attack_store(store, alone=True, known=known, public=public)
    assert summary["colluder"] is None and summary["targets"] == ["a", "b", "c"]
    path = summary["reconstructions"][f"known_input_{D + 1}"]["b"]
    assert relative_error(np.load(path), xs[1]) < 1e-9
    assert set(summary["reconstructions"]["known_sample"]) == {"a", "b", "c"}
    assert "known_anchor" in summary["skipped"] and "colluder" in summary["skipped"]["op"]
    assert summary["diagnostics"][f"known_input_{D + 1}"]["b"]["rank"] == D
    with pytest.raises(InvalidInputError, match="not participants"):
        attack_store(store, alone=True, known={"z": known["b"]})


def _aligned_store_with_two_disclosures(tmp_path, uploads):
    seed, xs, out = uploads
    fed = Federation(_config(tmp_path), Store(tmp_path / "store"))
    for pid, (up, _) in zip("abc", out, strict=True):
        _send(fed, pid, "upload", {"data": up.data, "anchor": up.anchor,
                                   "labels": np.zeros(N, "<i8"), "tags": np.zeros(N, "|i1")})
    fed.wait(60)
    for k, pid in enumerate("ab"):
        key = out[k][1].key
        _send(fed, pid, "disclosure", {"data": xs[k], "rotation": key.rotation,
                                       "translation": key.translation,
                                       "anchor": anchor_from_seed(seed, R, D)})
    return tmp_path / "store", xs


def test_attack_names_its_colluder_when_several_disclosed(tmp_path, uploads, toy_plugins):
    """Regression (issue 13): the refusal points to --colluder, which exists; the chosen
    colluder's disclosure recovers the others exactly, and plug-in attacks run too."""
    store, xs = _aligned_store_with_two_disclosures(tmp_path, uploads)
    with pytest.raises(PreconditionError, match="--colluder"):
        attack_store(store)
    summary = attack_store(store, colluder="b")
    assert summary["colluder"] == "b" and summary["targets"] == ["a", "c"]
    assert "toy_centred" in summary["reconstructions"]
    assert summary["noise_level"]["source"] == "anchor residuals"
    assert summary["noise_level"]["estimated_from_residuals"] < 1e-9  # noiseless anchors
    for name, files in summary["reconstructions"].items():
        if name != "toy_centred":
            for pid, path in files.items():
                assert relative_error(np.load(path), xs["abc".index(pid)]) < 1e-8, name
    # Several colluders jointly (issue 33, item 5): both disclosures, one target left.
    for chosen in (["a", "b"], "all"):
        joint = attack_store(store, tmp_path / "joint", colluder=chosen)
        assert joint["colluders"] == ["a", "b"] and joint["targets"] == ["c"]
        path = joint["reconstructions"]["am"]["c"]
        assert relative_error(np.load(path), xs[2]) < 1e-8  # exact without noise
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(toy_plugins),
                                                        os.environ.get("PYTHONPATH", "")])}
    run = subprocess.run([sys.executable, "-m", "noisyanchor", "attack", "--store", str(store),
                          "--colluder", "a", "--v", "0", "--json", "--out",
                          str(tmp_path / "out")], capture_output=True, text=True, env=env,
                         timeout=120, check=True)
    cli = json.loads(run.stdout)
    assert not problems(cli)  # the --json vocabulary (tests/cli/test_json_vocabulary.py)
    assert cli["colluder"] == "a" and cli["noise_level"] == {
        "v": 0.0, "source": "given", "estimated_from_residuals": cli["noise_level"][
            "estimated_from_residuals"]}
    assert "toy_centred" in cli["reconstructions"]


def test_restarted_federation_keeps_uploads_and_refuses_late_changes(tmp_path, uploads):
    _, _, out = uploads
    arrays = {"data": out[0][0].data, "anchor": out[0][0].anchor,
              "labels": np.zeros(N, "<i8"), "tags": np.zeros(N, "|i1")}
    first = _send(Federation(_config(tmp_path), Store(tmp_path / "store")), "a", "upload",
                  arrays)
    again = Federation(_config(tmp_path), Store(tmp_path / "store"))
    assert again.status("a")["committed"] == ["a"]
    retry = _send(again, "a", "upload", arrays)
    assert retry.already_committed and retry.receipt == first.receipt


@pytest.mark.parametrize(("first_trailer", "retry_trailer"),
                         [(True, True), (True, False), (False, True)])
def test_identical_retries_get_the_same_receipt_wherever_the_digests_travel(
        tmp_path, uploads, first_trailer, retry_trailer):
    """Digests in the header or in the trailer: the same content has one receipt, a retry of
    it is answered as already committed, and a different one is refused (after reading it,
    when only its trailer can tell)."""
    _, _, out = uploads
    arrays = {"data": out[0][0].data, "anchor": out[0][0].anchor,
              "labels": np.zeros(N, "<i8"), "tags": np.zeros(N, "|i1")}
    fed = Federation(_config(tmp_path), Store(tmp_path / "store"))
    first = _send(fed, "a", "upload", arrays, trailer=first_trailer)
    assert first.receipt == proto_receipt(bundle_spec("f", "aa-igdp", arrays), "a")
    retry = _send(fed, "a", "upload", arrays, trailer=retry_trailer)
    assert retry.already_committed and retry.receipt == first.receipt
    changed = arrays | {"data": arrays["data"] + 1.0}  # same shapes, other bytes
    with pytest.raises(AlreadyExistsError, match="differs"):
        _send(fed, "a", "upload", changed, trailer=retry_trailer)
    wider = arrays | {"data": np.vstack([arrays["data"], arrays["data"][:1]]),
                      "labels": np.zeros(N + 1, "<i8"), "tags": np.zeros(N + 1, "|i1")}
    with pytest.raises(AlreadyExistsError, match="differs"):
        _send(fed, "a", "upload", wider, trailer=retry_trailer)
    assert Store(tmp_path / "store").committed(fed.store.uploads) == ["a"]


def test_disclosures_need_the_federation_to_accept_collusion(tmp_path, rng):
    fed = Federation(_config(tmp_path, accept_collusion=False), Store(tmp_path / "store"))
    arrays = {"data": rng.standard_normal((N, D)), "rotation": np.eye(D),
              "translation": np.zeros(D), "anchor": rng.standard_normal((R, D))}
    with pytest.raises(PermissionDeniedError, match="accept_collusion"):
        _send(fed, "a", "disclosure", arrays)


def test_attack_needs_an_analyst_store(tmp_path):
    with pytest.raises(NotFoundError, match="not an analyst store"):
        attack_store(tmp_path)


def test_an_upload_with_another_preprocessing_digest_is_refused_before_anything_is_stored(
        tmp_path, uploads):
    from noisyanchor.common.errors import InvalidInputError
    from noisyanchor.common.schema import RecordSchema
    from noisyanchor.common.tabular import NumericColumn, TabularSchema

    tabular = TabularSchema(tuple(NumericColumn(f"c{j}", center=0.0, scale=2.0)
                                  for j in range(D)))
    fed = Federation(_config(tmp_path, schema=RecordSchema.typed(tabular)),
                     Store(tmp_path / "store"))
    up = uploads[2][0][0]
    arrays = {"data": up.data, "anchor": up.anchor, "labels": np.zeros(N, "<i8"),
              "tags": np.zeros(N, "|i1")}
    other = TabularSchema(tuple(NumericColumn(f"c{j}", center=0.0, scale=3.0) for j in range(D)))
    for digest in (b"", other.digest()):
        spec = bundle_spec("f", "aa-igdp", arrays, preprocessing_sha256=digest)
        with pytest.raises(InvalidInputError, match="preprocessed differently"):
            fed.upload("a", BundleStream(spec, iter_chunks(arrays), None))
        assert not any((tmp_path / "store" / "uploads").iterdir())
    spec = bundle_spec("f", "aa-igdp", arrays, preprocessing_sha256=tabular.digest())
    fed.upload("a", BundleStream(spec, iter_chunks(arrays), None))
    assert fed.status("a")["committed"] == ["a"]


def test_a_deadline_extended_in_the_store_applies_to_the_running_federation(tmp_path, uploads):
    """Past its configured deadline the federation refuses uploads; once the store's
    deadline file moves it later, the same (running) federation answers the new deadline in
    Status and FederationInfo and takes the upload, with no restart."""
    import datetime as dt

    from noisyanchor.analyst.live_deadline import write_deadline

    _, _, out = uploads
    passed = dt.datetime.now(dt.UTC) - dt.timedelta(seconds=1)
    fed = Federation(_config(tmp_path, deadline=passed), Store(tmp_path / "store"))
    arrays = {"data": out[0][0].data, "anchor": out[0][0].anchor,
              "labels": np.zeros(N, "<i8"), "tags": np.zeros(N, "|i1")}
    with pytest.raises(PreconditionError, match="closed at its deadline"):
        _send(fed, "a", "upload", arrays)
    later = (dt.datetime.now(dt.UTC) + dt.timedelta(days=3)).replace(microsecond=0)
    write_deadline(tmp_path / "store", later)
    assert fed.status("a")["deadline_unix"] == fed.describe().deadline_unix == later.timestamp()
    assert not _send(fed, "a", "upload", arrays).already_committed

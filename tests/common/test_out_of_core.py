"""The downstream logistic model fitted out of core (SGD on chunks of a memory-mapped Z): as
accurate as the in-memory fit within a stated tolerance, deterministic, exported as the logistic
model file the sites predict with, chosen by ``auto`` above the stated size."""

from __future__ import annotations

import numpy as np
import pytest

from noisyanchor.common import chunks, downstream
from noisyanchor.common.downstream import fit_downstream, fits_out_of_core
from noisyanchor.common.errors import InvalidInputError
from noisyanchor.common.models import LogisticModel, export_estimator, load_model
from noisyanchor.common.out_of_core import balanced_accuracy_counts
from noisyanchor.common.splits import TEST, split_tags

#: Test balanced accuracy the out-of-core fit may lose against the in-memory one (issue 31).
TOLERANCE = 0.03


def _data(name: str):
    from sklearn.datasets import load_breast_cancer, load_digits

    x, y = {"digits": load_digits, "breast-cancer": load_breast_cancer}[name](return_X_y=True)
    tags = split_tags(y, np.random.default_rng(0), test_fraction=0.2, validation_fraction=0.2)
    return x, y, tags


def _on_disk(tmp_path, x: np.ndarray) -> np.ndarray:
    """``x`` as a memory map of an .npy file, as the analyst reads z.npy."""
    np.save(tmp_path / "z.npy", x)
    return np.load(tmp_path / "z.npy", mmap_mode="r")


@pytest.fixture
def tiny_chunks(monkeypatch):
    monkeypatch.setattr(chunks, "CHUNK_ROWS", 128)  # digits: 15 chunks


#: Digits fits take 5-10 s each on a loaded host: slow.
NAMES = [pytest.param("digits", marks=pytest.mark.slow), "breast-cancer"]


@pytest.mark.parametrize("name", NAMES)
def test_out_of_core_is_within_the_tolerance_of_the_in_memory_fit(tmp_path, tiny_chunks, name):
    x, y, tags = _data(name)
    z = _on_disk(tmp_path, x)
    in_memory = fit_downstream(z, y, tags, fit="in-memory")
    out = fit_downstream(z, y, tags, fit="out-of-core")
    assert type(out.estimator).__name__ == "SGDClassifier"
    assert out.utility.balanced_accuracy >= in_memory.utility.balanced_accuracy - TOLERANCE
    assert out.utility.n_train == in_memory.utility.n_train
    # The same preprocessing u = (z - mu) / s (two streaming passes either way).
    np.testing.assert_array_equal(out.center, in_memory.center)
    assert out.scale == in_memory.scale


@pytest.mark.slow
def test_chunked_scores_are_scikit_learns_balanced_accuracy(tmp_path, tiny_chunks):
    from sklearn.metrics import balanced_accuracy_score

    x, y, tags = _data("digits")
    out = fit_downstream(_on_disk(tmp_path, x), y, tags, fit="out-of-core")
    test = tags == TEST
    assert out.utility.balanced_accuracy == pytest.approx(
        balanced_accuracy_score(y[test], out.predict(x[test])), abs=1e-12)
    assert balanced_accuracy_counts(np.array([1.0, 0.0, 3.0]), np.array([2.0, 0.0, 4.0])) == \
        pytest.approx((0.5 + 0.75) / 2, abs=1e-15)  # a class without rows is not counted


def test_out_of_core_is_deterministic(tmp_path, tiny_chunks):
    x, y, tags = _data("breast-cancer")
    z = _on_disk(tmp_path, x)
    first, second = (fit_downstream(z, y, tags, fit="out-of-core") for _ in range(2))
    np.testing.assert_array_equal(first.estimator.coef_, second.estimator.coef_)
    np.testing.assert_array_equal(first.estimator.intercept_, second.estimator.intercept_)
    assert first.utility == second.utility


@pytest.mark.parametrize("name", NAMES)
def test_the_exported_model_predicts_at_the_site_as_at_the_analyst(tmp_path, tiny_chunks, name):
    x, y, tags = _data(name)
    z = _on_disk(tmp_path, x)
    fitted = fit_downstream(z, y, tags, fit="out-of-core")
    exported = export_estimator(fitted.estimator, fitted.center, fitted.scale, x[tags == TEST])
    site = load_model(exported.to_bytes())  # what a site reads from its site model file
    assert isinstance(site, LogisticModel) and site.name == "logistic"
    u = (x - fitted.center) / fitted.scale
    decisions = fitted.estimator.decision_function(u).reshape(len(x), -1)
    np.testing.assert_allclose(site._decision(site.preprocessing.apply(x)), decisions, rtol=0,
                               atol=1e-12)
    np.testing.assert_array_equal(site.predict(x), fitted.predict(x))
    np.testing.assert_allclose(site.predict_proba(x), exported.predict_proba(x), rtol=0,
                               atol=1e-12)
    if name == "breast-cancer":  # two classes: the probabilities are SGD's own too
        np.testing.assert_allclose(site.predict_proba(x), fitted.estimator.predict_proba(u),
                                   rtol=0, atol=1e-12)


def test_auto_fits_out_of_core_above_the_stated_size(tmp_path, tiny_chunks, monkeypatch):
    x, y, tags = _data("breast-cancer")
    z = _on_disk(tmp_path, x)
    n_train = int(np.count_nonzero(tags == 0))
    monkeypatch.setattr(downstream, "IN_MEMORY_MAX_BYTES", 8 * n_train * x.shape[1])
    assert type(fit_downstream(z, y, tags).estimator).__name__ == "LogisticRegression"
    monkeypatch.setattr(downstream, "IN_MEMORY_MAX_BYTES", 8 * n_train * x.shape[1] - 1)
    assert type(fit_downstream(z, y, tags).estimator).__name__ == "SGDClassifier"
    # Only the logistic model has an out-of-core path: the others stay in memory.
    assert not fits_out_of_core("auto", "mlp", n_train, x.shape[1])
    assert fits_out_of_core("in-memory", "logistic", 10**9, 10**3) is False


@pytest.mark.parametrize("kind", ["RLIMIT_AS", "RLIMIT_DATA"])
def test_the_stated_size_follows_a_process_memory_limit(monkeypatch, kind):
    import resource

    limited = getattr(resource, kind)
    monkeypatch.setattr(resource, "getrlimit", lambda k: (
        1 << 30 if k == limited else resource.RLIM_INFINITY, resource.RLIM_INFINITY))
    assert downstream._usable_memory() <= 1 << 30  # prlimit --as or --data=1GiB: at most that


def test_an_unknown_fit_or_an_out_of_core_mlp_is_refused():
    with pytest.raises(InvalidInputError, match="unknown fit 'streaming'; expected one of auto"):
        fits_out_of_core("streaming", "logistic", 10, 2)
    with pytest.raises(InvalidInputError, match="only the logistic model can be fitted out of"):
        fits_out_of_core("out-of-core", "mlp", 10, 2)

"""The analyst's downstream model is pluggable; built-in models are deterministic."""

import numpy as np
import pytest

from noisyanchor.common.downstream import evaluate_utility
from noisyanchor.common.errors import InvalidInputError
from noisyanchor.common.splits import TEST, TRAIN, VALIDATION


@pytest.fixture
def task(rng):
    y = np.arange(300) % 3
    z = rng.standard_normal((300, 6)) + 3.0 * np.eye(6)[y]
    tags = np.resize([TRAIN] * 6 + [VALIDATION, TEST, TEST, TRAIN], 300)
    return z, y, tags


@pytest.mark.parametrize("model", ["logistic", "mlp", "knn"])
def test_built_in_models_learn_and_repeat_exactly(task, model):
    a = evaluate_utility(*task, model=model)
    b = evaluate_utility(*task, model=model)
    assert a == b  # fixed initialisation and data order: identical reruns
    assert a.balanced_accuracy > 0.9  # well-separated classes


def test_knn_chooses_its_neighbour_count_on_validation(task):
    from noisyanchor.common.downstream import K_GRID

    util = evaluate_utility(*task, model="knn")
    assert util.c in K_GRID and util.validation_balanced_accuracy is not None


def test_a_callable_model_is_used_for_every_fit(task):
    from sklearn.neighbors import KNeighborsClassifier

    seen = []

    def knn(c):
        seen.append(c)
        return KNeighborsClassifier(n_neighbors=5)

    util = evaluate_utility(*task, model=knn)
    # Four validation fits over the C grid; the best one also predicts the test rows (a refit on
    # the same training rows would give the same model).
    assert len(seen) == 4
    assert util.balanced_accuracy > 0.9


def test_unknown_model_name_is_refused(task):
    with pytest.raises(InvalidInputError, match="unknown downstream model"):
        evaluate_utility(*task, model="cnn")


def test_participant_indices_must_match_the_rows(task):
    with pytest.raises(InvalidInputError, match="one index per row"):
        evaluate_utility(*task, participants=np.zeros(3, int))


def test_non_convergence_is_recorded_not_printed(task):
    """An MLP capped at 3 epochs cannot meet its tolerance: the utility says so (the chosen fit
    and every fit of the search) and scikit-learn's ConvergenceWarning does not escape."""
    import warnings

    from sklearn.neural_network import MLPClassifier

    def capped(c):
        return MLPClassifier(hidden_layer_sizes=(8,), alpha=1.0 / c, max_iter=3, random_state=0)

    with warnings.catch_warnings():
        warnings.simplefilter("error")  # any warning that escapes fails the test
        util = evaluate_utility(*task, model=capped)
    assert util.converged is False and util.fits_not_converged == 4  # the C grid
    assert evaluate_utility(*task, model="logistic").converged is True


def test_chunked_standardisation_equals_the_whole_array_formula(task, monkeypatch):
    import noisyanchor.common.chunks as chunks
    import noisyanchor.common.downstream as downstream

    z, _, tags = task
    rows = tags == TRAIN
    monkeypatch.setattr(chunks, "CHUNK_ROWS", 7)  # many chunks, a short last one
    mean, scale = downstream.standardisation(z, rows)
    assert np.allclose(mean, z[rows].mean(axis=0), rtol=0, atol=1e-12)
    assert scale == pytest.approx(np.sqrt(((z[rows] - z[rows].mean(axis=0)) ** 2).mean()),
                                  rel=1e-12)
    u = downstream.standardised(z, rows, mean, scale)
    assert np.allclose(u, (z[rows] - mean) / scale, rtol=0, atol=1e-12)


@pytest.mark.parametrize("model", ["logistic", "knn"])
def test_fit_on_masked_rows_equals_the_fit_on_those_rows_copied(task, model):
    from noisyanchor.common.downstream import fit_downstream

    z, y, tags = task
    keep = np.arange(len(z)) % 5 != 0
    masked = fit_downstream(z, y, tags, model=model, rows=keep)
    copied = fit_downstream(z[keep], y[keep], tags[keep], model=model)
    assert masked.utility == copied.utility
    assert np.allclose(masked.center, copied.center, rtol=0, atol=1e-12)
    assert np.array_equal(masked.predict(z), copied.predict(z))
    with pytest.raises(InvalidInputError, match="one flag per row"):
        fit_downstream(z, y, tags, rows=keep[1:])


def test_evaluate_utility_fits_the_model_on_z_once(task, monkeypatch):
    import noisyanchor.common.downstream as downstream

    z, y, tags = task
    widths = []
    real = downstream.fit_model

    def counted(model, c, x, labels, weights=None):
        widths.append(x.shape[1])
        return real(model, c, x, labels, weights)

    monkeypatch.setattr(downstream, "fit_model", counted)
    no_validation = np.where(tags == VALIDATION, TRAIN, tags)
    util = downstream.evaluate_utility(z, y, no_validation, participants=np.arange(300) % 3)
    assert widths == [z.shape[1], 3]  # Z once, then the one-hot participant baseline
    assert util.participant_only_balanced_accuracy is not None


def test_test_rows_of_one_class_score_without_a_warning():
    """Regression (issue 34): scikit-learn's "A single label was found..." reached the site's
    terminal when its test rows held one class, all predicted right."""
    import warnings

    from noisyanchor.common.downstream import held_out_metrics

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert held_out_metrics(np.ones(5, int), np.ones(5, int))["balanced_accuracy"] == 1.0


@pytest.mark.parametrize("model", ["logistic", "knn"])
def test_the_participant_only_baseline_is_the_fit_on_every_one_hot_row(rng, model):
    """The logistic model on the distinct (participant, label) rows weighted by their counts
    is its fit on every row (the same objective); the other models fit every row."""
    from sklearn.metrics import balanced_accuracy_score

    from noisyanchor.common.downstream import MODELS, participant_only_accuracy

    participants = rng.integers(0, 4, 3000) * 7 + 2  # any ids, not 0..p-1
    y = (rng.integers(0, 3, 3000) + (participants % 3) * (rng.random(3000) < 0.4)) % 3
    tags = rng.choice([TRAIN, TEST], 3000)
    onehot = (participants[:, None] == np.unique(participants)[None, :]).astype(float)
    tr, te = tags == TRAIN, tags == TEST
    every_row = MODELS[model](1.0).fit(onehot[tr], y[tr]).predict(onehot[te])
    assert participant_only_accuracy(y, tags, participants, model=model, c=1.0) == \
        balanced_accuracy_score(y[te], every_row)

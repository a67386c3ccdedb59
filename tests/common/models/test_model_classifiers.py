"""The numpy classifiers reproduce scikit-learn's labels and probabilities, and a model file
is refused when any entry is unknown, missing, misshapen or non-finite."""

import numpy as np
import pytest

from noisyanchor.common.downstream import fit_downstream
from noisyanchor.common.errors import InvalidInputError
from noisyanchor.common.models import (
    KnnModel,
    LogisticModel,
    export_estimator,
    load_model,
    model_from_arrays,
)
from noisyanchor.common.models.classifiers import MODEL_FORMAT
from noisyanchor.common.models.container import dump_arrays
from noisyanchor.common.splits import TEST, TRAIN, VALIDATION

#: Probabilities of the numpy predictor against scikit-learn's predict_proba (absolute).
PROBA_ATOL = 1e-12


def _task(rng, classes: int, n: int = 240, d: int = 5):
    y = np.arange(n) % classes
    centres = 2.0 * rng.standard_normal((classes, d))
    z = 10.0 + 3.0 * (centres[y] + rng.standard_normal((n, d)))  # off-centre, unscaled
    tags = rng.permutation(np.resize([TRAIN] * 6 + [VALIDATION, TEST, TEST, TRAIN], n)).astype("i1")
    return z, y.astype(np.int64) * 3 + 1, tags  # labels 1, 4, 7, ...: not 0..c-1


@pytest.mark.parametrize("name", ["logistic", "mlp", "knn"])
@pytest.mark.parametrize("classes", [2, 4])
def test_numpy_model_matches_scikit_learn(rng, name, classes):
    z, y, tags = _task(rng, classes)
    fitted = fit_downstream(z, y, tags, model=name)
    model = export_estimator(fitted.estimator, fitted.center, fitted.scale)
    fresh = rng.standard_normal((57, z.shape[1])) * 3.0 + 10.0  # rows it never saw
    for rows in (z, fresh):
        u = (rows - fitted.center) / fitted.scale
        np.testing.assert_array_equal(model.predict(rows), fitted.estimator.predict(u))
        np.testing.assert_allclose(model.predict_proba(rows), fitted.estimator.predict_proba(u),
                                   rtol=0, atol=PROBA_ATOL)
    loaded = load_model(model.to_bytes())
    np.testing.assert_array_equal(loaded.predict_proba(fresh), model.predict_proba(fresh))
    assert type(loaded) is type(model)


def test_export_refuses_other_estimators_and_checks_itself(rng):
    from sklearn import linear_model
    from sklearn.tree import DecisionTreeClassifier

    z, y, tags = _task(rng, 3)
    tree = DecisionTreeClassifier(random_state=0).fit(z, y)
    with pytest.raises(InvalidInputError, match="DecisionTreeClassifier cannot be exported"):
        export_estimator(tree, z.mean(axis=0), 1.0)

    class LogisticRegression(linear_model.LogisticRegression):
        """As a scikit-learn version whose probabilities differ from the numpy model's."""

        def predict_proba(self, x):
            p = super().predict_proba(x) ** 1.5
            return p / p.sum(axis=1, keepdims=True)

    fitted = fit_downstream(z, y, tags, model=lambda c: LogisticRegression(C=c))
    u_rows = z[:20]
    assert isinstance(export_estimator(fitted.estimator, fitted.center, fitted.scale),
                      LogisticModel)  # unchecked
    with pytest.raises(InvalidInputError, match="does not reproduce scikit-learn"):
        export_estimator(fitted.estimator, fitted.center, fitted.scale, u_rows)


@pytest.fixture
def logistic(rng):
    z, y, tags = _task(rng, 3)
    fitted = fit_downstream(z, y, tags)
    return export_estimator(fitted.estimator, fitted.center, fitted.scale)


def _arrays(model):
    meta, arrays = model.to_arrays()
    return dict(meta), {k: np.array(v) for k, v in arrays.items()}


def test_unknown_kind_extra_and_missing_entries_are_refused(logistic):
    meta, arrays = _arrays(logistic)
    with pytest.raises(InvalidInputError, match="unknown model kind 'forest'"):
        model_from_arrays({**meta, "kind": "forest"}, arrays)
    with pytest.raises(InvalidInputError, match=r"does not know: \['hook'\]"):
        model_from_arrays(meta, {**arrays, "hook": np.zeros(1)})
    with pytest.raises(InvalidInputError, match=r"does not know: \['loader'\]"):
        model_from_arrays({**meta, "loader": "os.system"}, arrays)
    del arrays["intercept"]
    with pytest.raises(InvalidInputError, match="no array 'intercept'"):
        model_from_arrays(meta, arrays)


def test_wrong_shapes_bad_classes_and_scale_are_refused(logistic):
    meta, arrays = _arrays(logistic)
    with pytest.raises(InvalidInputError, match="'coef' has shape"):
        model_from_arrays(meta, {**arrays, "coef": arrays["coef"][:, :-1]})
    with pytest.raises(InvalidInputError, match="distinct labels in increasing order"):
        model_from_arrays(meta, {**arrays, "classes": arrays["classes"][::-1].copy()})
    with pytest.raises(InvalidInputError, match="scale must be positive"):
        model_from_arrays({**meta, "scale": -1.0}, arrays)
    with pytest.raises(InvalidInputError, match="'scale' must be int or float"):
        model_from_arrays({**meta, "scale": "1"}, arrays)


def test_non_finite_weights_are_refused_at_load(logistic):
    meta, arrays = _arrays(logistic)
    arrays["coef"][0, 0] = np.nan
    raw = dump_arrays(MODEL_FORMAT, meta, arrays)
    with pytest.raises(InvalidInputError, match="'coef' holds NaN or Inf"):
        load_model(raw)


def test_knn_checks_k_and_class_indices(rng):
    z, y, tags = _task(rng, 3)
    fitted = fit_downstream(z, y, tags, model="knn")
    model = export_estimator(fitted.estimator, fitted.center, fitted.scale)
    assert isinstance(model, KnnModel) and len(model.train) == int((tags == TRAIN).sum())
    meta, arrays = _arrays(model)
    with pytest.raises(InvalidInputError, match="k = 0"):
        model_from_arrays({**meta, "k": 0}, arrays)
    arrays["train_index"][0] = 7
    with pytest.raises(InvalidInputError, match="classes the model does not have"):
        model_from_arrays(meta, arrays)


def test_rows_of_the_wrong_width_or_non_finite_are_refused(logistic):
    with pytest.raises(InvalidInputError, match="rows of width 5"):
        logistic.predict(np.zeros((2, 4)))
    with pytest.raises(InvalidInputError, match="NaN or Inf"):
        logistic.predict(np.full((2, 5), np.inf))

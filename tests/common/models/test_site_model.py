"""A site model file carries the map N_i and the model; it reads back to the same predictions,
and a withheld model, a non-orthogonal map or stray arrays are refused or said so."""

import numpy as np
import pytest

from noisyanchor.common.downstream import fit_downstream
from noisyanchor.common.errors import InvalidInputError
from noisyanchor.common.gdp import haar_orthogonal
from noisyanchor.common.models import SiteModel, export_estimator, load_site_model
from noisyanchor.common.models.container import dump_arrays, load_arrays
from noisyanchor.common.models.site_model import SITE_MODEL_FORMAT
from noisyanchor.common.splits import TEST, TRAIN


def _site(rng, model=True) -> SiteModel:
    d = 4
    z = rng.standard_normal((80, d)) + np.eye(d)[np.arange(80) % 2] * 3
    y = np.arange(80) % 2
    tags = np.where(np.arange(80) % 5 == 0, TEST, TRAIN)
    fitted = fit_downstream(z, y, tags)
    clf = export_estimator(fitted.estimator, fitted.center, fitted.scale) if model else None
    return SiteModel("fed", "org-a", "aa-igdp-an", "gopp", haar_orthogonal(d, rng),
                     rng.standard_normal(d), np.zeros(d), clf,
                     "" if model else "k-NN keeps the training rows", {"balanced_accuracy": 0.9},
                     {"balanced_accuracy": 0.8, "n_test": 16})


def test_site_model_round_trips_with_its_map_and_model(rng):
    site = _site(rng)
    loaded = load_site_model(site.to_bytes())
    t = rng.standard_normal((7, 4))
    # N_i(T) = (T - 1 b_i^T) R_i + 1 c^T
    np.testing.assert_allclose(loaded.map_rows(t), (t - site.mean) @ site.rotation + site.shift,
                               rtol=0, atol=1e-15)
    np.testing.assert_array_equal(loaded.model.predict_proba(loaded.map_rows(t)),
                                  site.model.predict_proba(site.map_rows(t)))
    assert loaded.site_metrics == {"balanced_accuracy": 0.8, "n_test": 16}
    assert load_site_model(loaded.to_bytes()).to_bytes() == site.to_bytes()


def test_a_withheld_model_travels_as_its_reason(rng):
    loaded = load_site_model(_site(rng, model=False).to_bytes())
    assert loaded.model is None and "training rows" in loaded.model_withheld


def test_stray_arrays_and_a_non_orthogonal_map_are_refused(rng):
    raw = _site(rng).to_bytes()
    loaded = load_arrays(raw, SITE_MODEL_FORMAT)
    with pytest.raises(InvalidInputError, match="must hold the arrays"):
        load_site_model(dump_arrays(SITE_MODEL_FORMAT, loaded.meta,
                                    {**loaded.arrays, "payload": np.zeros(3)}))
    arrays = dict(loaded.arrays)
    arrays["rotation"] = arrays["rotation"] * 2.0
    with pytest.raises(InvalidInputError, match="not orthogonal"):
        load_site_model(dump_arrays(SITE_MODEL_FORMAT, loaded.meta, arrays))
    with pytest.raises(InvalidInputError, match="exactly the keys"):
        load_site_model(dump_arrays(SITE_MODEL_FORMAT, {**loaded.meta, "run": "x"},
                                    loaded.arrays))
    with pytest.raises(InvalidInputError, match="rows of width 4"):
        load_site_model(raw).map_rows(np.zeros((2, 3)))

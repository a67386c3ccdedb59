"""Membership inference metrics and attacks (experiments.membership)."""

import numpy as np
import pytest

from noisyanchor.common.downstream import fit_downstream
from noisyanchor.common.splits import TEST, TRAIN
from noisyanchor.experiments.membership import model_membership, roc_metrics, z_membership


def test_roc_metrics_at_the_extremes(rng):
    perfect = roc_metrics(np.arange(100, 200), np.arange(100))
    assert perfect["auc"] == 1.0 and perfect["tpr_at_1pct_fpr"] == 1.0
    same = roc_metrics(np.zeros(50), np.zeros(60))
    assert same["auc"] == 0.5 and same["tpr_at_1pct_fpr"] == 0.0
    chance = roc_metrics(rng.standard_normal(4000), rng.standard_normal(4000))
    assert chance["auc"] == pytest.approx(0.5, abs=0.03)
    assert chance["tpr_at_1pct_fpr"] == pytest.approx(0.01, abs=0.01)


def test_a_memorising_model_is_caught_by_both_attacks(rng):
    """1-nearest-neighbour memorises its training records (probability 1 on each): the loss
    threshold separates members perfectly; the shadow models learn the same rule."""
    n, d = 600, 5
    z = rng.standard_normal((n, d))
    y = rng.integers(0, 3, n)  # labels independent of z: only memory links them
    tags = np.where(np.arange(n) % 3 == 0, TEST, TRAIN)
    from sklearn.neighbors import KNeighborsClassifier

    model = fit_downstream(z[: n // 2], y[: n // 2], tags[: n // 2], model="knn")
    one = fit_downstream(z[: n // 2], y[: n // 2], tags[: n // 2],
                         model=lambda k: KNeighborsClassifier(n_neighbors=1))
    members = (z[: n // 2][tags[: n // 2] == TRAIN], y[: n // 2][tags[: n // 2] == TRAIN])
    non = (z[: n // 2][tags[: n // 2] == TEST], y[: n // 2][tags[: n // 2] == TEST])
    out = model_membership(one, "knn", members, non, None, rng)
    assert out["loss_threshold"]["auc"] > 0.8 and "shadow" not in out
    shadowed = model_membership(model, "knn", members, non, (z[n // 2:], y[n // 2:]), rng)
    assert shadowed["shadow"]["auc"] > 0.5 and shadowed["shadow"]["shadow_models"] == 2


def test_z_membership_by_distance_to_the_reconstruction(rng):
    x = rng.standard_normal((200, 4))
    outsiders = rng.standard_normal((100, 4))
    exact = z_membership(x, x, outsiders)
    assert exact["auc"] == 1.0  # every member is its own reconstruction
    noisy = z_membership(x + 5 * rng.standard_normal(x.shape), x, outsiders)
    assert noisy["auc"] < 0.7

"""LiRA (experiments.lira) on cases whose answer is known, and the members the attacks are
scored on (experiments.membership)."""

import numpy as np
import pytest

from noisyanchor.experiments.lira import lira, logit_confidence
from noisyanchor.experiments.membership import roc_metrics, unknown_rows, z_membership


class Lookup:
    """A model that memorises: probability 0.99 on the stored label of a training row, uniform
    over the classes elsewhere."""

    def __init__(self, classes: np.ndarray):
        self.classes_ = np.asarray(classes)

    def fit(self, z: np.ndarray, y: np.ndarray) -> "Lookup":
        self.rows = {r.tobytes(): label for r, label in zip(z, y, strict=True)}
        return self

    def predict_proba(self, z: np.ndarray) -> np.ndarray:
        k = len(self.classes_)
        out = np.full((len(z), k), 1.0 / k)
        for n, r in enumerate(z):
            label = self.rows.get(r.tobytes())
            if label is not None:
                out[n] = 0.01 / (k - 1)
                out[n, list(self.classes_).index(label)] = 0.99
        return out


def _phi(model, z, y):
    return logit_confidence(model.predict_proba(z), model.classes_, y)


def _data(rng, n, classes=3, d=4):
    return rng.standard_normal((n, d)), rng.integers(0, classes, n)


@pytest.mark.parametrize("online", [True, False])
def test_lira_catches_every_member_of_a_lookup_at_1pct_fpr(rng, online):
    """A lookup knows its members exactly: TPR 1 at 1% (and 0.1%) false positives."""
    classes = np.arange(3)
    members, non = _data(rng, 300), _data(rng, 300)
    population = _data(rng, 300)
    target = Lookup(classes).fit(*members)
    got = lira(_phi, lambda z, y: Lookup(classes).fit(z, y), target,
               (np.vstack([members[0], non[0]]), np.r_[members[1], non[1]]), population, rng,
               shadow_models=8, online=online)
    metrics = roc_metrics(got.scores[:300], got.scores[300:])
    assert got.shadow_models == 8
    assert metrics["tpr_at_1pct_fpr"] >= 0.99 and metrics["tpr_at_0_1pct_fpr"] >= 0.99


@pytest.mark.parametrize("online", [True, False])
def test_lira_is_at_chance_against_a_model_trained_on_disjoint_data(rng, online):
    """A model that never saw a candidate carries no membership signal: AUC 0.5 within 0.08
    (the AUC of 300 + 300 candidates under no signal has standard deviation 0.024; 0.08 is
    3.4 of them)."""
    from sklearn.neural_network import MLPClassifier

    def fit(z, y):
        return MLPClassifier(hidden_layer_sizes=(32,), alpha=0.0, max_iter=200,
                             random_state=0).fit(z, y)

    def draw(n):
        z = rng.standard_normal((n, 4))
        return z, (z[:, 0] + 0.8 * rng.standard_normal(n) > 0).astype(int)

    import warnings

    from sklearn.exceptions import ConvergenceWarning

    members, non, population, disjoint = draw(300), draw(300), draw(300), draw(300)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        target = fit(*disjoint)
        got = lira(_phi, fit, target, (np.vstack([members[0], non[0]]),
                                       np.r_[members[1], non[1]]), population, rng,
                   shadow_models=8, online=online)
    assert roc_metrics(got.scores[:300], got.scores[300:])["auc"] == pytest.approx(0.5, abs=0.08)


def test_the_attackers_known_records_are_not_scored_as_members(rng):
    """A reconstruction exact on the attacker's known records only (as a known-input attacker
    has them) and far off elsewhere: counted, they would lift the AUC to about 0.6; left out,
    the members are the n - m others and the AUC is at chance."""
    rows = np.arange(100, 300)  # a target's bank indices
    known = rng.choice(rows, 40, replace=False)
    x = rng.standard_normal((200, 4))
    recon = x + 3 * rng.standard_normal(x.shape)
    mask = unknown_rows(rows, known)
    recon[~mask] = x[~mask]
    outsiders = rng.standard_normal((200, 4))
    assert mask.sum() == 160 and not np.isin(rows[mask], known).any()
    counted = z_membership(recon, x, outsiders)
    scored = z_membership(recon, x[mask], outsiders)
    assert scored["members"] == 160
    assert counted["auc"] > scored["auc"] + 0.1  # the known records were the whole signal
    assert scored["auc"] == pytest.approx(0.5, abs=0.1)
    assert unknown_rows(rows, None).all()


def test_attribute_inference_reads_the_column_from_an_exact_reconstruction(rng):
    """With ``Z`` reconstructed exactly the held-out column is read back exactly (RMSE 0,
    gain 1); with a reconstruction unrelated to the targets it is no better than the public
    regression (gain below 0)."""
    from noisyanchor.experiments.membership import attribute_inference

    x = rng.standard_normal((150, 5))
    pool = rng.standard_normal((200, 5))
    exact = attribute_inference(x, x, pool)
    assert all(c["rmse_z"] == pytest.approx(0.0, abs=1e-9) for c in exact["columns"])
    assert exact["median_gain"] == pytest.approx(1.0)
    unrelated = attribute_inference(rng.standard_normal((150, 5)), x, pool)
    assert unrelated["median_gain"] < 0

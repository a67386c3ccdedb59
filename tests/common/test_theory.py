import math

import numpy as np
import pytest

from noisyanchor.common.errors import InvalidInputError
from noisyanchor.common.theory import (
    phase_transition_v,
    residual_translation_variance,
    rotational_error_bound,
    sufficient_noise_level,
)


@pytest.mark.parametrize(
    ("p", "d", "r", "expected"),
    [(10, 100, 400, 0.0977), (2, 400, 1600, 0.03785), (5, 400, 1600, 0.04676),
     (10, 400, 1600, 0.05297), (20, 400, 1600, 0.05833), (50, 400, 1600, 0.06383)],
)
def test_phase_transition_reproduces_the_papers_six_values(p, d, r, expected):
    # Agree with the paper to every decimal it prints (rounding to the printed places).
    places = len(repr(expected).split(".")[1])
    assert round(phase_transition_v(p, d, r), places) == expected


def test_sufficient_condition_and_bound_follow_theorem_4_6():
    p, d, r, gamma = 10, 100, 400, 3.0
    v = sufficient_noise_level(p, d, r, gamma=gamma)
    scale = math.sqrt(p * d) + math.sqrt(r - 1) + math.sqrt(2 * gamma * p * math.log(p))
    assert v == pytest.approx(math.sqrt(p) / (14336 * math.sqrt(d) * scale), rel=1e-12)
    bound = rotational_error_bound(v, p, d, r, gamma=gamma)
    assert bound == pytest.approx(6 / (1 - 1 / 1024) * v * math.sqrt(d) * scale / math.sqrt(p),
                                  rel=1e-12)
    with pytest.raises(InvalidInputError, match="exceeds"):
        rotational_error_bound(2 * v, p, d, r, gamma=gamma)
    with pytest.raises(InvalidInputError, match="gamma"):
        sufficient_noise_level(p, d, r, gamma=2.0)


def test_residual_translation_law_matches_monte_carlo_of_its_definition(rng):
    d, r, v, draws = 8, 50, 0.3, 20000
    w_i = rng.standard_normal((draws, r, d)).sum(axis=1)
    w_j = rng.standard_normal((draws, r, d)).sum(axis=1)
    eta_i, eta_j = v * w_i / r, v * w_j / r
    mc = float(((eta_i - eta_j) ** 2).sum(axis=1).mean())
    # Monte Carlo relative sd ~ sqrt(2/(d*draws)) = 0.3%; 3% is ten of those.
    assert mc == pytest.approx(residual_translation_variance(d, v, r), rel=0.03)


@pytest.mark.parametrize("args", [(1, 10, 40), (10, 10, 10), (10, 0, 40), (10.5, 10, 40)])
def test_theory_rejects_bad_sizes(args):
    with pytest.raises(InvalidInputError):
        phase_transition_v(*args)
    assert np.isfinite(phase_transition_v(10, 10, 40))

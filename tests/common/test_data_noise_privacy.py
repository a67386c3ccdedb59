"""Record-level (epsilon, delta) of the private-data-noise arm."""

import numpy as np
import pytest

from noisyanchor.common.data_noise_privacy import record_privacy
from noisyanchor.common.errors import InvalidInputError
from noisyanchor.common.scoreshield import analytic_sigma, gaussian_delta


@pytest.mark.parametrize(("sigma", "clip"), [(0.36, 1.0), (2.0, 3.0), (0.05, 0.2)])
def test_record_epsilon_matches_the_analytic_gaussian_calibration(sigma, clip):
    got = record_privacy(sigma, clip, delta=1e-5)
    assert got.sensitivity == 2 * clip
    # the calibration run backwards: the sigma it asks for this epsilon is the arm's sigma
    assert analytic_sigma(got.epsilon, 1e-5, 2 * clip) == pytest.approx(sigma, rel=1e-9)
    assert gaussian_delta(sigma, got.epsilon, 2 * clip) <= 1e-5


def test_record_epsilon_depends_only_on_sigma_over_clip_and_falls_with_sigma():
    a, b = record_privacy(0.5, 1.0), record_privacy(5.0, 10.0)
    assert a.epsilon == pytest.approx(b.epsilon, rel=1e-9)
    eps = [record_privacy(s, 1.0).epsilon for s in (0.5, 1.0, 2.0, 4.0)]
    assert np.all(np.diff(eps) < 0)


def test_record_privacy_names_a_bad_clip_bound():
    with pytest.raises(InvalidInputError, match="clip bound"):
        record_privacy(1.0, 0.0)

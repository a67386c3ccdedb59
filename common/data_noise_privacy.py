"""Record-level (epsilon, delta) of the private-data-noise arm: it is a Gaussian mechanism.

The arm uploads ``Y = X O + 1 Psi^T + sigma W`` with ``W`` standard normal. Conditioned on the
secret key ``(O, Psi)``, which is drawn independently of the data, ``Y`` is the Gaussian
mechanism ``f(X) + sigma W`` of ``f(X) = X O + 1 Psi^T``. Neighbouring data sets differ in one
record (replacement: row counts and labels leak in the clear with every upload, so adding or
removing a row is not hidden and only replacement is an adjacency the arm can protect). With
every record clipped to ``||x||_2 <= C`` (in the working space ``X F``), an orthogonal ``O``
keeps norms, so

    Delta = ||(x_a - x_a') O||_2 = ||x_a - x_a'||_2 <= 2 C,

and the upload is ``(epsilon, delta)``-DP with ``epsilon`` the analytic Gaussian calibration
of ``sigma`` at sensitivity ``2 C`` (Balle and Wang 2018, the same calibration the release
service uses, :func:`common.scoreshield.gaussian_epsilon`). The guarantee holds for every key,
hence for the key's distribution too. Anchor noise has no such figure: it perturbs the key,
not the records, and leaves every distance between a participant's records exact.

References: Balle and Wang, "Improving the Gaussian mechanism for differential privacy",
ICML 2018, Theorem 8; SPEC.md section 3 (private-data noise).
"""

from __future__ import annotations

from dataclasses import dataclass

from noisyanchor.common.scoreshield.calibration import check_epsilon_delta, gaussian_epsilon
from noisyanchor.common.validation import check_positive

#: ``delta`` at which the study states the arm's epsilon unless told.
DEFAULT_DELTA = 1e-5


@dataclass(frozen=True)
class RecordPrivacy:
    """The record-level guarantee of one private-data-noise upload.

    Attributes
    ----------
    sigma : float
        ``sigma`` of the data noise (per coordinate).
    clip : float
        ``C``: every record (working space) has ``||x||_2 <= C``.
    sensitivity : float
        ``Delta = 2 C`` (replacement of one record).
    delta, epsilon : float
        ``(epsilon, delta)``-DP, ``epsilon`` the smallest the analytic calibration gives.
    """

    sigma: float
    clip: float
    sensitivity: float
    delta: float
    epsilon: float


def record_privacy(sigma: float, clip: float, delta: float = DEFAULT_DELTA) -> RecordPrivacy:
    """``(epsilon, delta)`` of a private-data-noise upload of records clipped to ``C``.

    Parameters
    ----------
    sigma : float
        ``sigma > 0`` of the data noise.
    clip : float
        ``C > 0``, the L2 bound of every record in the working space.
    delta : float
        ``0 < delta < 1``.
    """
    sig = check_positive(sigma, "data noise sigma")
    c = check_positive(clip, "clip bound C")
    _, dlt = check_epsilon_delta(1.0, delta)
    sens = 2.0 * c
    return RecordPrivacy(sig, c, sens, dlt, gaussian_epsilon(sig, dlt, sens))

"""ScoreShield: differentially private release of cosine similarity scores.

Regime (i) releases a score vector ``clip(E q + N(0, sigma^2 I), -1, 1)``; regime (ii) releases a
Gram matrix ``P_C(E E^T + (N + N^T)/2)`` projected onto the correlation matrices; regime (iii)
releases one record's row of the Gram. Each is available at record or identity level and with an
enforced public margin (:class:`Regime`, which derives the sensitivity). Noise is calibrated with
the analytic Gaussian mechanism (:func:`calibrate`); a :class:`Calibration` cannot state more
than its noise delivers, and a release refuses one made for another regime. Gram releases state
their data-free baseline (:mod:`common.scoreshield.baseline`). Decision-level tools (ROC, AUC,
TAR at FAR, EER, threshold recalibration) work on the released scores.

References
----------
SPEC.md section 5; ScoreShield paper (``seeds/scoreshield-paper.txt``).
"""

from noisyanchor.common.scoreshield.baseline import GramBaseline, gram_baseline
from noisyanchor.common.scoreshield.calibration import (
    CALIBRATION_METHODS,
    Calibration,
    analytic_sigma,
    calibrate,
    calibrate_sigma,
    classic_sigma,
    composed_epsilon,
    epsilon_of_mu,
    gaussian_delta,
    gaussian_epsilon,
    mu_of_epsilon,
)
from noisyanchor.common.scoreshield.decision import (
    Recalibration,
    auc,
    clean_threshold,
    eer,
    flip_probability,
    private_fmr,
    recalibrate_threshold,
    roc_curve,
    tar_at_far,
)
from noisyanchor.common.scoreshield.projection import (
    PROJECTION_METHODS,
    ProjectionResult,
    project_box,
    project_correlation,
    project_psd,
    symmetrize,
)
from noisyanchor.common.scoreshield.regimes import ADJACENCIES, KINDS, Regime, useful_sigma
from noisyanchor.common.scoreshield.release import (
    GRAM_PROJECTORS,
    GramRelease,
    ScoreRelease,
    check_gram,
    release_gram,
    release_record_row,
    release_score_vector,
    useful_score_epsilon,
    useful_score_sigma,
)
from noisyanchor.common.scoreshield.sensitivity import (
    gram_identity_sensitivity,
    gram_output_sensitivity,
    gram_record_sensitivity,
    identity_centroid_sensitivity,
    identity_rows_sensitivity,
    margin_entry_range,
    per_entry_sensitivity,
    record_row_sensitivity,
    score_vector_sensitivity,
)

__all__ = [
    "ADJACENCIES",
    "CALIBRATION_METHODS",
    "GRAM_PROJECTORS",
    "KINDS",
    "PROJECTION_METHODS",
    "Calibration",
    "GramBaseline",
    "GramRelease",
    "ProjectionResult",
    "Recalibration",
    "Regime",
    "ScoreRelease",
    "analytic_sigma",
    "auc",
    "calibrate",
    "calibrate_sigma",
    "check_gram",
    "classic_sigma",
    "clean_threshold",
    "composed_epsilon",
    "eer",
    "epsilon_of_mu",
    "flip_probability",
    "gaussian_delta",
    "gaussian_epsilon",
    "gram_baseline",
    "gram_identity_sensitivity",
    "gram_output_sensitivity",
    "gram_record_sensitivity",
    "identity_centroid_sensitivity",
    "identity_rows_sensitivity",
    "margin_entry_range",
    "mu_of_epsilon",
    "per_entry_sensitivity",
    "private_fmr",
    "project_box",
    "project_correlation",
    "project_psd",
    "recalibrate_threshold",
    "record_row_sensitivity",
    "release_gram",
    "release_record_row",
    "release_score_vector",
    "roc_curve",
    "score_vector_sensitivity",
    "symmetrize",
    "tar_at_far",
    "useful_score_epsilon",
    "useful_score_sigma",
    "useful_sigma",
]

"""ScoreShield: differentially private release of cosine similarity scores.

Regime (i) releases a score vector ``clip(E q + N(0, sigma^2 I), -1, 1)``; regime (ii) releases a
Gram matrix ``P_C(E E^T + (N + N^T)/2)`` projected onto the correlation matrices. Noise is
calibrated with the analytic Gaussian mechanism to a named sensitivity. Decision-level tools
(ROC, AUC, TAR at FAR, EER, threshold recalibration) work on the released scores.

References
----------
SPEC.md section 5; ScoreShield paper (``seeds/scoreshield-paper.txt``).
"""

from noisyanchor.common.scoreshield.calibration import (
    CALIBRATION_METHODS,
    Calibration,
    analytic_sigma,
    calibrate,
    calibrate_sigma,
    classic_sigma,
    gaussian_delta,
    gaussian_epsilon,
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
from noisyanchor.common.scoreshield.release import (
    GRAM_PROJECTORS,
    GramRelease,
    ScoreRelease,
    release_gram,
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
    per_entry_sensitivity,
    score_vector_sensitivity,
)

__all__ = [
    "CALIBRATION_METHODS",
    "GRAM_PROJECTORS",
    "PROJECTION_METHODS",
    "Calibration",
    "GramRelease",
    "ProjectionResult",
    "Recalibration",
    "ScoreRelease",
    "analytic_sigma",
    "auc",
    "calibrate",
    "calibrate_sigma",
    "classic_sigma",
    "clean_threshold",
    "eer",
    "flip_probability",
    "gaussian_delta",
    "gaussian_epsilon",
    "gram_identity_sensitivity",
    "gram_output_sensitivity",
    "gram_record_sensitivity",
    "identity_centroid_sensitivity",
    "identity_rows_sensitivity",
    "per_entry_sensitivity",
    "private_fmr",
    "project_box",
    "project_correlation",
    "project_psd",
    "recalibrate_threshold",
    "release_gram",
    "release_score_vector",
    "roc_curve",
    "score_vector_sensitivity",
    "symmetrize",
    "tar_at_far",
    "useful_score_epsilon",
    "useful_score_sigma",
]

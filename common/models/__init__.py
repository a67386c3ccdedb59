"""Model files: the downstream classifiers as plain arrays evaluated by numpy, the site model a
site fetches (its map ``N_i`` and the model), and the arrays-file format both are stored in,
whose loading never runs code.

References: issue 20; SPEC.md section 2.
"""

from noisyanchor.common.models.classifiers import (
    KINDS,
    Classifier,
    KnnModel,
    LogisticModel,
    MlpModel,
    Preprocessing,
    export_estimator,
    load_model,
    model_from_arrays,
)
from noisyanchor.common.models.container import ArraysFile, dump_arrays, load_arrays
from noisyanchor.common.models.site_model import SiteModel, load_site_model

__all__ = [
    "KINDS",
    "ArraysFile",
    "Classifier",
    "KnnModel",
    "LogisticModel",
    "MlpModel",
    "Preprocessing",
    "SiteModel",
    "dump_arrays",
    "export_estimator",
    "load_arrays",
    "load_model",
    "load_site_model",
    "model_from_arrays",
]

"""What the analyst returns to one site: its alignment map ``N_i``, the federation's downstream
model and the held-out metrics (the federation's, and the model's on the site's own test rows).

A site maps a new record exactly as it mapped its training records: ``x -> x F`` (public
projection) ``-> M_i(x F) = x F O_i + Psi_i`` (its own key, never sent) ``-> N_i(t) = (t - b_i)
R_i + c`` (this map) ``-> h(N_i(M_i(x F)))`` (the model). For a site's own uploaded records
without private-data noise, ``N_i(M_i(x F))`` is its row of ``Z``.

References: SPEC.md section 2 (the maps ``N_i``); issue 20.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from noisyanchor.common.errors import InvalidInputError
from noisyanchor.common.models.classifiers import Classifier, model_from_arrays
from noisyanchor.common.models.container import dump_arrays, load_arrays

#: Format name of a site model file.
SITE_MODEL_FORMAT = "noisyanchor.site-model"

#: Prefix of the model's arrays inside a site model file.
_MODEL = "model."

_META_KEYS = {"federation_id", "participant", "method", "solver", "model", "model_withheld",
              "federation_metrics", "site_metrics"}


def embedded_model(header: Any, model_arrays: dict[str, np.ndarray]) -> Classifier | None:
    """The classifier a model file holds beside its own arrays: ``header`` is its JSON header's
    ``model`` (None: the file holds no model) and ``model_arrays`` its arrays under ``model.``
    (prefix removed). Raises InvalidInputError when the two disagree."""
    if header is None:
        if model_arrays:
            raise InvalidInputError("it holds model arrays but no model")
        return None
    if not isinstance(header, dict):
        raise InvalidInputError("'model' must be an object or null")
    return model_from_arrays(header, model_arrays)


@dataclass(frozen=True)
class SiteModel:
    """One site's part of the result.

    Attributes
    ----------
    federation_id, participant, method : str
    solver : str
        How ``N_i`` was found: ``none`` (C-GDP, I-GDP), ``procrustes`` or ``gopp``.
    rotation : (d, d) ndarray
        ``R_i``.
    mean : (d,) ndarray
        ``b_i``, the mean of the site's anchor upload (zero without anchors).
    shift : (d,) ndarray
        ``c``: ``b_s`` for reference Procrustes, zero otherwise.
    model : Classifier or None
        The federation's model on rows of ``Z``; None when it is not returned to sites
        (``model_withheld`` says why).
    model_withheld : str
    federation_metrics : dict
        The model's held-out metrics over every test row of ``Z`` (``result.json``'s ``model``).
    site_metrics : dict
        The model's metrics on this site's test rows of ``Z`` (computed by the analyst).
    """

    federation_id: str
    participant: str
    method: str
    solver: str
    rotation: np.ndarray
    mean: np.ndarray
    shift: np.ndarray
    model: Classifier | None
    model_withheld: str
    federation_metrics: dict[str, Any]
    site_metrics: dict[str, Any]

    def __post_init__(self) -> None:
        d = self.rotation.shape[0] if self.rotation.ndim == 2 else -1
        if self.rotation.shape != (d, d) or self.mean.shape != (d,) or self.shift.shape != (d,):
            raise InvalidInputError(f"a site map needs R_i (d, d), b_i (d,) and c (d,), got "
                                    f"{self.rotation.shape}, {self.mean.shape}, "
                                    f"{self.shift.shape}")
        if not np.allclose(self.rotation.T @ self.rotation, np.eye(d), atol=1e-8):
            raise InvalidInputError("the site map's R_i is not orthogonal")
        if self.model is not None and self.model.width != d:
            raise InvalidInputError(f"the model takes rows of width {self.model.width}, the map "
                                    f"gives {d}")
        if (self.model is None) == (not self.model_withheld):
            raise InvalidInputError("a site model has either a model or the reason it is "
                                    "withheld")

    @property
    def dim(self) -> int:
        """``d``, the working width."""
        return int(self.rotation.shape[0])

    def map_rows(self, t: np.ndarray) -> np.ndarray:
        """``N_i(T) = (T - 1 b_i^T) R_i + 1 c^T`` for rows ``T`` in the site's GDP frame."""
        t = np.asarray(t, dtype=np.float64)
        if t.ndim != 2 or t.shape[1] != self.dim:
            raise InvalidInputError(f"the site map takes rows of width {self.dim}, got shape "
                                    f"{t.shape}")
        return (t - self.mean) @ self.rotation + self.shift

    def to_bytes(self) -> bytes:
        """The site model file (:mod:`common.models.container`)."""
        arrays = {"rotation": self.rotation, "mean": self.mean, "shift": self.shift}
        model_meta = None
        if self.model is not None:
            model_meta, model_arrays = self.model.to_arrays()
            arrays |= {_MODEL + k: v for k, v in model_arrays.items()}
        meta = {"federation_id": self.federation_id, "participant": self.participant,
                "method": self.method, "solver": self.solver, "model": model_meta,
                "model_withheld": self.model_withheld,
                "federation_metrics": self.federation_metrics,
                "site_metrics": self.site_metrics}
        return dump_arrays(SITE_MODEL_FORMAT, meta, arrays)


def load_site_model(raw: bytes, *, what: str = "the site model") -> SiteModel:
    """A :class:`SiteModel` from its file's bytes, every entry checked (no code runs)."""
    loaded = load_arrays(raw, SITE_MODEL_FORMAT, what=what)
    meta, arrays = loaded.meta, loaded.arrays
    try:
        if set(meta) != _META_KEYS:
            raise InvalidInputError(f"its metadata must have exactly the keys "
                                    f"{sorted(_META_KEYS)}, got {sorted(meta)}")
        for key in ("federation_id", "participant", "method", "solver", "model_withheld"):
            if not isinstance(meta[key], str):
                raise InvalidInputError(f"{key!r} must be a string")
        for key in ("federation_metrics", "site_metrics"):
            if not isinstance(meta[key], dict):
                raise InvalidInputError(f"{key!r} must be an object")
        map_names = {"rotation", "mean", "shift"}
        model_arrays = {k[len(_MODEL):]: v for k, v in arrays.items() if k.startswith(_MODEL)}
        unknown = set(arrays) - map_names - {_MODEL + k for k in model_arrays}
        if unknown or not map_names <= set(arrays):
            raise InvalidInputError(f"it must hold the arrays rotation, mean, shift and the "
                                    f"model's; got {sorted(arrays)}")
        model = embedded_model(meta["model"], model_arrays)
        for name in map_names:
            if arrays[name].dtype.kind != "f":
                raise InvalidInputError(f"array {name!r} must hold floats")
        return SiteModel(meta["federation_id"], meta["participant"], meta["method"],
                         meta["solver"], arrays["rotation"], arrays["mean"], arrays["shift"],
                         model, meta["model_withheld"], meta["federation_metrics"],
                         meta["site_metrics"])
    except InvalidInputError as err:
        raise InvalidInputError(f"{what}: {err}") from None

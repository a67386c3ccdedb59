"""The local-only baseline a site keeps: the model it would have trained alone, against which
``gain.json`` and ``participant predict --labels`` measure what joining gained it.

It is trained once, when the site's upload commits (:func:`participant.run.run_upload`, from the
records already in memory), and kept in the state folder as ``local-baseline.bin``: an arrays
file with a JSON header (:mod:`common.models.container`, loading never runs code) whose whole
SHA-256 is kept beside it (``local-baseline.sha256``), as the fetched site model's is. It holds:

* the federation's kind of model (:func:`common.downstream.fit_downstream`: same family, same
  hyper-parameter search) trained on the site's own training rows of its raw records ``X_i``,
  exported to numpy arrays (:func:`common.models.export_estimator`, checked to give the same
  labels as scikit-learn on the test rows), or why none could be fitted;
* the site's test rows ``X_i[test]`` and their labels: the rows the gain is measured on once
  the federation's model arrives, so that neither ``predict`` nor ``status`` reads the whole
  table at ``[participant] data`` again.

A state folder without it (kept before this file existed, or an upload whose training failed)
trains it at its first gain, from ``[participant] data`` checked against the digest kept with
the key, and keeps it then. A baseline kept for other records, another split or another model
family than the federation's is trained again the same way.

Federations whose model never reaches the sites (k-NN, or none) keep no baseline: the site's
gain is then the analyst's comparison on its rows of ``Z``.

References: issue 31 (item 3); issue 20 (item 4).
"""

from __future__ import annotations

import hashlib
import logging
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from noisyanchor.common.chunks import row_chunks, rows_of
from noisyanchor.common.downstream import fit_downstream
from noisyanchor.common.errors import InvalidInputError, PreconditionError
from noisyanchor.common.models import Classifier, dump_arrays, export_estimator, load_arrays
from noisyanchor.common.models.site_model import embedded_model
from noisyanchor.common.splits import TEST
from noisyanchor.participant.config import ParticipantConfig
from noisyanchor.participant.data import LocalData
from noisyanchor.participant.site_state import (
    SiteKey,
    check_kept_digest,
    keep_with_digest,
    records_digest,
)

log = logging.getLogger(__name__)

#: The kept baseline, in ``state_dir`` (its SHA-256 in ``local-baseline.sha256``).
LOCAL_BASELINE_FILE = "local-baseline.bin"

#: Format name of the kept baseline file.
LOCAL_BASELINE_FORMAT = "noisyanchor.local-baseline"

#: Federation models never returned to a site (its gain is then the analyst's).
NOT_RETURNED = ("knn", "none")

_MODEL = "model."
_META_KEYS = {"federation_id", "participant", "model_name", "records_sha256", "tags_sha256",
              "model", "not_fitted", "c"}


def tags_digest(tags: np.ndarray) -> str:
    """SHA-256 (hex) of the split tags a baseline was trained and tested with."""
    return hashlib.sha256(np.ascontiguousarray(tags, dtype="|i1").tobytes()).hexdigest()


@dataclass(frozen=True)
class LocalBaseline:
    """A site's local-only model and the test rows its gain is measured on.

    Attributes
    ----------
    federation_id, participant : str
    model_name : str
        The federation's model family it was trained as (:data:`common.downstream.MODELS`).
    records_sha256, tags_sha256 : str
        The uploaded records' digest (:func:`participant.site_state.records_digest`) and the
        split's (:func:`tags_digest`): what ties it to the kept key.
    model : Classifier or None
        The local-only model on raw records ``X_i``; None when it could not be fitted.
    not_fitted : str
        Why there is no model ("no local-only model: ..."), empty when there is one.
    c : float or None
        The hyper-parameter its search chose.
    test_x : (n_test, d_in) ndarray
        ``X_i[test]``, the site's raw test records.
    test_labels : (n_test,) ndarray of int64
    """

    federation_id: str
    participant: str
    model_name: str
    records_sha256: str
    tags_sha256: str
    model: Classifier | None
    not_fitted: str
    c: float | None
    test_x: np.ndarray
    test_labels: np.ndarray

    def __post_init__(self) -> None:
        if (self.model is None) == (not self.not_fitted):
            raise InvalidInputError("a local baseline has either a model or the reason it has "
                                    "none")
        if self.test_x.ndim != 2 or self.test_labels.shape != self.test_x.shape[:1]:
            raise InvalidInputError(f"its test rows {self.test_x.shape} and labels "
                                    f"{self.test_labels.shape} do not fit together")

    def fits(self, key: SiteKey, model_name: str) -> bool:
        """Whether it was trained for ``key``'s records and split, as ``model_name``."""
        return (self.federation_id, self.participant, self.records_sha256, self.tags_sha256,
                self.model_name) == (key.federation_id, key.participant, key.records_sha256,
                                     tags_digest(key.tags), model_name)

    def predict(self, x: np.ndarray) -> np.ndarray | None:
        """The local-only model's labels of raw records ``x`` (None without a model)."""
        if self.model is None:
            return None
        return chunked_labels(self.model.predict, x)

    def to_bytes(self) -> bytes:
        """The kept file (:mod:`common.models.container`)."""
        arrays = {"test_x": self.test_x, "test_labels": self.test_labels.astype("<i8")}
        model_meta = None
        if self.model is not None:
            model_meta, model_arrays = self.model.to_arrays()
            arrays |= {_MODEL + k: v for k, v in model_arrays.items()}
        return dump_arrays(LOCAL_BASELINE_FORMAT, {
            "federation_id": self.federation_id, "participant": self.participant,
            "model_name": self.model_name, "records_sha256": self.records_sha256,
            "tags_sha256": self.tags_sha256, "model": model_meta, "not_fitted": self.not_fitted,
            "c": self.c}, arrays)


def chunked_labels(predict, x: np.ndarray) -> np.ndarray:
    """``predict(x)`` a chunk of rows at a time (:data:`common.chunks.CHUNK_ROWS`): the model's
    intermediate arrays are a chunk's, whatever the row count."""
    out = np.empty(len(x), dtype=np.int64)
    for rows in row_chunks(len(x)):
        out[rows] = predict(x[rows])
    return out


def load_local_baseline(raw: bytes, *, what: str = "the local baseline") -> LocalBaseline:
    """A :class:`LocalBaseline` from its file's bytes, every entry checked (no code runs; NaN
    or Inf in any array, unknown or missing entries are refused)."""
    loaded = load_arrays(raw, LOCAL_BASELINE_FORMAT, what=what)
    meta, arrays = loaded.meta, loaded.arrays
    try:
        if set(meta) != _META_KEYS:
            raise InvalidInputError(f"its metadata must have exactly the keys "
                                    f"{sorted(_META_KEYS)}, got {sorted(meta)}")
        for name in ("federation_id", "participant", "model_name", "records_sha256",
                     "tags_sha256", "not_fitted"):
            if not isinstance(meta[name], str):
                raise InvalidInputError(f"{name!r} must be a string")
        c = meta["c"]
        if c is not None and (not isinstance(c, int | float) or isinstance(c, bool)):
            raise InvalidInputError(f"'c' must be a number or null, got {c!r}")
        model_arrays = {k[len(_MODEL):]: v for k, v in arrays.items() if k.startswith(_MODEL)}
        if set(arrays) - {_MODEL + k for k in model_arrays} != {"test_x", "test_labels"}:
            raise InvalidInputError(f"it must hold the arrays test_x, test_labels and the "
                                    f"model's; got {sorted(arrays)}")
        if arrays["test_x"].dtype.kind != "f" or arrays["test_labels"].dtype.kind not in "iu":
            raise InvalidInputError("test_x must hold floats and test_labels integers")
        model = embedded_model(meta["model"], model_arrays)
        return LocalBaseline(meta["federation_id"], meta["participant"], meta["model_name"],
                             meta["records_sha256"], meta["tags_sha256"], model,
                             meta["not_fitted"], None if c is None else float(c),
                             arrays["test_x"], arrays["test_labels"].astype(np.int64))
    except InvalidInputError as err:
        raise InvalidInputError(f"{what}: {err}") from None


def train_local_baseline(key: SiteKey, x: np.ndarray, labels: np.ndarray,
                         model_name: str) -> LocalBaseline:
    """The local-only model of the uploaded records ``x`` (``n x d_in``, raw) and ``labels``
    with ``key``'s split, exported to arrays, and the test rows. ``x`` and ``labels`` are the
    records ``key`` was kept for (the caller has them from the upload, or checked them against
    ``key.records_sha256``)."""
    test = key.tags == TEST
    test_x = rows_of(np.asarray(x, dtype=np.float64), test)
    model, why, c = None, "", None
    try:
        fitted = fit_downstream(x, labels, key.tags, model=model_name)
        model = export_estimator(fitted.estimator, fitted.center, fitted.scale, test_x)
        c = float(fitted.utility.c)
    except InvalidInputError as err:
        why = f"no local-only model: {err}"
    return LocalBaseline(key.federation_id, key.participant, model_name, key.records_sha256,
                         tags_digest(key.tags), model, why, c, test_x,
                         np.asarray(labels)[test].astype(np.int64))


def baseline_path(cfg: ParticipantConfig) -> Path:
    """Where ``cfg``'s site keeps its baseline."""
    return cfg.state_dir / LOCAL_BASELINE_FILE


def keep_local_baseline(cfg: ParticipantConfig, baseline: LocalBaseline) -> Path:
    """Write the baseline and its SHA-256 (0600) into the state folder (0700)."""
    path = baseline_path(cfg)
    keep_with_digest(path, baseline.to_bytes())
    return path


def local_baseline(cfg: ParticipantConfig, key: SiteKey, model_name: str) -> LocalBaseline:
    """The kept baseline when it was trained for ``key`` as ``model_name``; else trained now
    from ``[participant] data`` (checked to be the uploaded records) and kept.

    Raises
    ------
    IntegrityError
        The kept file was changed since it was kept (its whole SHA-256 differs).
    InvalidInputError
        The kept file is not a valid baseline (never executed).
    PreconditionError
        It must be trained and the records at ``[participant] data`` are not the uploaded ones.
    """
    path = baseline_path(cfg)
    if path.is_file():
        raw = path.read_bytes()
        kept = load_local_baseline(raw, what=str(path))
        check_kept_digest(path, raw, "remove it and its .sha256: the next gain trains it "
                                     "again from [participant] data")
        if kept.fits(key, model_name):
            return kept
        log.info("%s: the kept local-only model was trained for other records, another split "
                 "or model; training it again", cfg.id)
    data = uploaded_records(cfg, key)
    assert data.labels is not None  # checked by uploaded_records
    baseline = train_local_baseline(key, data.x, data.labels, model_name)
    keep_local_baseline(cfg, baseline)
    log.info("%s: local-only %s model trained from %s and kept in %s", cfg.id, model_name,
             cfg.data, path)
    return baseline


def uploaded_records(cfg: ParticipantConfig, key: SiteKey) -> LocalData:
    """The site's records at ``[participant] data``, checked to be the ones it uploaded."""
    from noisyanchor.participant.run import local_data

    data = local_data(cfg)
    if data.labels is None or records_digest(data.x, data.labels) != key.records_sha256:
        raise PreconditionError(f"the records in {cfg.data} are not the ones {cfg.id} uploaded "
                                "(their digest differs from the one kept with the key), so "
                                "the kept train/test split does not apply to them")
    return data

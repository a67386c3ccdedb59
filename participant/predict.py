"""Local prediction on new records: ``noisyanchor participant predict`` and its Python twin.

A site maps each new record exactly as it mapped its uploaded records and applies the
federation's model: ``h(N_i(M_i(x F)))`` (:class:`SitePredictor`). Its key ``M_i`` and the
public ``F`` come from its state folder (:mod:`participant.site_state`); the map ``N_i`` and
the model ``h`` from the analyst, fetched once (``FetchSiteModel``) and cached in the state
folder as the verified bytes the analyst sent (``--refresh`` fetches again). After that nothing
touches the network: nothing about the new records leaves the site.

In a notebook::

    from noisyanchor.participant.predict import predict
    out = predict("kits/org-a/org-a.toml", "monday.csv")   # or an (n, d_in) array
    out.labels, out.probabilities, out.classes

References: SPEC.md sections 1-2; issue 20 (item 3).
"""

from __future__ import annotations

import csv
import hashlib
import logging
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from noisyanchor.common.errors import IntegrityError, InvalidInputError, PreconditionError
from noisyanchor.common.files import atomic_write, private_dir
from noisyanchor.common.models import Classifier, SiteModel, load_site_model
from noisyanchor.common.tabular.ranges import far_values
from noisyanchor.common.text import inert_cell
from noisyanchor.participant.config import ParticipantConfig, load_participant_config
from noisyanchor.participant.data import LocalData, load_local_data
from noisyanchor.participant.site_state import SiteKey, load_site_key

log = logging.getLogger(__name__)

#: The site model as fetched from the analyst (verified bytes), in ``state_dir``.
SITE_MODEL_FILE = "site-model.bin"

#: The SHA-256 of the whole kept site model, written when it is fetched: an edit of the kept
#: file (a digit of its JSON header, which its own per-array digests do not cover) is refused.
SITE_MODEL_DIGEST_FILE = "site-model.sha256"

#: Seconds a fetch retries an unavailable analyst (predict and status ask, they do not wait).
FETCH_WAIT = 30.0


def _checked(cfg: ParticipantConfig, site: SiteModel, where: str) -> SiteModel:
    if (site.federation_id, site.participant) != (cfg.federation_id, cfg.id):
        raise PreconditionError(f"{where} is the site model of {site.participant!r} in "
                                f"federation {site.federation_id!r}, not of {cfg.id!r} in "
                                f"{cfg.federation_id!r}")
    return site


def _check_kept(cfg: ParticipantConfig, path: Path, raw: bytes) -> None:
    """Refuse the kept site model's bytes ``raw`` unless they match the digest written when it
    was fetched (a file kept before digests were written gets its digest now)."""
    digest_path = path.with_name(SITE_MODEL_DIGEST_FILE)
    actual = hashlib.sha256(raw).hexdigest()
    if not digest_path.is_file():
        atomic_write(digest_path, actual.encode())
    elif cfg.read_state(digest_path, 256).decode(errors="replace").strip() != actual:
        raise IntegrityError(f"{path} was changed since it was fetched (its SHA-256 is not the "
                             f"one in {digest_path.name}); fetch it again with --refresh")


def site_model(cfg: ParticipantConfig, *, refresh: bool = False,
               wait: float = FETCH_WAIT) -> SiteModel:
    """This site's part of the result: from the state folder, else (or with ``refresh``)
    fetched from the analyst, checked and cached.

    Raises
    ------
    PreconditionError
        The federation is not done (the analyst's refusal names what it waits for).
    InvalidInputError
        The cached file is not a valid site model (a pickle, altered bytes...); it is never
        executed. ``refresh`` replaces it.
    """
    path = cfg.state_dir / SITE_MODEL_FILE
    if path.is_file() and not refresh:
        raw = cfg.read_state(path)
        site = load_site_model(raw, what=str(path))  # what it is first: a pickle is named
        _check_kept(cfg, path, raw)
        return _checked(cfg, site, str(path))
    from noisyanchor.participant.anchor import exchange_key_path
    from noisyanchor.participant.run import analyst_client

    with analyst_client(cfg, min(cfg.wait_seconds, wait)) as client:
        raw = client.fetch_site_model(cfg.id)
    site = _checked(cfg, load_site_model(raw, what="the site model from the analyst"),
                    "the analyst's answer")
    private_dir(cfg.state_dir)
    atomic_write(path, raw)
    atomic_write(path.with_name(SITE_MODEL_DIGEST_FILE), hashlib.sha256(raw).hexdigest().encode())
    # The federation is done: no screening can send this site back to the agreement.
    exchange_key_path(cfg.state_dir, cfg.federation_id).unlink(missing_ok=True)
    log.info("%s: site model fetched from the analyst (%d bytes) and kept in %s", cfg.id,
             len(raw), path)
    return site


@dataclass(frozen=True)
class SitePredictor:
    """``x -> h(N_i(M_i(x F)))``: a site's key, its map and the federation's model.

    Attributes
    ----------
    key : SiteKey
        ``F`` and ``(O_i, Psi_i)``.
    site : SiteModel
        ``N_i`` and ``h``.
    """

    key: SiteKey
    site: SiteModel

    def __post_init__(self) -> None:
        if self.site.model is None:
            raise PreconditionError(f"the analyst did not return a model to "
                                    f"{self.site.participant}: {self.site.model_withheld}")
        if self.key.key.dim != self.site.dim:
            raise PreconditionError(f"the kept key has width {self.key.key.dim} but the site "
                                    f"model's map takes {self.site.dim}")

    @property
    def model(self) -> Classifier:
        """The federation's model ``h``."""
        assert self.site.model is not None
        return self.site.model

    @property
    def classes(self) -> np.ndarray:
        """Labels in the order of the probability columns."""
        return self.model.classes

    def rows(self, x: np.ndarray) -> np.ndarray:
        """``N_i(M_i(x F))``: raw records ``x`` (``n x d_in``) as rows of ``Z``'s frame."""
        return self.site.map_rows(self.key.encode(x))

    def predict_proba(self, x: np.ndarray) -> np.ndarray:
        """Class probabilities ``(n, c)`` of raw records ``x``."""
        return self.model.predict_proba(self.rows(x))

    def predict(self, x: np.ndarray) -> np.ndarray:
        """Predicted labels ``(n,)`` of raw records ``x``."""
        return self.model.predict(self.rows(x))


def load_predictor(cfg: ParticipantConfig, *, refresh: bool = False) -> SitePredictor:
    """The (cached or fetched) site model and the kept key of ``cfg``'s site. The site model
    comes first: before the federation is done, the analyst's refusal says what it waits for."""
    site = site_model(cfg, refresh=refresh)
    return SitePredictor(load_site_key(cfg), site)


def prediction_records(cfg: ParticipantConfig, path: Path, key: SiteKey, *,
                       labels: str | None = None, strict: bool = False) -> LocalData:
    """New records through the upload's own chain (:func:`participant.data.load_local_data`
    with the schema kept when the site joined: read, schema checks, public preprocessing; a
    label column may be absent and is not used), then checked against the upload: the same
    columns, named in the same order when both name them; and the upload's range and unit
    checks (:func:`common.tabular.ranges.far_values`): each column out of its declared range
    is warned about, naming the column and the first line, or (``strict``) refused.

    ``labels`` names the column holding the records' true labels (``predict --labels``): then
    it must be there, and it is read as the upload's labels were.
    """
    from noisyanchor.participant.run import kept_schema

    schema = kept_schema(cfg)
    declared = schema.tabular.label if schema is not None and schema.tabular else None
    if labels is not None and declared and labels != declared:
        raise InvalidInputError(f"--labels {labels}: the federation's schema names the label "
                                f"column {declared!r}; the labels of {path} must be there")
    data = load_local_data(path, schema=schema, label_column=labels or cfg.label_column,
                           tag_column=cfg.tag_column, label_index=cfg.label_index,
                           require_labels=labels is not None, delimiter=cfg.delimiter)
    if schema is not None:
        schema.check(data.x, data.feature_names, who=str(path), federation=cfg.federation_id)
    check_records(key, data.x, data.feature_names, str(path))
    if schema is not None and schema.tabular is not None and data.lines is not None:
        found = far_values(schema.tabular, data.x, data.lines)
        if strict and found:
            raise InvalidInputError(f"{path}: " + "; ".join(map(str, found))
                                    + " (refused: --strict; nothing was predicted)")
        for far in found:
            log.warning("%s: %s", path, far)
    return data


def check_records(key: SiteKey, x: np.ndarray, names, who: str) -> None:
    """Refuse records that do not have the uploaded records' columns, naming both sides."""
    if x.ndim != 2 or x.shape[1] != key.d_in:
        raise InvalidInputError(f"{who} has {x.shape[1] if x.ndim == 2 else x.shape} feature "
                                f"columns but {key.participant}'s upload had {key.d_in}")
    if names is not None and key.feature_names is not None and tuple(names) != key.feature_names:
        diff = next(i for i, (a, b) in enumerate(zip(names, key.feature_names, strict=True))
                    if a != b)
        raise InvalidInputError(f"{who}: column {diff + 1} is {names[diff]!r} but the upload's "
                                f"column {diff + 1} was {key.feature_names[diff]!r}; the columns "
                                "must come in the upload's order")


@dataclass(frozen=True)
class Predictions:
    """Predicted labels and class probabilities of ``n`` records.

    Attributes
    ----------
    labels : (n,) ndarray of int64
    probabilities : (n, c) ndarray
        Columns in the order of ``classes``.
    classes : (c,) ndarray of int64
    rows : (n,) ndarray of int64
        Each record's 1-based position in its input.
    lines : (n,) ndarray of int64
        The line each record starts on in its CSV file (header: line 1); its row otherwise.
    class_names : tuple of str or None
        The label text of each class in ``classes`` when the federation's schema declares them
        (``label_classes``: ``benign``, ``malignant``); None for integer labels.
    """

    labels: np.ndarray
    probabilities: np.ndarray
    classes: np.ndarray
    rows: np.ndarray
    lines: np.ndarray
    class_names: tuple[str, ...] | None = None

    @property
    def names(self) -> list[str]:
        """The predicted labels as the site's table writes them (their texts, or numbers)."""
        if self.class_names is None:
            return [str(int(c)) for c in self.labels]
        by_class = dict(zip(self.classes.tolist(), self.class_names, strict=True))
        return [by_class[int(c)] for c in self.labels]

    def write_csv(self, path: Path) -> Path:
        """One line per input record: ``row``, ``line``, ``label``, ``p_<class>`` for every
        class (the label texts when the schema declares them; probabilities with every digit:
        ``repr`` of the float)."""
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        with path.open("w", newline="") as fh:
            out = csv.writer(fh)
            names = self.class_names or [str(int(c)) for c in self.classes]
            out.writerow(["row", "line", "label", *(f"p_{c}" for c in names)])
            for row, line, label, p in zip(self.rows, self.lines, self.names,
                                           self.probabilities, strict=True):
                # A label text (the schema's, from a site's data) is never a formula here.
                out.writerow([int(row), int(line), inert_cell(label),
                              *(repr(float(v)) for v in p)])
        return path


def class_names(cfg: ParticipantConfig, classes: np.ndarray) -> tuple[str, ...] | None:
    """The label texts of the model's ``classes`` (integer codes ``0 .. k-1``) from the schema
    kept when the site joined, when it declares them."""
    from noisyanchor.participant.run import kept_schema

    schema = kept_schema(cfg)
    texts = schema.tabular.label_classes if schema is not None and schema.tabular else ()
    if not texts:
        return None
    if not all(0 <= int(c) < len(texts) for c in classes):
        raise InvalidInputError(f"the model predicts classes {classes.tolist()} but the schema "
                                f"names {len(texts)} label classes {list(texts)}")
    return tuple(texts[int(c)] for c in classes)


def predict_with(predictor: SitePredictor, x: np.ndarray, lines: np.ndarray | None = None,
                 names: tuple[str, ...] | None = None) -> Predictions:
    """:class:`Predictions` of raw records ``x`` (``n x d_in``; ``lines``: where each is in
    its file; ``names``: the label texts of the classes, :func:`class_names`)."""
    x = np.asarray(x, dtype=np.float64)
    check_records(predictor.key, x, None, "the records")
    proba = predictor.predict_proba(x)
    rows = np.arange(1, len(x) + 1, dtype=np.int64)
    return Predictions(predictor.predict(x), proba, predictor.classes, rows,
                       rows if lines is None else np.asarray(lines, dtype=np.int64), names)


def predict(config: Path | str | ParticipantConfig, records: Path | str | np.ndarray, *,
            refresh: bool = False, strict: bool = False) -> Predictions:
    """Predict new records locally (the Python twin of ``participant predict``).

    Parameters
    ----------
    config : path or ParticipantConfig
        The site's kit config.
    records : path or (n, d_in) ndarray
        A table as the upload's (``.csv``, ``.npz``, ``.npy``; a label column is not needed
        and not used), or raw records.
    refresh : bool
        Fetch the site model from the analyst again.
    strict : bool
        Refuse a table with a column out of its declared range (else: a warning).
    """
    cfg = config if isinstance(config, ParticipantConfig) else load_participant_config(
        Path(config))
    predictor = load_predictor(cfg, refresh=refresh)
    names = class_names(cfg, predictor.classes)
    if isinstance(records, np.ndarray):
        return predict_with(predictor, records, names=names)
    data = prediction_records(cfg, Path(records), predictor.key, strict=strict)
    return predict_with(predictor, data.x, data.lines, names)

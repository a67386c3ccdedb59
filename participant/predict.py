"""Local prediction on new records: ``noisyanchor participant predict`` and its Python twin.

A site maps each new record exactly as it mapped its uploaded records and applies the
federation's model: ``h(N_i(M_i(x F)))`` (:class:`SitePredictor`). Its key ``M_i`` and the
public ``F`` come from its state folder (:mod:`participant.site_state`); the map ``N_i`` and
the model ``h`` from the analyst, fetched once (``FetchSiteModel``) and cached in the state
folder as the verified bytes the analyst sent (``--refresh`` fetches again). After that nothing
touches the network: nothing about the new records leaves the site. ``participant predict``
reads, predicts and writes the new records a chunk at a time (:func:`predicted_chunks`), so its
memory does not grow with their number (``benchmarks/bench_site_predict.py``); the Python twin
below returns them all at once.

In a notebook::

    from noisyanchor.participant.predict import predict
    out = predict("kits/org-a/org-a.toml", "monday.csv")   # or an (n, d_in) array
    out.labels, out.probabilities, out.classes

References: SPEC.md sections 1-2; issue 20 (item 3); issue 31 (item 3).
"""

from __future__ import annotations

import csv
import logging
import os
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from noisyanchor.common.errors import InvalidInputError, PreconditionError
from noisyanchor.common.models import Classifier, SiteModel, load_site_model
from noisyanchor.common.tabular.ranges import RangeTally
from noisyanchor.common.tabular.reader import CHUNK_ROWS
from noisyanchor.common.text import inert_cell
from noisyanchor.participant.config import ParticipantConfig, load_participant_config
from noisyanchor.participant.core.upload import own_site_model
from noisyanchor.participant.data import LocalData, local_data_chunks
from noisyanchor.participant.site_state import (
    SiteKey,
    check_kept_digest,
    keep_with_digest,
    load_site_key,
)

log = logging.getLogger(__name__)

#: The site model as fetched from the analyst (verified bytes), in ``state_dir``.
SITE_MODEL_FILE = "site-model.bin"

#: The SHA-256 of the whole kept site model, written when it is fetched: an edit of the kept
#: file (a digit of its JSON header, which its own per-array digests do not cover) is refused.
SITE_MODEL_DIGEST_FILE = "site-model.sha256"

#: Records ``participant predict`` reads, maps, predicts and writes at a time.
PREDICT_CHUNK_ROWS = CHUNK_ROWS

#: Seconds a fetch retries an unavailable analyst (predict and status ask, they do not wait).
FETCH_WAIT = 30.0


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
        check_kept_digest(path, raw, "fetch it again with --refresh", since="fetched")
        return own_site_model(cfg, site, str(path))
    from noisyanchor.participant.anchor import exchange_key_path
    from noisyanchor.participant.run import analyst_client

    with analyst_client(cfg, min(cfg.wait_seconds, wait)) as client:
        raw = client.fetch_site_model(cfg.id)
    site = own_site_model(cfg, load_site_model(raw, what="the site model from the analyst"),
                    "the analyst's answer")
    keep_with_digest(path, raw)
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


def prediction_chunks(cfg: ParticipantConfig, path: Path, key: SiteKey, *,
                      labels: str | None = None, strict: bool = False,
                      chunk_rows: int = PREDICT_CHUNK_ROWS) -> Iterator[LocalData]:
    """New records through the upload's own chain, ``chunk_rows`` at a time
    (:func:`participant.data.local_data_chunks` with the schema kept when the site joined: read,
    schema checks, public preprocessing; a label column may be absent and is not used), each
    chunk checked against the upload: the same columns, named in the same order when both name
    them. Once every chunk is read, the upload's range and unit checks over all of them
    (:class:`common.tabular.ranges.RangeTally`, as :func:`~common.tabular.ranges.far_values`
    on the whole table): each column out of its declared range is warned about, naming the
    column and the first line, or (``strict``) refused by raising after the last chunk.

    ``labels`` names the column holding the records' true labels (``predict --labels``): then
    it must be there, and it is read as the upload's labels were.
    """
    from noisyanchor.participant.run import kept_schema

    schema = kept_schema(cfg)
    declared = schema.tabular.label if schema is not None and schema.tabular else None
    if labels is not None and declared and labels != declared:
        raise InvalidInputError(f"--labels {labels}: the federation's schema names the label "
                                f"column {declared!r}; the labels of {path} must be there")
    tally = RangeTally(schema.tabular) if schema is not None and schema.tabular else None
    for data in local_data_chunks(path, schema=schema, label_column=labels or cfg.label_column,
                                  tag_column=cfg.tag_column, label_index=cfg.label_index,
                                  require_labels=labels is not None, delimiter=cfg.delimiter,
                                  decimal=cfg.decimal, chunk_rows=chunk_rows):
        if schema is not None:
            schema.check(data.x, data.feature_names, who=str(path),
                         federation=cfg.federation_id)
        check_records(key, data.x, data.feature_names, str(path))
        if tally is not None and data.lines is not None:
            tally.add(data.x, data.lines)
        yield data
    found = tally.found() if tally is not None else []
    if strict and found:
        raise InvalidInputError(f"{path}: " + "; ".join(map(str, found))
                                + " (refused: --strict; nothing was predicted)")
    for far in found:
        log.warning("%s: %s", path, far)


def prediction_records(cfg: ParticipantConfig, path: Path, key: SiteKey, *,
                       labels: str | None = None, strict: bool = False) -> LocalData:
    """Every new record of ``path`` at once (:func:`prediction_chunks`, joined): what the
    Python :func:`predict` reads; ``participant predict`` goes a chunk at a time."""
    chunks = list(prediction_chunks(cfg, path, key, labels=labels, strict=strict))

    def joined(name: str) -> np.ndarray | None:
        parts = [getattr(c, name) for c in chunks]
        return None if parts[0] is None else np.concatenate(parts)

    x = joined("x")
    assert x is not None
    return LocalData(x, joined("labels"), joined("tags"), chunks[0].feature_names,
                     joined("lines"))


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
        return write_predictions(path, [self])

    def header(self) -> list[str]:
        """The CSV header: ``row``, ``line``, ``label``, ``p_<class>`` for every class."""
        names = self.class_names or [str(int(c)) for c in self.classes]
        return ["row", "line", "label", *(f"p_{c}" for c in names)]

    def write_rows(self, out) -> None:
        """Each record's line of the CSV to the :func:`csv.writer` ``out``."""
        for row, line, label, p in zip(self.rows, self.lines, self.names, self.probabilities,
                                       strict=True):
            # A label text (the schema's, from a site's data) is never a formula here.
            out.writerow([int(row), int(line), inert_cell(label), *(repr(float(v)) for v in p)])


def write_predictions(path: Path, chunks: Iterable[Predictions]) -> Path:
    """Write the predictions of every chunk, in order, as one CSV
    (:meth:`Predictions.write_csv`), each chunk's lines as it comes: into a file beside
    ``path``, moved into place once the last chunk is written, so an error on the way
    (a bad record, ``--strict``) leaves no partial output."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(f".{path.name}.partial")
    try:
        with partial.open("w", newline="") as fh:
            out = csv.writer(fh)
            for k, chunk in enumerate(chunks):
                if k == 0:
                    out.writerow(chunk.header())
                chunk.write_rows(out)
        os.replace(partial, path)
    finally:
        partial.unlink(missing_ok=True)
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
                 names: tuple[str, ...] | None = None, *, first_row: int = 1) -> Predictions:
    """:class:`Predictions` of raw records ``x`` (``n x d_in``; ``lines``: where each is in
    its file; ``names``: the label texts of the classes, :func:`class_names`; ``first_row``:
    the position of ``x``'s first record in its input)."""
    x = np.asarray(x, dtype=np.float64)
    check_records(predictor.key, x, None, "the records")
    proba = predictor.predict_proba(x)
    rows = np.arange(first_row, first_row + len(x), dtype=np.int64)
    return Predictions(predictor.predict(x), proba, predictor.classes, rows,
                       rows if lines is None else np.asarray(lines, dtype=np.int64), names)


def predicted_chunks(cfg: ParticipantConfig, predictor: SitePredictor, path: Path, *,
                     labels: str | None = None, strict: bool = False,
                     chunk_rows: int = PREDICT_CHUNK_ROWS
                     ) -> Iterator[tuple[LocalData, Predictions]]:
    """Each chunk of the new records at ``path`` (:func:`prediction_chunks`) with its
    :class:`Predictions`, rows numbered across chunks: ``participant predict`` holds one chunk
    at a time, so a million records take the memory of a few thousand."""
    names = class_names(cfg, predictor.classes)
    done = 0
    for data in prediction_chunks(cfg, path, predictor.key, labels=labels, strict=strict,
                                  chunk_rows=chunk_rows):
        yield data, predict_with(predictor, data.x, data.lines, names, first_row=done + 1)
        done += len(data.x)


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

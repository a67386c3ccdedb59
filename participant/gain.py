"""What joining gained a site: the federation's model against the same model trained by the
site alone, both scored on the site's own test rows (``gain.json`` in the state folder).

The local-only baseline is what the site could do without the federation: the federation's kind
of model (same hyper-parameter search, :func:`common.downstream.fit_downstream`) trained on the
site's own training rows only, on its raw records ``X_i`` (``d_in`` columns, no projection ``F``,
no key: nothing leaves the site), trained once when the upload commits and kept with the test rows
(:mod:`participant.local_baseline`), so the gain never reads the whole table again. The
federation's number is the site's own: its test rows mapped by its key, its map ``N_i`` and
the model (:class:`participant.predict.SitePredictor`), on the records as they are (without the
private-data noise a ``-pn`` method adds to the upload), beside the number the analyst reported
for the same rows of ``Z``.

Both models are scored on the same test rows, and the site is told the paired difference with
its 95% interval and the rows it rests on, or, below 20 test rows or with one class among them,
what cannot be told and why (:mod:`common.comparison`; the fields are
:data:`common.comparison.GAIN_FIELDS`, the same in the analyst's per-site metrics).

References: issue 20 (item 4); issue 29 (item 2); issue 31 (item 3).
"""

from __future__ import annotations

import hashlib
import json
import logging
from pathlib import Path
from typing import Any

import numpy as np

from noisyanchor.common.comparison import (
    FEDERATION_TRAINED_ON,
    GAIN_FIELDS,
    LOCAL_ONLY_SEARCH,
    comparison_fields,
    comparison_text,
    paired_comparison,
)
from noisyanchor.common.files import atomic_write
from noisyanchor.common.models import SiteModel
from noisyanchor.common.splits import TEST, TRAIN
from noisyanchor.participant.config import ParticipantConfig
from noisyanchor.participant.local_baseline import LocalBaseline, chunked_labels, local_baseline
from noisyanchor.participant.predict import SITE_MODEL_FILE, SitePredictor
from noisyanchor.participant.site_state import SiteKey

log = logging.getLogger(__name__)

#: The gain report, in ``state_dir``.
GAIN_FILE = "gain.json"


def site_gain(cfg: ParticipantConfig, key: SiteKey, site: SiteModel) -> dict[str, Any]:
    """The federation's model against the local-only one on this site's test rows: the paired
    difference in balanced accuracy with its interval, or what cannot be told and why
    (:func:`common.comparison.comparison_fields`); scikit-learn's warnings go to the
    debug log, not the site's terminal.

    Raises
    ------
    PreconditionError
        The records at ``[participant] data`` are not the ones uploaded (their digest differs
        from the one kept with the key), so the kept split does not apply to them.
    """
    from noisyanchor.common.downstream import warnings_to_log

    with warnings_to_log(log):
        return _site_gain(cfg, key, site)


def _site_gain(cfg: ParticipantConfig, key: SiteKey, site: SiteModel) -> dict[str, Any]:
    tags = key.tags
    name = site.federation_metrics.get("name", "logistic")
    report: dict[str, Any] = {
        "participant": cfg.id, "federation_id": cfg.federation_id, "model": name,
        "train_rows": int((tags == TRAIN).sum()), "test_rows": int((tags == TEST).sum())}
    federation: dict[str, Any] = {"analyst_reported_balanced_accuracy":
                                      site.site_metrics.get("balanced_accuracy"),
                                  "federation_wide_balanced_accuracy":
                                      site.federation_metrics.get("balanced_accuracy")}
    local: dict[str, Any] = {}
    trained_on = {"federation_trained_on": FEDERATION_TRAINED_ON,
                  "local_only_trained_on": _local_trained_on(cfg, key)}
    if site.model is None:
        # No model here to score: the analyst's comparison on this site's rows of Z, if any.
        fields = {k: site.site_metrics.get(k) for k in GAIN_FIELDS} | {
            "test_rows": report["test_rows"]}  # the same rows, counted here too
        if "gain_not_told" not in site.site_metrics:
            fields["gain_not_told"] = (f"the federation's model is not returned to {cfg.id} "
                                       f"({site.model_withheld}) and the analyst sent no "
                                       "comparison on its rows")
        federation |= {"computed_by": "the analyst", "model_withheld": site.model_withheld}
        local["computed_by"] = "the analyst"
        trained_on["local_only_trained_on"] = site.site_metrics.get("local_only_trained_on")
    else:
        # The kept baseline holds the local-only model and the test rows: no table is read.
        baseline = local_baseline(cfg, key, name)
        labels = baseline.test_labels
        ours = chunked_labels(SitePredictor(key, site).predict, baseline.test_x)
        alone = baseline.predict(baseline.test_x)
        fields = comparison_fields(paired_comparison(labels, ours, alone,
                                                     second_missing=baseline.not_fitted))
        federation |= {"computed_by": cfg.id, "accuracy": _accuracy(labels, ours)}
        if alone is not None:
            local |= {"accuracy": _accuracy(labels, alone), "c": baseline.c}
    return report | fields | trained_on | {"local_only": local, "federation": federation}


def _accuracy(labels: np.ndarray, predicted: np.ndarray) -> float | None:
    return float(np.mean(labels == predicted)) if len(labels) else None


def labelled_gain(cfg: ParticipantConfig, predictor: SitePredictor, x: np.ndarray,
                  labels: np.ndarray) -> dict[str, Any]:
    """The federation's model against the site's local-only one on new records whose labels
    the site has (``participant predict --labels``), with the same paired interval: the fields
    of :data:`common.comparison.GAIN_FIELDS` (``test_rows``: the labelled records).

    Parameters
    ----------
    x : (m, d_in) ndarray
        The new records, raw (as the upload's).
    labels : (m,) ndarray
        Their true labels.
    """
    baseline = site_baseline(cfg, predictor)
    return labelled_comparison(cfg, predictor.key, labels,
                               chunked_labels(predictor.predict, x), baseline.predict(x),
                               baseline.not_fitted)


def site_baseline(cfg: ParticipantConfig, predictor: SitePredictor) -> LocalBaseline:
    """The site's local-only baseline for the federation's model family
    (:func:`participant.local_baseline.local_baseline`)."""
    return local_baseline(cfg, predictor.key,
                          predictor.site.federation_metrics.get("name", "logistic"))


def labelled_comparison(cfg: ParticipantConfig, key: SiteKey, labels: np.ndarray,
                        federation: np.ndarray, alone: np.ndarray | None,
                        missing: str) -> dict[str, Any]:
    """:func:`labelled_gain` from each model's labels of the records (``alone`` None: no
    local-only model, ``missing`` says why)."""
    compared = paired_comparison(labels, federation, alone, second_missing=missing)
    return comparison_fields(compared) | {
        "federation_trained_on": FEDERATION_TRAINED_ON,
        "local_only_trained_on": _local_trained_on(cfg, key)}


def _local_trained_on(cfg: ParticipantConfig, key: SiteKey) -> str:
    return f"{cfg.id}'s own training rows, raw records ({key.d_in} columns); {LOCAL_ONLY_SEARCH}"


def ensure_gain(cfg: ParticipantConfig, key: SiteKey, site: SiteModel, *,
                refresh: bool = False) -> dict[str, Any]:
    """The kept ``gain.json``, computed (and kept, 0600) when missing, when asked to, or when
    the site model it was computed for was fetched again."""
    path = cfg.state_dir / GAIN_FILE
    model_file = cfg.state_dir / SITE_MODEL_FILE
    fetched = (hashlib.sha256(cfg.read_state(model_file)).hexdigest() if model_file.is_file()
               else None)
    if path.is_file() and not refresh:
        kept = json.loads(cfg.read_state(path, 1 << 20))
        # A gain.json written before the interval was told is computed again.
        if kept.get("site_model_sha256") == fetched and "gain_not_told" in kept:
            return kept
    report = site_gain(cfg, key, site) | {"site_model_sha256": fetched}
    atomic_write(Path(path), (json.dumps(report, indent=2) + "\n").encode())
    return report


def gain_line(report: dict[str, Any]) -> str:
    """One sentence: the gain on the site's test rows with its interval and the row count, or
    what cannot be told and why."""
    return (f"on {report['participant']}'s {report['test_rows']} test rows: "
            f"{comparison_text(report)}")

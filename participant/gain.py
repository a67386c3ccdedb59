"""What joining gained a site: the federation's model against the same model trained by the
site alone, both scored on the site's own test rows (``gain.json`` in the state folder).

The local-only baseline is what the site could do without the federation: the federation's kind
of model (same hyper-parameter search, :func:`common.downstream.fit_downstream`) trained on the
site's own training rows only, on its raw records ``X_i`` (``d_in`` columns, no projection ``F``,
no key: nothing leaves the site). The federation's number is the site's own: its test rows
mapped by its key, its map ``N_i`` and the model (:class:`participant.predict.SitePredictor`),
on the records as they are (without the private-data noise a ``-pn`` method adds to the upload),
beside the number the analyst reported for the same rows of ``Z``.

References: issue 20 (item 4).
"""

from __future__ import annotations

import hashlib
import json
import logging
from pathlib import Path
from typing import Any

from noisyanchor.common.errors import InvalidInputError, PreconditionError
from noisyanchor.common.files import atomic_write
from noisyanchor.common.models import SiteModel
from noisyanchor.common.splits import TEST, TRAIN
from noisyanchor.participant.config import ParticipantConfig
from noisyanchor.participant.predict import SITE_MODEL_FILE, SitePredictor
from noisyanchor.participant.site_state import SiteKey, records_digest

log = logging.getLogger(__name__)

#: The gain report, in ``state_dir``.
GAIN_FILE = "gain.json"


def site_gain(cfg: ParticipantConfig, key: SiteKey, site: SiteModel) -> dict[str, Any]:
    """Local-only and federation balanced accuracy on this site's test rows, and the gain
    (scikit-learn's warnings go to the debug log, not the site's terminal).

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
    from noisyanchor.common.downstream import fit_downstream, held_out_metrics
    from noisyanchor.participant.run import local_data

    data = local_data(cfg)
    if data.labels is None or records_digest(data.x, data.labels) != key.records_sha256:
        raise PreconditionError(f"the records in {cfg.data} are not the ones {cfg.id} uploaded "
                                "(their digest differs from the one kept with the key), so "
                                "the kept train/test split does not apply to them")
    tags, labels = key.tags, data.labels
    test = tags == TEST
    name = site.federation_metrics.get("name", "logistic")
    report: dict[str, Any] = {
        "participant": cfg.id, "federation_id": cfg.federation_id, "model": name,
        "train_rows": int((tags == TRAIN).sum()), "test_rows": int(test.sum())}
    local: dict[str, Any] = {"trained_on": f"{cfg.id}'s own training rows, raw records "
                             f"({key.d_in} columns)"}
    try:
        fitted = fit_downstream(data.x, labels, tags, model=name)
        local |= {"balanced_accuracy": fitted.utility.balanced_accuracy,
                  "accuracy": held_out_metrics(labels[test], fitted.estimator.predict(
                      (data.x[test] - fitted.center) / fitted.scale))["accuracy"],
                  "c": fitted.utility.c}
    except InvalidInputError as err:
        local |= {"balanced_accuracy": None, "error": str(err)}
    analyst = site.site_metrics.get("balanced_accuracy")
    federation: dict[str, Any] = {"analyst_reported_balanced_accuracy": analyst,
                                  "federation_wide_balanced_accuracy":
                                      site.federation_metrics.get("balanced_accuracy")}
    if site.model is not None:
        own = held_out_metrics(labels[test], SitePredictor(key, site).predict(data.x[test]))
        federation |= {"balanced_accuracy": own["balanced_accuracy"],
                       "accuracy": own["accuracy"], "computed_by": cfg.id}
    else:
        federation |= {"balanced_accuracy": analyst, "computed_by": "the analyst",
                       "model_withheld": site.model_withheld}
    ours, alone = federation["balanced_accuracy"], local["balanced_accuracy"]
    report |= {"local_only_balanced_accuracy": alone, "federation_balanced_accuracy": ours,
               "gain": None if ours is None or alone is None else ours - alone,
               "local_only": local, "federation": federation}
    return report


def ensure_gain(cfg: ParticipantConfig, key: SiteKey, site: SiteModel, *,
                refresh: bool = False) -> dict[str, Any]:
    """The kept ``gain.json``, computed (and kept, 0600) when missing, when asked to, or when
    the site model it was computed for was fetched again."""
    path = cfg.state_dir / GAIN_FILE
    model_file = cfg.state_dir / SITE_MODEL_FILE
    fetched = (hashlib.sha256(model_file.read_bytes()).hexdigest() if model_file.is_file()
               else None)
    if path.is_file() and not refresh:
        kept = json.loads(path.read_text())
        if kept.get("site_model_sha256") == fetched:
            return kept
    report = site_gain(cfg, key, site) | {"site_model_sha256": fetched}
    atomic_write(Path(path), (json.dumps(report, indent=2) + "\n").encode())
    return report


def gain_line(report: dict[str, Any]) -> str:
    """One sentence: the two balanced accuracies on the site's test rows and the difference."""
    ours, alone, gain = (report["federation_balanced_accuracy"],
                         report["local_only_balanced_accuracy"], report["gain"])
    rows = f"on {report['participant']}'s {report['test_rows']} test rows"
    if gain is None:
        why = report["local_only"].get("error") or report["federation"].get("model_withheld")
        return (f"{rows}: federation balanced accuracy "
                f"{'unknown' if ours is None else f'{ours:.3f}'}; no comparison ({why})")
    return (f"{rows}: federation model {ours:.3f} vs local-only {alone:.3f} balanced accuracy "
            f"({gain:+.3f} from joining)")

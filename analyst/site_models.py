"""The downstream model the analyst keeps, and every site's part of the result.

After the alignment the analyst fits the configured model on the training rows of ``Z``
(:func:`common.downstream.fit_downstream`), exports it to plain arrays
(:mod:`common.models`; loading it can never run code), scores it on the test rows of the whole
federation and of each site (with the exported numpy model, the one the sites run), and writes
into the result folder:

* ``downstream.model``: the model file;
* ``site-<participant>.model``: what that site fetches (``FetchSiteModel``): its map ``N_i``
  (``R_i``, ``b_i``, ``c``), the model, the federation's held-out metrics and its own (with
  ``contribution``: its own leave-one-site-out aggregates, :mod:`analyst.contributions`).

A k-NN model is kept but never returned to a site: it holds the training rows of ``Z``, and a
site that knows its own key and map can map every row of ``Z`` back into its own working space,
which would hand it every other site's records. The site's part then says so instead.

References: SPEC.md section 2; issue 20.
"""

from __future__ import annotations

import hashlib
import logging
import time
from dataclasses import asdict
from typing import Any

import numpy as np

from noisyanchor.analyst.contributions import DEFAULT_MAX_SITES, contributions_result, site_view
from noisyanchor.common.alignment import Alignment, solver_for
from noisyanchor.common.chunks import CHUNK_ROWS, predict_chunked, rows_of
from noisyanchor.common.downstream import held_out_metrics
from noisyanchor.common.errors import InvalidInputError
from noisyanchor.common.methods import Method
from noisyanchor.common.models import Classifier, SiteModel, export_estimator
from noisyanchor.common.splits import TEST
from noisyanchor.common.visibility import visible_to

log = logging.getLogger(__name__)

#: The federation's model in the result folder.
MODEL_FILE = "downstream.model"

#: Why a k-NN model is not returned to the sites.
KNN_WITHHELD = ("the federation's model is k-NN, which holds the training rows of Z: with its own "
                "key and map a site could map every other site's records back into its own "
                "space, so k-NN is never returned to sites (the operator can set [model] name = "
                "\"logistic\" or \"mlp\")")


def site_model_file(pid: str) -> str:
    """Name of participant ``pid``'s site model in the result folder."""
    return f"site-{pid}.model"


def digest(data: bytes) -> str:
    """SHA-256 of ``data`` in hex (how ``result.json`` records each file)."""
    return hashlib.sha256(data).hexdigest()


def _fit(name: str, z: np.ndarray, labels: np.ndarray, tags: np.ndarray,
         owners: np.ndarray, fit: str) -> tuple[dict[str, Any], Classifier | None, str]:
    """The model's summary for ``result.json`` (with ``fit``, how it was fitted), the exported
    model (None when there is none) and why it is not returned to the sites (empty when it
    is)."""
    if name == "none":
        return {"name": "none"}, None, ("the federation fits no downstream model ([model] name "
                                        "= \"none\" in the analyst's config)")
    from noisyanchor.common.downstream import (
        fit_downstream,
        fit_route,
        with_participant_only,
    )

    start = time.perf_counter()
    try:  # one fit on Z; its metrics and the participant-only baseline come from it
        fitted = fit_downstream(z, labels, tags, model=name, fit=fit)
        utility = with_participant_only(fitted.utility, labels, tags, owners, model=name)
    except InvalidInputError as err:
        log.warning("downstream model %s not fitted: %s", name, err)
        return {"name": name, "error": str(err)}, None, f"the {name} model was not fitted: {err}"
    summary: dict[str, Any] = {"name": name, **asdict(utility),
                               "fit": fit_route(fit, name, utility.n_train, z.shape[1])}
    model = None
    try:  # checked on a chunk of test rows: gathering them all would hold a fifth of Z
        model = export_estimator(fitted.estimator, fitted.center, fitted.scale,
                                 rows_of(z, _first_rows(tags == TEST, CHUNK_ROWS)))
    except InvalidInputError as err:
        log.warning("downstream model %s not exported: %s", name, err)
        summary["error"] = f"not exported: {err}"
    summary["seconds"] = time.perf_counter() - start
    log.info("downstream model %s: held-out balanced accuracy %.4f (%d train, %d test rows)",
             name, utility.balanced_accuracy, utility.n_train, utility.n_test)
    if model is None:
        return summary, None, f"the {name} model could not be exported: {summary['error']}"
    return summary, model, KNN_WITHHELD if model.name == "knn" else ""


def downstream_result(*, federation_id: str, method: Method, participants: list[str],
                      model_name: str, alignment: Alignment, labels: np.ndarray,
                      tags: np.ndarray, contributions_max_sites: int = DEFAULT_MAX_SITES,
                      fit: str = "auto") -> tuple[dict[str, Any], dict[str, Any], dict[str, Any],
                                 dict[str, bytes]]:
    """Fit, export and score the downstream model, measure what each site contributed and
    package every site's part.

    Returns
    -------
    model : dict
        ``result.json``'s ``model``: its held-out metrics, ``sites`` (the metrics on each
        site's test rows), and the model file's name and SHA-256 when there is one.
    site_models : dict
        ``result.json``'s ``site_models``: ``{participant: {"file", "sha256"}}``.
    contributions : dict
        ``result.json``'s ``contributions`` (:func:`analyst.contributions.contributions_result`,
        ``contributions_max_sites`` extra fits at most).
    files : dict of str to bytes
        The files to add to the result folder.
    """
    z = alignment.z
    owners = np.concatenate([np.full(b - a, i) for i, (a, b) in enumerate(alignment.row_ranges)])
    summary, model, withheld = _fit(model_name, z, labels, tags, owners, fit)
    files: dict[str, bytes] = {}
    per_site: dict[str, dict[str, Any]] = {}
    if model is not None:
        files[MODEL_FILE] = model.to_bytes()
        summary |= {"file": MODEL_FILE, "sha256": digest(files[MODEL_FILE])}
        for pid, (a, b) in zip(participants, alignment.row_ranges, strict=True):
            test = tags[a:b] == TEST
            predicted = predict_chunked(model.predict, z[a:b], test)  # test rows only
            per_site[pid] = (held_out_metrics(labels[a:b][test], predicted)
                             | site_gain(model_name, z[a:b], labels[a:b], tags[a:b],
                                         predicted, fit=fit))
        summary["sites"] = per_site
    if withheld:
        summary["returned_to_sites"] = False
        summary["withheld"] = withheld
    contributions = contributions_result(
        federation_id=federation_id, participants=participants, z=z, labels=labels, tags=tags,
        owners=owners, per_site=per_site, model=None if model is None else model_name,
        max_sites=contributions_max_sites, fit=fit)
    sites: dict[str, Any] = {}
    federation_metrics = {k: v for k, v in summary.items() if k not in ("sites", "file",
                                                                       "sha256")}
    for i, pid in enumerate(participants):
        part = SiteModel(federation_id, pid, method.value, solver_for(method),
                         np.asarray(alignment.rotations[i], dtype=np.float64),
                         np.asarray(alignment.means[i], dtype=np.float64),
                         np.asarray(alignment.shift, dtype=np.float64),
                         None if withheld else model, withheld,
                         visible_to(federation_metrics, pid, participants),
                         per_site.get(pid, {}) | {"contribution": site_view(contributions, pid)})
        name = site_model_file(pid)
        files[name] = part.to_bytes()
        sites[pid] = {"file": name, "sha256": digest(files[name])}
    return summary, sites, contributions, files


def _first_rows(flags: np.ndarray, count: int) -> np.ndarray:
    """``flags`` with only its first ``count`` set entries kept."""
    kept = np.zeros_like(flags)
    kept[np.flatnonzero(flags)[:count]] = True
    return kept


def site_gain(model_name: str, z_site: np.ndarray, labels: np.ndarray, tags: np.ndarray,
              federation: np.ndarray, *, fit: str = "auto") -> dict[str, Any]:
    """The federation's model against a local-only model of the same family and search trained
    on one site's own rows of ``Z`` (its records in the common frame), on its test rows, with
    the paired interval (:func:`common.comparison.against_local_only`): one extra fit per site.

    With a public projection ``F`` (``h < d``) the site's own ``gain.json`` can differ: its
    local-only model sees its raw records, this one only their ``h`` projected columns (on
    the one-host digits pilot with ``h = 16``: -0.104 at the site, +0.002 here).

    Parameters
    ----------
    z_site : (n_i, d) ndarray
        The site's rows of ``Z``.
    labels, tags : (n_i,) ndarray
        Their labels and split tags.
    federation : (n_test,) ndarray
        The federation model's predicted labels on the site's test rows.
    fit : str
        How the local-only model is fitted (:data:`common.downstream.FIT_MODES`).
    """
    from noisyanchor.common.comparison import (
        FEDERATION_TRAINED_ON,
        LOCAL_ONLY_SEARCH,
        against_local_only,
        comparison_fields,
    )

    compared, _ = against_local_only(z_site, labels, tags, federation, model=model_name,
                                     fit=fit)
    return comparison_fields(compared) | {
        "federation_trained_on": FEDERATION_TRAINED_ON,
        "local_only_trained_on": f"this site's own training rows of Z; {LOCAL_ONLY_SEARCH}; "
                                 "in Z's frame, after any public projection F, so what F costs "
                                 "the site is not in this gain (its own gain.json compares "
                                 "with its raw records)"}

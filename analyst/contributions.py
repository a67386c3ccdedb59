"""What each site contributed to every other: leave-one-site-out refits of the federation's model.

For sites ``j != k`` of the ``p`` sites, with ``BA_k(h)`` the balanced accuracy of a model ``h``
on site ``k``'s test rows of ``Z``, the contribution of ``j`` to ``k`` is

    C[j, k] = BA_k(h) - BA_k(h_{-j})

where ``h`` is the federation's model and ``h_{-j}`` the same family with the same
hyper-parameter search (:func:`common.downstream.fit_downstream`) refitted on the training and
validation rows of ``Z`` without site ``j``'s rows. ``C[j, k] > 0``: ``j``'s rows helped ``k``;
``C[j, k] < 0``: ``k`` is better off without them. ``BA_k(h)`` is the number the analyst already
reports for ``k`` (the exported model, whose labels on the test rows equal the fitted model's:
the export checks it), so no fit of ``h`` is repeated.

Alignment of the refits: the same aligned ``Z`` (the alignment of every site), with site ``j``'s
rows dropped; no site is realigned. That is the cheap, honest choice: realigning without ``j``
would cost one alignment per site and move every other site's map, so the difference would mix
what ``j``'s records taught the model with how its upload moved the alignment. ``C`` measures the
first only; under an anchored method ``j``'s anchor upload enters the alignment of everyone, and
that effect is not in ``C``.

Aggregates, each over the entries of ``C`` that exist (``j`` left out, ``k != j``, ``k`` with
test rows, the refit possible):

* received by ``k``: ``sum_j C[j, k]`` and its mean over those ``j``; what the others, one at a
  time, gave ``k``. It is not the joint effect of all of them (the model is not additive in its
  sites); that is the site's gain, federation against local-only (``gain.json``);
* given by ``j``: ``sum_k C[j, k]``, its mean over those ``k``, and how many ``k`` it made worse
  (``C[j, k] < -tol``) or better (``> tol``), with ``tol`` = :data:`TOLERANCE`;
* ``harms_others``: ``j`` made strictly more than half of the sites it was scored on worse.

Both sums run over the same entries, so ``sum_k received_k = sum_j given_j`` (the sum of ``C``).

Cost: one extra :func:`fit_downstream` per site left out (each a full hyper-parameter search, on
about ``(p - 1) / p`` of the rows). ``[model] contributions_max_sites`` (default
:data:`DEFAULT_MAX_SITES`) caps them: with more sites, that many are left out, chosen
deterministically (the first by SHA-256 of the federation id and the site id, whatever the
order the sites were declared in), and the aggregates are over them; 0 turns the measure off.

A site sees only its own aggregates (:func:`site_view`), never another site's entry of ``C``:
with a single other site in an aggregate its mean would be that site's own number, so the
aggregate is withheld instead. The operator sees ``C`` whole (``result.json``'s
``contributions``). THREAT_MODEL.md says what these numbers reveal.

References: issue 29 (item 3).
"""

from __future__ import annotations

import hashlib
import logging
import time
from dataclasses import dataclass
from typing import Any

import numpy as np

from noisyanchor.common.chunks import rows_of
from noisyanchor.common.contribution_text import aggregate_text
from noisyanchor.common.downstream import fit_downstream, held_out_metrics
from noisyanchor.common.errors import InvalidInputError
from noisyanchor.common.splits import TEST

log = logging.getLogger(__name__)

#: Default of ``[model] contributions_max_sites``: the sites left out, one refit each.
DEFAULT_MAX_SITES = 20
#: A change of balanced accuracy within this is neither "worse" nor "better" (one point).
TOLERANCE = 0.01
#: The fewest other sites an aggregate a site sees may rest on (one would be that site's number).
MIN_AGGREGATED = 2

#: What an entry of ``C`` is, in words (written with every contributions view).
DEFINITION = ("contribution of j to k = balanced accuracy of the federation's model on k's test "
              "rows minus that of the same model family and hyper-parameter search refitted "
              "on the same aligned Z without j's rows")


@dataclass(frozen=True)
class LeaveOneOut:
    """The leave-one-site-out scores of :func:`leave_one_site_out`.

    Attributes
    ----------
    participants : tuple of str
        The ``p`` sites, in the order of ``Z``'s row blocks.
    left_out : tuple of int
        The ``m`` sites ``j`` refitted without, as indices into ``participants``.
    full : (p,) ndarray
        ``BA_k(h)``; NaN for a site without test rows.
    without : (m, p) ndarray
        ``BA_k(h_{-j})`` for ``j = left_out[i]``; NaN where ``k == j``, where ``k`` has no test
        rows, or where the refit was not possible (``errors``).
    errors : dict of str to str
        ``{site j: why h_{-j} could not be fitted}``.
    seconds : float
        Time of the ``m`` refits.
    """

    participants: tuple[str, ...]
    left_out: tuple[int, ...]
    full: np.ndarray
    without: np.ndarray
    errors: dict[str, str]
    seconds: float

    @property
    def matrix(self) -> np.ndarray:
        """``C[j, k] = BA_k(h) - BA_k(h_{-j})``, (m, p), NaN where either is missing."""
        return self.full[None, :] - self.without


def choose_left_out(federation_id: str, participants: list[str] | tuple[str, ...],
                    max_sites: int) -> tuple[int, ...]:
    """The sites to refit without: all of them up to ``max_sites``, else the ``max_sites``
    first by SHA-256 of ``federation_id/site`` (deterministic, independent of the declared
    order), in the declared order; none when ``max_sites`` is 0."""
    if max_sites < 0:
        raise InvalidInputError(f"contributions_max_sites must be >= 0, got {max_sites}")
    if len(participants) <= max_sites:
        return tuple(range(len(participants)))
    ranked = sorted(range(len(participants)), key=lambda i: hashlib.sha256(
        f"{federation_id}/{participants[i]}".encode()).hexdigest())
    return tuple(sorted(ranked[:max_sites]))


def leave_one_site_out(z: np.ndarray, labels: np.ndarray, tags: np.ndarray, owners: np.ndarray,
                       *, participants: list[str] | tuple[str, ...], full: np.ndarray,
                       left_out: tuple[int, ...], model: str, fit: str = "auto") -> LeaveOneOut:
    """Refit ``model`` without each site of ``left_out`` and score it on every other site.

    Parameters
    ----------
    z : (n, d) ndarray
        ``Z``, the aligned rows of every site.
    labels : (n,) ndarray
    tags : (n,) ndarray of {0: train, 1: validation, 2: test}
    owners : (n,) ndarray of int
        The site index of each row of ``Z``.
    participants : sequence of str
        The ``p`` sites.
    full : (p,) ndarray
        ``BA_k(h)`` of the federation's model (NaN for a site without test rows).
    left_out : tuple of int
        The sites ``j`` to refit without (:func:`choose_left_out`).
    model : str
        The federation's model family (:data:`common.downstream.MODELS`).
    fit : str
        How it is fitted (:data:`common.downstream.FIT_MODES`), as the federation's.
    """
    p = len(participants)
    test = tags == TEST
    without = np.full((len(left_out), p), np.nan)
    errors: dict[str, str] = {}
    start = time.perf_counter()
    for i, j in enumerate(left_out):  # one refit per site, each a full search: kept a loop
        try:  # j's rows masked out, not copied out: Z is not copied per refit
            fitted = fit_downstream(z, labels, tags, model=model, rows=owners != j, fit=fit)
        except InvalidInputError as err:
            errors[participants[j]] = str(err)
            continue
        for k in range(p):
            rows = test & (owners == k)
            if k == j or not rows.any():
                continue
            predicted = fitted.predict(rows_of(z, rows))
            without[i, k] = held_out_metrics(labels[rows], predicted)["balanced_accuracy"]
    return LeaveOneOut(tuple(participants), tuple(left_out), np.asarray(full, dtype=float),
                       without, errors, time.perf_counter() - start)


def _number(x: float) -> float | None:
    return None if np.isnan(x) else float(x)


def site_aggregates(loo: LeaveOneOut, tol: float = TOLERANCE) -> dict[str, dict[str, Any]]:
    """Every site's received and given aggregates (the module's docstring), as JSON values.

    Returns
    -------
    dict
        ``{site: {"received": {"sum", "mean", "sites"}, "given": {"sum", "mean", "sites",
        "made_worse", "made_better"} or None (not left out), "harms_others": bool}}``;
        ``sites`` counts the entries of ``C`` each aggregate rests on, ``mean`` is None
        without any.
    """
    c = loo.matrix
    given_rows = dict(zip(loo.left_out, c, strict=True))
    out: dict[str, dict[str, Any]] = {}
    for k, pid in enumerate(loo.participants):
        received = c[:, k][~np.isnan(c[:, k])]
        part: dict[str, Any] = {"received": _sums(received), "given": None,
                                "harms_others": False}
        if k in given_rows:
            given = given_rows[k][~np.isnan(given_rows[k])]
            worse = int((given < -tol).sum())
            part["given"] = _sums(given) | {"made_worse": worse,
                                            "made_better": int((given > tol).sum())}
            part["harms_others"] = worse > len(given) / 2
        out[pid] = part
    return out


def _sums(values: np.ndarray) -> dict[str, Any]:
    return {"sum": float(values.sum()), "mean": float(values.mean()) if len(values) else None,
            "sites": len(values)}


def operator_view(loo: LeaveOneOut, *, max_sites: int, tol: float = TOLERANCE
                  ) -> dict[str, Any]:
    """``result.json``'s ``contributions``: ``C`` whole, the scores behind it and every site's
    aggregates (the operator's view)."""
    names = loo.participants
    sampled = len(loo.left_out) < len(names)
    aggregates = site_aggregates(loo, tol)
    return {
        "computed": True, "definition": DEFINITION, "alignment": "the same aligned Z, the "
        "left-out site's rows dropped (no realignment)", "max_sites": max_sites,
        "sampled": sampled, "left_out": [names[j] for j in loo.left_out],
        "extra_fits": len(loo.left_out), "seconds": loo.seconds, "tolerance": tol,
        "full": {pid: _number(x) for pid, x in zip(names, loo.full, strict=True)},
        "matrix": {names[j]: {names[k]: _number(x) for k, x in enumerate(row) if k != j}
                   for j, row in zip(loo.left_out, loo.matrix, strict=True)},
        "errors": loo.errors, "sites": aggregates,
        "harms_others": [pid for pid, a in aggregates.items() if a["harms_others"]]}


def not_computed(reason: str, max_sites: int) -> dict[str, Any]:
    """``contributions`` when it was not measured, and why."""
    return {"computed": False, "reason": reason, "max_sites": max_sites}


def site_view(contributions: dict[str, Any], pid: str) -> dict[str, Any]:
    """What site ``pid`` is told: its own aggregates only, each withheld (with the reason)
    when it rests on fewer than :data:`MIN_AGGREGATED` other sites."""
    if not contributions.get("computed"):
        return {"computed": False, "reason": contributions["reason"]}
    own = contributions["sites"][pid]
    view: dict[str, Any] = {"computed": True, "definition": DEFINITION,
                            "tolerance": contributions["tolerance"],
                            "sampled": contributions["sampled"],
                            "harms_others": own["harms_others"]}
    for key in ("received", "given"):
        part = own[key]
        if part is None:
            view[key] = {"withheld": f"{pid} was not left out: the federation has more sites "
                         f"than contributions_max_sites = {contributions['max_sites']}"}
        elif part["sites"] < MIN_AGGREGATED:
            view[key] = {"withheld": f"it rests on {part['sites']} other site(s): it would be "
                         "that site's own number"}
        else:
            view[key] = part
    return view


def contributions_result(*, federation_id: str, participants: list[str], z: np.ndarray,
                         labels: np.ndarray, tags: np.ndarray, owners: np.ndarray,
                         per_site: dict[str, dict[str, Any]], model: str | None,
                         max_sites: int, fit: str = "auto") -> dict[str, Any]:
    """``result.json``'s ``contributions``: measured (:func:`operator_view`) or why not."""
    if max_sites == 0:
        return not_computed("off ([model] contributions_max_sites = 0)", max_sites)
    if model is None or not per_site:
        return not_computed("the federation has no fitted model to refit", max_sites)
    left_out = choose_left_out(federation_id, participants, max_sites)
    full = np.array([np.nan if per_site[pid]["balanced_accuracy"] is None
                     else per_site[pid]["balanced_accuracy"] for pid in participants])
    loo = leave_one_site_out(z, labels, tags, owners, participants=participants, full=full,
                             left_out=left_out, model=model, fit=fit)
    view = operator_view(loo, max_sites=max_sites)
    log.info("contributions: %d extra %s fits in %.1f s%s", len(left_out), model, loo.seconds,
             " (sampled)" if view["sampled"] else "")
    for pid in view["harms_others"]:  # the operator's cue to look at that site's upload
        given = view["sites"][pid]["given"]
        log.warning("contributions: the other sites are better without %s's rows (%d of %d "
                    "worse by more than %.2f balanced accuracy, %+.3f on average)", pid,
                    given["made_worse"], given["sites"], view["tolerance"], given["mean"])
    return view


def operator_lines(contributions: dict[str, Any] | None) -> list[str]:
    """``analyst status``'s lines: how it was measured, then each site's aggregates."""
    if not contributions:
        return []
    if not contributions.get("computed"):
        return [f"  contributions: not measured: {contributions.get('reason')}"]
    sampled = (f", sampled: {len(contributions['left_out'])} of "
               f"{len(contributions['sites'])} sites left out" if contributions["sampled"]
               else "")
    lines = [f"  contributions (leave-one-site-out, {contributions['extra_fits']} extra fits in "
             f"{contributions['seconds']:.1f} s{sampled}; C[j, k] = balanced accuracy on k "
             "with j minus without j):"]
    for pid, part in contributions["sites"].items():
        lines.append(f"    {pid}: {aggregate_text(part)}")
    for pid, why in contributions["errors"].items():
        lines.append(f"    {pid}: not refitted without it: {why}")
    return lines

"""One site in another scale or unit, screened before alignment under each policy.

:func:`poisoned_run` is what ``benchmarks/bench_site_gain.py`` calls per template, number of
sites and seed: the sites' uploads are those of the in-process simulator
(:func:`experiments.simulate.prepare` and :func:`~experiments.simulate.participant_upload`,
the participant's own computation), one site's column is multiplied by ``factor`` (a column
x10,000, a unit slip x0.001) in its table's own units, and the analyst's federation state
machine (:class:`analyst.federation.Federation`, the one ``analyst serve`` runs, on a store
in a temporary folder) screens and aligns them under ``refuse``, ``exclude`` and ``accept``.
It reports whether the poisoned site was named before alignment under each policy, that
nothing was aligned under ``refuse``, and under ``exclude`` the other sites' balanced accuracy
against the same federation run without that site (same seeds; the difference must be below
1e-9), with the accuracy they get when the site is accepted and when it is honest.

    python -m benchmarks.poisoned_sites --dataset breast-cancer --sites 3 --seed 0
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

#: The analyst's policies, in the order they are run.
POLICIES = ("refuse", "exclude", "accept")


def _config(root: Path, name: str, sites: tuple[str, ...], fed, schema, policy: str):
    from noisyanchor.analyst.config import AnalystConfig
    from noisyanchor.common.tomlconfig import TlsFiles

    cfg = fed.config
    tls = TlsFiles(root / "ca.pem", root / "a.pem", root / "a.key")  # never opened here
    return AnalystConfig(
        federation_id="poisoned", participants=sites, method=cfg.method, anchors=fed.r,
        dim=cfg.dim, projection_seed=fed.projection_seed if cfg.dim else None,
        sigma=cfg.sigma, v=cfg.v, reference=sites[0], max_iter=cfg.max_iter, tol=cfg.tol,
        output_dir=root / name, tls=tls, schema=schema, screening=policy)


def _federate(root: Path, name: str, sites: tuple[str, ...], uploads: dict[str, dict],
              fed, schema, policy: str) -> dict[str, Any]:
    """Commit ``uploads`` of ``sites`` to a fresh analyst store and let it screen and align:
    its status, and ``result.json`` when done."""
    from noisyanchor.analyst.federation import Federation
    from noisyanchor.analyst.storage import Store
    from noisyanchor.common.wire import BundleStream, bundle_spec, iter_chunks

    analyst = Federation(_config(root, name, sites, fed, schema, policy), Store(root / name))
    digest = schema.preprocessing_sha256 if schema is not None else b""
    for pid in sites:
        spec = bundle_spec("poisoned", fed.config.method, uploads[pid], digests=True,
                           preprocessing_sha256=digest)
        analyst.upload(pid, BundleStream(spec, iter_chunks(uploads[pid], chunk_size=1 << 20),
                                         None))
    analyst.wait(600)
    status = analyst.status(sites[0])  # progress as a site sees it; the result whole below
    done = status["state"] == "done"
    result = json.loads(analyst.store.read_result("result.json")) if done else None
    analyst.close()
    return {"state": status["state"], "withdrawn": {w.participant_id: w.reason
                                                   for w in status["withdrawn"]},
            "result": result}


def _accuracy(outcome: dict[str, Any], sites) -> dict[str, float | None]:
    """Each site's balanced accuracy on its own test rows, from ``result.json``."""
    model = (outcome["result"] or {}).get("model") or {}
    return {pid: (model.get("sites") or {}).get(pid, {}).get("balanced_accuracy")
            for pid in sites}


def _poison(fed, site: int, column: int | None, factor: float, dataset: str):
    """``fed`` with site ``site``'s ``column`` (default: the column of upper-quartile
    variance) multiplied by ``factor`` in its table's own units (a typed table's column is
    decoded, scaled and encoded again with the template's public parameters)."""
    from noisyanchor.common.tabular.columns import NumericColumn
    from noisyanchor.experiments.datasets import TABLE_TEMPLATES, table_schema

    pooled = np.vstack(fed.x)
    if column is None:
        column = int(np.argsort(pooled.var(axis=0), kind="stable")[3 * pooled.shape[1] // 4])
    a, b = 0.0, 1.0
    if dataset in TABLE_TEMPLATES:
        encoded = [c for c in table_schema(dataset).columns for _ in range(c.width)]
        if isinstance(encoded[column], NumericColumn):
            a, b = encoded[column].offset_factor
    xs = [x.copy() for x in fed.x]
    xs[site][:, column] = ((xs[site][:, column] * b + a) * factor - a) / b
    return dataclasses.replace(fed, x=xs), column


def poisoned_run(dataset: str = "digits", participants: int = 3, seed: int = 0, *,
                 factor: float = 1e4, site: int = 1, column: int | None = None,
                 method: str = "aa-igdp-an", v: float | None = None,
                 workdir: Path | None = None) -> dict[str, Any]:
    """One federation with site ``site``'s column multiplied by ``factor``, under each policy.

    Returns
    -------
    dict
        ``named_before_alignment`` (policy -> bool), ``findings`` (the screening's, as
        ``result.json`` records them), ``refuse_aligned_nothing``, ``exclude_max_difference``
        (largest |difference| of an other site's balanced accuracy against the federation
        without the poisoned site; below 1e-9; None when the site was not named, so not
        excluded), and the others' balanced accuracy
        ``without``, ``excluded``, ``accepted`` and ``honest`` (every site honest).
    """
    from noisyanchor.common.schema import RecordSchema
    from noisyanchor.experiments.datasets import TABLE_TEMPLATES, table_schema
    from noisyanchor.experiments.simulate import SimulationConfig, participant_upload, prepare

    honest = prepare(SimulationConfig(dataset=dataset, method=method, participants=participants,
                                      v=v, colluder=None, seed=seed, utility=False))
    poisoned, column = _poison(honest, site, column, factor, dataset)
    schema = (RecordSchema.typed(table_schema(dataset)) if dataset in TABLE_TEMPLATES
              else None)
    sites = tuple(f"org-{i}" for i in range(participants))
    bad = sites[site]
    others = tuple(pid for pid in sites if pid != bad)

    def uploads(fed) -> dict[str, dict]:
        out = {}
        for i, pid in enumerate(sites):
            up, _ = participant_upload(fed, i)
            arrays = {"data": up.data} | ({} if up.anchor is None else {"anchor": up.anchor})
            out[pid] = arrays | {"labels": fed.labels[i].astype("<i8"),
                                 "tags": fed.tags[i].astype("|i1")}
        return out

    sent, clean = uploads(poisoned), uploads(honest)
    with tempfile.TemporaryDirectory(dir=workdir) as tmp:
        root = Path(tmp)
        runs = {policy: _federate(root, policy, sites, sent, poisoned, schema, policy)
                for policy in POLICIES}
        without = _federate(root, "without", others, sent, poisoned, schema, "accept")
        all_honest = _federate(root, "honest", sites, clean, honest, schema, "accept")
    refused = runs["refuse"]
    screening = json.loads(json.dumps(
        (runs["exclude"]["result"] or runs["accept"]["result"])["screening"]))
    named = {"refuse": bad in refused["withdrawn"] and refused["state"] == "collecting",
             **{p: bad in (runs[p]["result"] or {}).get("screening", {}).get("flagged", ())
                for p in ("exclude", "accept")}}
    ref, excl = _accuracy(without, others), _accuracy(runs["exclude"], others)
    excluded = bad in runs["exclude"]["result"]["screening"]["excluded"]
    diffs = [abs(excl[p] - ref[p]) for p in others if excluded and None not in (excl[p], ref[p])]
    return {
        "dataset": dataset, "participants": participants, "seed": seed, "factor": factor,
        "poisoned_site": bad, "column": column, "method": method,
        "named_before_alignment": named, "findings": screening["findings"],
        "refuse_aligned_nothing": refused["result"] is None and refused["state"] != "done",
        "refuse_told": refused["withdrawn"].get(bad, ""),
        "exclude_max_difference": max(diffs) if diffs else None,
        "others_balanced_accuracy": {"without": ref, "excluded": excl,
                                     "accepted": _accuracy(runs["accept"], others),
                                     "honest": _accuracy(all_honest, others)},
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dataset", default="digits")
    parser.add_argument("--sites", type=int, default=3)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--factor", type=float, nargs="+", default=[1e4, 1e-3])
    args = parser.parse_args(argv)
    for factor in args.factor:
        print(json.dumps(poisoned_run(args.dataset, args.sites, args.seed, factor=factor),
                         indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""The downstream model's hyper-parameter search (``C`` over :data:`common.downstream.C_GRID`,
logistic regression, chosen on validation balanced accuracy) against two cheaper searches,
measured before either may replace it (issue 31, item 2):

* **warm-started**: the grid fitted in increasing ``C``, each fit starting from the previous
  one's coefficients (``warm_start``), the chosen one kept;
* **subsample**: the grid fitted on a stratified fraction of the training rows, then the chosen
  ``C`` fitted once on all of them.

On the bundled digits and breast-cancer tables, ``--seeds`` stratified splits each (20% test,
20% validation), preprocessed as the analyst does (``u = (z - mu) / s``): per search, how often
its choice equals the full search's, its seconds against the full search's, and the test
balanced accuracy of what it returns. One BLAS thread.

Run: ``python -m benchmarks.bench_search`` (writes benchmarks/results/search.json).
"""

from __future__ import annotations

import argparse
import json
import os
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

RESULTS = Path(__file__).resolve().parent.parent / "benchmarks" / "results"
#: Subsample fractions of the training rows tried.
FRACTIONS = (0.25, 0.5)


def _tables() -> dict[str, tuple[np.ndarray, np.ndarray]]:
    from sklearn.datasets import load_breast_cancer, load_digits

    return {"digits": load_digits(return_X_y=True),
            "breast-cancer": load_breast_cancer(return_X_y=True)}


def _full(x_tr, y_tr, x_va, y_va, grid, score) -> tuple[float, object]:
    from noisyanchor.common.downstream import MODELS, _select

    c, _, fitted, _, _ = _select(x_tr, y_tr, x_va, y_va, grid, MODELS["logistic"], score)
    return c, fitted


def _warm(x_tr, y_tr, x_va, y_va, grid, score) -> tuple[float, object]:
    """The grid in increasing ``C``, each fit from the previous one's coefficients."""
    from sklearn.base import clone

    from noisyanchor.common.downstream import MODELS, fit_model

    best: tuple[float, float, object] | None = None
    previous = None
    for c in sorted(grid):
        def model(c_: float, previous=previous) -> object:
            est = MODELS["logistic"](c_).set_params(warm_start=True)
            if previous is not None:  # the coefficients warm_start starts from
                est.coef_, est.intercept_ = previous.coef_.copy(), previous.intercept_.copy()
            return est
        fitted, _ = fit_model(model, c, x_tr, y_tr)
        s = score(y_va, fitted.predict(x_va))
        if best is None or s > best[1]:
            best = (c, s, fitted)
        previous = clone(fitted)
        previous.coef_, previous.intercept_ = fitted.coef_, fitted.intercept_
    assert best is not None
    return best[0], best[2]


def _subsample(fraction: float) -> Callable:
    def search(x_tr, y_tr, x_va, y_va, grid, score) -> tuple[float, object]:
        from noisyanchor.common.downstream import MODELS, fit_model
        from noisyanchor.common.splits import split_tags

        # A stratified subsample: the rows split_tags would call "test" at this fraction.
        keep = split_tags(y_tr, np.random.default_rng(0), test_fraction=fraction) == 2
        c, _ = _full(x_tr[keep], y_tr[keep], x_va, y_va, grid, score)
        return c, fit_model(MODELS["logistic"], c, x_tr, y_tr)[0]
    return search


def measure(seeds: int) -> dict:
    from noisyanchor.common.downstream import C_GRID, _balanced_accuracy, standardisation
    from noisyanchor.common.splits import TEST, TRAIN, VALIDATION, split_tags

    score = _balanced_accuracy()
    searches = {"full": _full, "warm_start": _warm,
                **{f"subsample_{f}": _subsample(f) for f in FRACTIONS}}
    out: dict = {}
    for name, (x, y) in _tables().items():
        rows: dict[str, dict[str, list]] = {s: {"c": [], "seconds": [], "test": []}
                                            for s in searches}
        for seed in range(seeds):
            tags = split_tags(y, np.random.default_rng(seed), test_fraction=0.2,
                              validation_fraction=0.2)
            mean, scale = standardisation(x, tags == TRAIN)
            u = (x - mean) / scale
            tr, va, te = (tags == TRAIN), (tags == VALIDATION), (tags == TEST)
            for label, search in searches.items():
                start = time.perf_counter()
                c, fitted = search(u[tr], y[tr], u[va], y[va], C_GRID, score)
                rows[label]["seconds"].append(time.perf_counter() - start)
                rows[label]["c"].append(c)
                rows[label]["test"].append(score(y[te], fitted.predict(u[te])))
        full = rows["full"]
        out[name] = {label: {
            "same_choice_as_full": int(sum(a == b for a, b in zip(r["c"], full["c"],
                                                                   strict=True))),
            "of": seeds, "chosen_c": r["c"],
            "seconds_total": float(sum(r["seconds"])),
            "seconds_ratio_to_full": float(sum(r["seconds"]) / sum(full["seconds"])),
            "test_balanced_accuracy_mean": float(np.mean(r["test"])),
            "largest_test_difference_to_full": float(np.max(np.abs(
                np.subtract(r["test"], full["test"]))))} for label, r in rows.items()}
    return out


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, default=10)
    ap.add_argument("--out", type=Path, default=RESULTS / "search.json")
    args = ap.parse_args(argv)
    from noisyanchor.common.blas import configure_blas
    from noisyanchor.common.downstream import C_GRID

    configure_blas(1)
    started = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    tables = measure(args.seeds)
    report = {"what": "the C search (logistic, validation balanced accuracy) against a "
              "warm-started one and one on a subsample of the training rows", "date": started,
              "grid": list(C_GRID),
              "blas_threads": 1, "load_average_end": os.getloadavg(), "tables": tables}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=1) + "\n")
    for name, table in tables.items():
        for label, r in table.items():
            print(f"{name} {label}: same choice {r['same_choice_as_full']}/{r['of']}, "
                  f"{r['seconds_ratio_to_full']:.2f}x the time, test "
                  f"{r['test_balanced_accuracy_mean']:.4f}")


if __name__ == "__main__":
    main()

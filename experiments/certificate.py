"""``noisyanchor experiment certificate``: how often the GOPP certificate of global optimality
holds, as a function of ``v / v_PT``, at the paper's sizes.

Each run draws a centred orthonormal anchor, ``p`` Haar keys and Gaussian anchor noise at
``v = ratio * v_PT(p, d, r)``, solves the centered GOPP as the analyst does (spectral start, GPM
capped at ``max_iter``; the paper's stopping rule ``||R^(t+1) - R^(t)||_F <= tol``, as in the
sweeps) and records whether it converged,
whether it is certified (``lambda_min(Lambda - G) >= -tol``), the certificate's eigenvalue, and
the objective ``tr(R^T G R) = ||sum_i Bc_i R_i||_F^2`` beside the objective at the true
rotations ``R_i = O_i^T`` (a converged run scoring at least the truth is not shown wrong by it).

The certificate is a sufficient condition: "not certified" means "not proven global", and the
figure shows where it stops being available, below ``v_PT`` included.

Rows are appended to ``runs.jsonl`` as they finish (a killed study resumes; a later call with
other sizes or ratios adds to the same study); ``summary.json`` and ``fig_certificate.png``
cover every run in the folder and are written at the end.

References: SPEC.md section 2 (certificate, v_PT).
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import time
from pathlib import Path
from typing import Any

import numpy as np

from noisyanchor.common.errors import InvalidInputError
from noisyanchor.common.gdp import make_anchor, sample_key
from noisyanchor.common.gopp import solve_gopp
from noisyanchor.common.linalg import center_rows
from noisyanchor.common.theory import phase_transition_v

#: The paper's sizes (p, d, r): MNIST, and the CelebA participant study's smallest p.
PAPER_SIZES = ((10, 100, 400), (2, 400, 1600))
DEFAULT_RATIOS = (0.2, 0.4, 0.6, 0.7, 0.8, 0.9, 1.0, 1.1, 1.25, 1.5)
RUNS_FILE = "runs.jsonl"


def run_point(p: int, d: int, r: int, ratio: float, rep: int, *, seed: int, max_iter: int,
              tol: float, stopping: str = "absolute") -> dict[str, Any]:
    """One GOPP solve at ``v = ratio * v_PT`` and its diagnostics (``stopping``: the paper's
    absolute step rule by default)."""
    rng = np.random.default_rng(np.random.SeedSequence(
        seed, spawn_key=(p, d, r, round(ratio * 1000), rep)))
    v_pt = phase_transition_v(p, d, r)
    v = ratio * v_pt
    anchor = make_anchor(r, d, rng)
    keys = [sample_key(d, rng) for _ in range(p)]
    uploads = [anchor @ k.rotation + k.translation + v * rng.standard_normal((r, d))
               for k in keys]
    # the study plots lambda_min itself: the full certificate, not the early exit's bound
    res = solve_gopp(uploads, max_iter=max_iter, tol=tol, stopping=stopping, method="gpm",
                     certificate_early_exit=False)
    _, bc = center_rows(np.stack(uploads))
    truth = float(np.sum(np.einsum("prd,pde->re", bc,
                                   np.stack([k.rotation.T for k in keys])) ** 2))
    return {"p": p, "d": d, "r": r, "ratio": ratio, "rep": rep, "v": v, "v_pt": v_pt,
            "converged": res.converged, "certified": res.certified,
            "certificate_min_eig": res.certificate_min_eig, "iterations": res.iterations,
            "objective": res.objective, "truth_objective": truth, "seconds": res.seconds}


def _key(row: dict[str, Any]) -> tuple:
    return row["p"], row["d"], row["r"], round(row["ratio"], 6), row["rep"]


def _summary(rows: list[dict[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for size in sorted({(r["p"], r["d"], r["r"]) for r in rows}):
        per = {}
        for ratio in sorted({r["ratio"] for r in rows if (r["p"], r["d"], r["r"]) == size}):
            sel = [r for r in rows if (r["p"], r["d"], r["r"]) == size and r["ratio"] == ratio]
            conv = [r for r in sel if r["converged"]]
            per[f"{ratio:g}"] = {
                "runs": len(sel), "converged": len(conv),
                "certified": sum(r["certified"] for r in sel),
                "converged_not_certified": sum(not r["certified"] for r in conv),
                "converged_at_least_truth": sum(r["objective"] >= r["truth_objective"] * (1 - 1e-12)
                                                for r in conv),
                "median_min_eig": float(np.median([r["certificate_min_eig"] for r in sel])),
                "median_seconds": float(np.median([r["seconds"] for r in sel]))}
        p, d, r = size
        out[f"p={p},d={d},r={r}"] = {"v_pt": phase_transition_v(p, d, r), "ratios": per}
    return out


def run_study(out: Path, *, sizes=PAPER_SIZES, ratios=DEFAULT_RATIOS, reps: int = 6,
              seed: int = 2026, max_iter: int = 500, tol: float = 1e-7,
              progress: bool = True, command: str = "") -> dict[str, Any]:
    """Run (or resume) every ``(size, ratio, rep)`` into ``out/runs.jsonl``; write the summary
    and the figure."""
    out.mkdir(parents=True, exist_ok=True)
    path = out / RUNS_FILE
    rows = []
    if path.exists():
        for line in path.read_text().splitlines():
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError:
                continue  # a torn last line of a killed run
    done = {_key(r) for r in rows}
    todo = [(p, d, r, ratio, rep) for (p, d, r) in sizes for ratio in ratios
            for rep in range(reps) if (p, d, r, round(ratio, 6), rep) not in done]
    from tqdm import tqdm

    start, load = time.perf_counter(), os.getloadavg()
    with open(path, "a") as fh:
        for p, d, r, ratio, rep in tqdm(todo, disable=not progress, desc="certificate"):
            row = run_point(p, d, r, ratio, rep, seed=seed, max_iter=max_iter, tol=tol)
            fh.write(json.dumps(row) + "\n")
            fh.flush()
            rows.append(row)
    if not rows:
        raise InvalidInputError("no certificate runs to summarise")
    call = {"command": command, "ran": len(todo), "seconds": time.perf_counter() - start,
            "load_average_start": load, "load_average_end": os.getloadavg(),
            "cpu_count": os.cpu_count(),
            "finished_utc": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")}
    previous = out / "summary.json"
    calls = json.loads(previous.read_text())["calls"] if previous.exists() else []
    summary = {"seed": seed, "max_iter": max_iter, "tol": tol, "calls": [*calls, call],
               "ran": len(todo), "sizes": _summary(rows)}
    (out / "summary.json").write_text(json.dumps(summary, indent=1))
    _figure(rows, out / "fig_certificate.png")
    return summary


def _figure(rows: list[dict[str, Any]], path: Path) -> None:
    from noisyanchor.experiments.figures import pyplot, save_figure

    plt = pyplot()
    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    for k, size in enumerate(sorted({(r["p"], r["d"], r["r"]) for r in rows})):
        sel = [r for r in rows if (r["p"], r["d"], r["r"]) == size]
        ratios = sorted({r["ratio"] for r in sel})
        frac = {key: [np.mean([r[key] for r in sel if r["ratio"] == x]) for x in ratios]
                for key in ("certified", "converged")}
        label = "p={}, d={}, r={}".format(*size)
        axes[0].plot(ratios, frac["certified"], "o-", color=f"C{k}", label=f"certified, {label}")
        axes[0].plot(ratios, frac["converged"], "s--", color=f"C{k}", alpha=0.6,
                     label=f"converged, {label}")
        axes[1].scatter([r["ratio"] for r in sel],
                        [r["certificate_min_eig"] for r in sel], s=10, color=f"C{k}",
                        label=label)
    axes[0].set_ylabel("fraction of runs")
    axes[1].set_yscale("symlog", linthresh=1e-6)
    axes[1].set_ylabel("lambda_min(Lambda - G)")
    for ax in axes:
        ax.axvline(1.0, color="k", ls=":", label="v = v_PT")
        ax.set_xlabel("v / v_PT")
        ax.legend(fontsize=7)
    save_figure(plt, fig, path)


def _size(text: str) -> tuple[int, int, int]:
    try:
        p, d, r = (int(x) for x in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"size {text!r}: expected p,d,r") from None
    return p, d, r


def register(sub: argparse._SubParsersAction) -> None:
    """Add ``experiment certificate``."""
    from noisyanchor.common.cliargs import int_at_least

    ps = sub.add_parser("certificate", help="certified fraction of GOPP solves vs v / v_PT "
                        "(resumable): summary.json and fig_certificate.png")
    ps.add_argument("--out", required=True, help="output folder")
    ps.add_argument("--size", type=_size, action="append", default=None, metavar="P,D,R",
                    help="problem size (repeatable; default: 10,100,400 and 2,400,1600)")
    ps.add_argument("--ratios", default=",".join(f"{x:g}" for x in DEFAULT_RATIOS),
                    help="v / v_PT values, comma-separated")
    ps.add_argument("--reps", type=int_at_least(1), default=6, help="runs per size and ratio")
    ps.add_argument("--max-iter", type=int_at_least(1), default=500, help="GPM cap T_max")
    ps.add_argument("--seed", type=int_at_least(0), default=2026, help="root seed")
    ps.add_argument("--no-progress", action="store_true", help="hide the progress bar")
    ps.add_argument("--json", action="store_true", help="print the summary as JSON")
    ps.set_defaults(handler=_run)


def _run(args: argparse.Namespace) -> int:
    ratios = tuple(float(x) for x in args.ratios.split(",") if x.strip())
    sizes = tuple(args.size) if args.size else PAPER_SIZES
    res = run_study(Path(args.out), sizes=sizes, ratios=ratios, reps=args.reps,
                    seed=args.seed, max_iter=args.max_iter, progress=not args.no_progress,
                    command="noisyanchor experiment certificate " + " ".join(
                        [f"--out {args.out}", *(f"--size {p},{d},{r}" for p, d, r in sizes),
                         f"--ratios {args.ratios}", f"--reps {args.reps}"]))
    if args.json:
        print(json.dumps(res, indent=2))
        return 0
    for size, block in res["sizes"].items():
        cells = ", ".join(f"{x}: {q['certified']}/{q['runs']}" for x, q in block["ratios"].items())
        print(f"{size} (v_PT {block['v_pt']:.4g}) certified per v/v_PT: {cells}")
    return 0

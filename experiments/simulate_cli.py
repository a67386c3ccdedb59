"""``noisyanchor simulate``: the whole protocol in one process, summary as text or JSON."""

from __future__ import annotations

import argparse
import json

from noisyanchor.common.cliargs import int_at_least, nonnegative_float, positive_float
from noisyanchor.common.gopp import METHODS, PRECISIONS, STOPPING_RULES
from noisyanchor.common.methods import DEFAULT_ANCHOR_NOISE, Method
from noisyanchor.experiments.datasets import DATASETS


def register(sub: argparse._SubParsersAction) -> None:
    """Add the ``simulate`` subcommand."""
    from noisyanchor.experiments.cli import COMMANDS

    ps = sub.add_parser("simulate", help=COMMANDS["simulate"])
    ps.add_argument("--dataset", choices=DATASETS, default="digits",
                    help="bundled data set the participants' records come from (split among "
                         "them, stratified)")
    ps.add_argument("--method", choices=[m.value for m in Method], default="aa-igdp-an",
                    help="GDP method of every participant (the paper's Table 1)")
    ps.add_argument("--participants", type=int_at_least(2), default=10, help="p")
    ps.add_argument("--anchors", type=int_at_least(2), default=None,
                    help="anchor rows r (default 4 d)")
    ps.add_argument("--dim", type=int_at_least(1), default=None,
                    help="width h of a public Gaussian projection F (default: no projection)")
    ps.add_argument("--sigma", type=nonnegative_float, default=0.0, help="private-data noise level")
    ps.add_argument("--v", type=nonnegative_float, default=None,
                    help=f"anchor noise level (default {DEFAULT_ANCHOR_NOISE} for aa-igdp-an, "
                         "the only method with anchor noise; 0 for the others)")
    ps.add_argument("--colluder", type=int_at_least(-1), default=0,
                    help="index of the colluding participant (-1: none)")
    ps.add_argument("--colluders", type=int_at_least(1), default=1, metavar="K",
                    help="K colluders, --colluder and the next K - 1 indices, disclosing "
                         "jointly (default 1)")
    ps.add_argument("--seed", type=int_at_least(0), default=None,
                    help="root seed for a reproducible run (default: OS entropy)")
    ps.add_argument("--max-iter", type=int_at_least(0), default=500, help="GPM iteration cap T_max")
    ps.add_argument("--tol", type=positive_float, default=1e-7,
                    help="GPM step tolerance eps (relative to ||R||_F; absolute with "
                         "--stopping absolute)")
    ps.add_argument("--stopping", choices=STOPPING_RULES, default="objective",
                    help="GPM stopping rule: the objective known, or the relative step rule "
                         "(objective); the step rule relative to ||R||_F (relative); the "
                         "paper's ||R' - R||_F <= eps (absolute)")
    ps.add_argument("--precision", choices=PRECISIONS, default="auto",
                    help="GOPP products: float64 throughout (double), float32 increments once "
                         "steps are small (mixed), or mixed for large problems (auto)")
    ps.add_argument("--gopp-method", choices=METHODS, default="auto",
                    help="GOPP method: the GPM, extrapolated once it contracts slowly (auto); "
                         "the paper's GPM throughout (gpm)")
    ps.add_argument("--blas-threads", type=int_at_least(0), default=0,
                    help="BLAS threads of every operation (0: one, more only for large problems "
                         "when CPUs are idle)")
    ps.add_argument("--no-utility", action="store_true", help="skip the downstream classifier")
    ps.add_argument("--json", action="store_true", help="print the summary as JSON")
    ps.set_defaults(handler=_run)


def _run(args: argparse.Namespace) -> int:
    from noisyanchor.common.blas import configure_blas
    from noisyanchor.experiments.simulate import SimulationConfig, simulate

    configure_blas(args.blas_threads)  # logs the choice (-v)
    config = SimulationConfig(
        dataset=args.dataset, method=args.method, participants=args.participants,
        anchors=args.anchors, dim=args.dim, sigma=args.sigma, v=args.v,
        colluder=None if args.colluder < 0 else args.colluder, colluders=args.colluders,
        seed=args.seed,
        max_iter=args.max_iter, tol=args.tol, precision=args.precision, stopping=args.stopping,
        gopp_method=args.gopp_method, utility=not args.no_utility)
    summary = simulate(config).summary()
    if args.json:
        print(json.dumps(summary, indent=2))
        return 0
    solver = summary["solver"]
    v_pt = "n/a" if summary["v_pt"] is None else f"{summary['v_pt']:.4g}"
    print(f"method {summary['method']} on {summary['dataset']}: p={summary['participants']}, "
          f"d={summary['dim']}, r={summary['anchors']}, sigma={summary['sigma']}, "
          f"v={summary['v']} (v_PT={v_pt})")
    print(f"alignment: {solver.get('name')}, iterations {solver['iterations']}, converged "
          f"{solver['converged']}, certified {solver['certified']}, rotational error "
          f"{solver['rotational_error']:.3g}, {solver['seconds']:.2f} s")
    for name, res in summary["attacks"].items():
        print(f"attack {name}: relative reconstruction error {res['relative_error']:.4g}")
    for name, why in summary["attacks_skipped"].items():
        print(f"attack {name}: skipped ({why})")
    if summary["utility"]:
        print(f"utility: balanced accuracy {summary['utility']['balanced_accuracy']:.4f}")
    return 0

"""Subcommands of the analyst role: ``analyst serve|health|status|deadline`` and ``attack``."""

from __future__ import annotations

import argparse
import json
import logging
from pathlib import Path

from noisyanchor.common.errors import NoisyAnchorError

#: Top-level commands of this role and their one-line help (see :mod:`noisyanchor.cli`).
COMMANDS = {"analyst": "the analyst: collect uploads, align, relay",
            "attack": "run the attacks from an analyst store (a colluder's, or the analyst's "
                      "alone)"}


def register(sub: argparse._SubParsersAction) -> None:
    """Add this role's subcommands to the top-level parser."""
    from noisyanchor.analyst.status_address import DEFAULT_ADDRESS
    from noisyanchor.common.cliargs import int_at_least, nonnegative_float, seconds

    group = sub.add_parser("analyst", help=COMMANDS["analyst"])
    inner = group.add_subparsers(dest="analyst_command", required=True, metavar="ACTION")
    serve = inner.add_parser("serve", help="serve the federation over mutual TLS until "
                             "SIGTERM/SIGINT")
    serve.add_argument("--config", type=Path, required=True, help="analyst TOML file")
    serve.add_argument("--port", type=int_at_least(0), default=None, help="override [server] port")
    serve.add_argument("--port-file", type=Path, default=None,
                       help="override [server] port_file (the bound port is written there)")
    serve.add_argument("--output-dir", type=Path, default=None,
                       help="override [server] output_dir")
    serve.add_argument("--blas-threads", type=int_at_least(0), default=None,
                       help="override [server] blas_threads: BLAS threads of every operation "
                       "(0: one, more only for large problems when CPUs are idle)")
    serve.add_argument("--log-json", type=Path, default=None, metavar="FILE",
                       help="also append the log to FILE as JSON lines (override [server] "
                       "log_json)")
    serve.set_defaults(handler=_serve)

    check = inner.add_parser("health", help="ask an analyst's health service whether it is "
                             "SERVING (exit 0) or not (exit 1)")
    check.add_argument("--port", type=int_at_least(1), required=True,
                       help="the analyst's [server] health_port (plaintext, on 127.0.0.1)")
    check.add_argument("--service", default="",
                       help="service name (default: the server as a whole)")
    check.add_argument("--timeout", type=seconds, default=5.0, help="seconds to wait")
    check.set_defaults(handler=_health)

    status = inner.add_parser("status", help="the federation's progress from the analyst's "
                              "store: who is missing for which step, the model once done "
                              "(the analyst running or not)")
    status.add_argument("--config", type=Path, required=True, help="analyst TOML file")
    status.add_argument("--wait", action="store_true",
                        help="first wait until the federation is done (exit 0), failed or a "
                        "site withdrew (exit 1), saying whom it waits for; at most until the "
                        "deadline, then for the alignment")
    status.add_argument("--timeout", type=seconds, default=None, metavar="SECONDS",
                        help="with --wait: wait at most this long (exit 1 if not done)")
    status.add_argument("--json", action="store_true", help="print the progress as JSON")
    status.add_argument("--serve", nargs="?", const=DEFAULT_ADDRESS, default=None,
                        metavar="ADDRESS",
                        help="serve it read-only as a web page refreshed every few seconds "
                        "(and /status.json) until SIGINT/SIGTERM, on host:port (default "
                        f"{DEFAULT_ADDRESS}; an address other than loopback lets whoever "
                        "reaches it read every site's results)")
    status.set_defaults(handler=_status)

    deadline = inner.add_parser("deadline", help="show the federation's deadline, or move it "
                                "later in the analyst's config (refused once it is done)")
    deadline.add_argument("--config", type=Path, required=True, help="analyst TOML file")
    deadline.add_argument("--extend", default=None, metavar="WHEN",
                          help="the new deadline: 'in 3 days', 'in 36 hours' (from now) or a "
                          "date-time with an offset, 2027-01-31T18:00:00Z")
    deadline.add_argument("--json", action="store_true", help="print the outcome as JSON")
    deadline.set_defaults(handler=_deadline)

    attack = sub.add_parser("attack", help=COMMANDS["attack"])
    attack.add_argument("--store", type=Path, required=True, help="the analyst's output_dir")
    attack.add_argument("--out", type=Path, default=None,
                        help="where to write reconstructions (default: STORE/attack)")
    attack.add_argument("--colluder", action="append", default=None, metavar="ID",
                        help="participant whose disclosure to use (default: the only one); "
                             "repeatable: several colluders' disclosures used jointly, 'all' "
                             "for every one in the store")
    attack.add_argument("--v", type=nonnegative_float, default=None,
                        help="anchor-noise level v for the corrected attacks (default: from the "
                             "colluder's disclosed anchor noise, else estimated from the anchor "
                             "residuals)")
    attack.add_argument("--alone", action="store_true",
                        help="the analyst without a colluder: only the attacks that need no "
                             "disclosure, from --known and --public")
    attack.add_argument("--public", type=Path, default=None, metavar="FILE.npy",
                        help="a public sample of the population (working space, one record "
                             "per row) for the known-sample attacks")
    attack.add_argument("--known", action="append", default=[], metavar="ID=FILE.npy",
                        help="records of participant ID the attacker knows (working space, "
                             "any order) for the known-input attacks; repeatable")
    attack.add_argument("--json", action="store_true", help="print the summary as JSON")
    attack.set_defaults(handler=_attack)


def _serve(args: argparse.Namespace) -> int:
    from noisyanchor.common.logs import configure_logging, quiet_grpc_core

    quiet_grpc_core()  # before grpc is first imported (by the server module)
    from noisyanchor.analyst.config import load_analyst_config
    from noisyanchor.analyst.server import serve
    from noisyanchor.common.blas import configure_blas

    config = load_analyst_config(args.config).with_overrides(
        port=args.port, port_file=args.port_file, output_dir=args.output_dir,
        log_json=args.log_json, blas_threads=args.blas_threads)
    configure_logging(config.log_json)
    # logs the choice; scipy's own BLAS is loaded once listening (analyst.server)
    configure_blas(config.blas_threads, load_scipy=False)
    try:
        serve(config)
    except NoisyAnchorError as err:  # one line, in the analyst's log (console and JSON) too
        logging.getLogger("noisyanchor.analyst.server").error("not serving: %s", err)
        return 1
    return 0


def _health(args: argparse.Namespace) -> int:
    from noisyanchor.common.logs import quiet_grpc_core

    quiet_grpc_core()
    from noisyanchor.analyst.health import check_health

    status = check_health(f"127.0.0.1:{args.port}", args.service, args.timeout)
    print(status)
    return 0 if status == "SERVING" else 1


def _status(args: argparse.Namespace) -> int:
    from noisyanchor.analyst.config import load_analyst_config
    from noisyanchor.analyst.kit import store_progress
    from noisyanchor.analyst.status_report import operator_status, status_lines
    from noisyanchor.common.errors import InvalidInputError

    if args.timeout is not None and not args.wait:
        raise InvalidInputError("--timeout is a bound of --wait: give both")
    if args.serve is not None and (args.wait or args.json):
        raise InvalidInputError("--serve shows the status until it is stopped: not with "
                                "--wait or --json")
    config = load_analyst_config(args.config)
    if args.serve is not None:
        from noisyanchor.analyst.status_page import serve_status_page

        return serve_status_page(config, args.serve)
    if args.wait:
        from noisyanchor.analyst.kit import wait_for_outcome
        from noisyanchor.common.logs import configure_logging

        configure_logging()  # whom it waits for, at INFO
        progress = wait_for_outcome(config, args.timeout)
    else:
        progress = store_progress(config)
    document = operator_status(config, progress)
    if args.json:
        print(json.dumps(document, indent=2))
    else:
        print("\n".join(status_lines(document, progress)))
    return 0 if not args.wait or progress.state == "done" else 1


def _deadline(args: argparse.Namespace) -> int:
    from noisyanchor.analyst.config import load_analyst_config
    from noisyanchor.common.durations import human_time
    from noisyanchor.common.json_vocabulary import deadline_fields

    if args.extend is None:
        from noisyanchor.analyst.live_deadline import deadlines

        config = load_analyst_config(args.config)
        deadline, pending = deadlines(config.deadline, config.output_dir)
        if args.json:
            print(json.dumps({"federation_id": config.federation_id}
                             | deadline_fields(deadline)
                             | deadline_fields(pending, "pending_deadline")))
        else:
            print(f"federation {config.federation_id}: deadline "
                  + (human_time(deadline) if deadline else "none (sites wait 1 h)")
                  + (f"; {args.config} says {human_time(pending)}, from the analyst's next "
                     "start" if pending else ""))
        return 0
    from noisyanchor.analyst.kit import extend_deadline

    moved = extend_deadline(args.config, args.extend)
    if args.json:
        print(json.dumps({"federation_id": moved.federation_id, "config": str(moved.config),
                          "before": moved.before.isoformat() if moved.before else None}
                         | deadline_fields(moved.after)))
        return 0
    before = human_time(moved.before) if moved.before else "none"
    print(f"federation {moved.federation_id}: deadline moved to {human_time(moved.after)} "
          f"(was {before}) in {moved.config} and its store. A running analyst applies it at "
          "once, without a restart; sites still waiting follow it, sites that gave up run "
          "their command again.")
    return 0


def _attack(args: argparse.Namespace) -> int:
    import numpy as np

    from noisyanchor.analyst.attack import attack_store
    from noisyanchor.common.errors import InvalidInputError
    from noisyanchor.common.npy_files import load_npy

    def records(path: Path) -> np.ndarray:
        return load_npy(path, f"records file {path}", kinds="iuf", ndim=2)

    known = {}
    for item in args.known:
        pid, sep, path = item.partition("=")
        if not sep or not pid or not path:
            raise InvalidInputError(f"--known {item!r}: expected ID=FILE.npy")
        known[pid] = records(Path(path))
    summary = attack_store(args.store, args.out, colluder=args.colluder, v=args.v,
                           alone=args.alone, known=known,
                           public=None if args.public is None else records(args.public))
    if args.json:
        print(json.dumps(summary, indent=2))
        return 0
    who = ("the analyst alone" if summary["colluder"] is None
           else f"colluder(s) {', '.join(summary['colluders'])}")
    print(f"attacks by {who} on {summary['method']}: "
          f"{len(summary['targets'])} targets, reconstructions in {summary['out_dir']}")
    for name, files in summary["reconstructions"].items():
        print(f"  {name}: {len(files)} reconstructions")
    ml = summary["diagnostics"].get("ml")
    if ml:
        won = sum(f["best_start"] != 0 for f in ml.values())
        print(f"  ml: converged for {sum(f['converged'] for f in ml.values())}/{len(ml)} "
              f"targets ({next(iter(ml.values()))['starts']} starts each; a start other than "
              f"OP had the highest likelihood for {won})")
    for name, why in summary["skipped"].items():
        print(f"  {name}: skipped ({why})")
    level = summary["noise_level"]
    if level["v"] is not None:
        print(f"  anchor-noise level v = {level['v']:.4g} ({level['source']})")
    return 0

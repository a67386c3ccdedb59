"""Subcommands of the participant role: ``participant upload``, ``collude``, ``status``,
``predict`` and ``keygen``.

Exit status 0 when the analyst accepted the bundle (or a rerun finds the upload committed, from
the receipt the site keeps), 1 with the reason on any refusal; ``status`` exits 0 when it shows
the federation's progress or, the analyst unreachable, what the site keeps, 1 when neither.
"""

from __future__ import annotations

import argparse
import json
from dataclasses import asdict
from pathlib import Path

#: Top-level commands of this role and their one-line help (see :mod:`noisyanchor.cli`).
COMMANDS = {"participant": "a participant: upload once, predict locally, or disclose as the "
                           "colluder",
            "release": "differentially private similarity release from the analyst's "
                       "collaboration matrix"}


def register(sub: argparse._SubParsersAction) -> None:
    """Add this role's subcommands to the top-level parser."""
    from noisyanchor.participant import release_client

    group = sub.add_parser("participant", help=COMMANDS["participant"])
    inner = group.add_subparsers(dest="participant_command", required=True, metavar="ACTION")
    up = inner.add_parser("upload", help="agree on the anchor, compute and stream the one upload")
    co = inner.add_parser("collude", help="disclose data, secrets and anchor to the analyst "
                          "(threat-model testing; needs keep_secrets at upload)")
    st = inner.add_parser("status", help="ask the analyst for the federation's progress; "
                          "when it does not answer within 3 s, what this site keeps (receipt, "
                          "site model, gain), said to be so")
    for p in (up, co, st):
        p.add_argument("--config", type=Path, required=True, help="participant TOML file")
        p.add_argument("--analyst", default=None, help="override [participant] analyst host:port")
        p.add_argument("--json", action="store_true", help="print the outcome as JSON")
    up.add_argument("--keep-secrets", action="store_true", default=None,
                    help="keep the secret state in state_dir (the colluder needs it)")
    up.set_defaults(handler=_upload)
    co.set_defaults(handler=_collude)
    st.set_defaults(handler=_status)
    pr = inner.add_parser("predict", help="predict new records locally with this site's key, "
                          "its map and the federation's model (fetched once, then offline)")
    pr.add_argument("--config", type=Path, required=True, help="participant TOML file")
    pr.add_argument("--input", type=Path, required=True,
                    help="new records: a table like the upload's (.csv, .npz, .npy); a label "
                    "column is not needed and not used")
    pr.add_argument("--out", type=Path, required=True,
                    help="predictions CSV: row, line, label, p_<class> per input record")
    pr.add_argument("--labels", metavar="COLUMN", default=None,
                    help="the input's column of true labels: also score the federation's "
                    "model against this site's local-only model on these records (the paired "
                    "difference in balanced accuracy with its 95%% interval)")
    pr.add_argument("--refresh", action="store_true",
                    help="fetch the site model from the analyst again (default: the copy kept "
                    "in state_dir)")
    pr.add_argument("--strict", action="store_true",
                    help="refuse a table with a column out of its declared range or unit "
                    "(default: warn, naming the column and the first line)")
    pr.add_argument("--analyst", default=None, help="override [participant] analyst host:port")
    pr.add_argument("--json", action="store_true", help="print the outcome as JSON")
    pr.set_defaults(handler=_predict)
    kg = inner.add_parser("keygen", help="make this site's private key and a certificate "
                          "signing request for the operator (the key never leaves this host)")
    kg.add_argument("--id", required=True, help="this site's participant id")
    kg.add_argument("--out", type=Path, default=Path("."),
                    help="the folder the startup kit will be unpacked into (key: "
                    "OUT/pki/ID.key, request: OUT/ID.csr)")
    kg.add_argument("--json", action="store_true", help="print the file paths as JSON")
    kg.set_defaults(handler=_keygen)
    release_client.register(sub)  # the top-level `release scores|gram` group


def _config(args: argparse.Namespace):
    from noisyanchor.common.logs import configure_logging, quiet_grpc_core

    quiet_grpc_core()  # before grpc is first imported: TLS failures are explained, not dumped
    configure_logging()  # progress while waiting for the others, at INFO
    from noisyanchor.participant.config import load_participant_config

    return load_participant_config(args.config).with_overrides(
        analyst=args.analyst, keep_secrets=getattr(args, "keep_secrets", None))


def analyst_answer(reply, progress) -> dict:
    """The analyst's part of ``participant status --json``: the progress in the keys of
    ``analyst status --json`` (:mod:`common.json_vocabulary`) and what was disclosed."""
    return progress.as_dict() | {"disclosed": list(reply.disclosed)}


def _print(sent, as_json: bool) -> int:
    if as_json:
        print(json.dumps(asdict(sent), indent=2))
    else:
        what = (f"{sent.kind} of {sent.records} records ({sent.bytes} bytes)")
        if sent.kept_receipt is not None:
            print(_kept_answer(sent, what))
        elif sent.already_committed:
            print(f"{sent.participant}: {what} was already done; this identical retry changed "
                  f"nothing; receipt {sent.receipt}")
        else:
            print(f"{sent.participant}: {what} committed; receipt {sent.receipt}")
    return 0


def _kept_answer(sent, what: str) -> str:
    """An upload committed before this run, from the receipt the site keeps."""
    import datetime as dt

    from noisyanchor.common.durations import human_time

    when = human_time(dt.datetime.fromisoformat(sent.received_at))
    asked = (f"the analyst could not be asked whether it still holds it: "
             f"{sent.analyst_unreachable}" if sent.analyst_unreachable is not None
             else "the analyst still holds it")
    return (f"{sent.participant}: {what} already committed; receipt {sent.receipt}, received "
            f"{when}, kept in {sent.kept_receipt}; {asked}; nothing was sent again")


def _upload(args: argparse.Namespace) -> int:
    from noisyanchor.participant.run import run_upload

    return _print(run_upload(_config(args)), args.json)


def _collude(args: argparse.Namespace) -> int:
    from noisyanchor.participant.run import run_collude

    return _print(run_collude(_config(args)), args.json)


def _site_gain(cfg, refresh: bool = False) -> dict:
    """The site model (cached or fetched) and ``gain.json``; ``{"error": ...}`` instead when
    either cannot be had (status reports it rather than failing)."""
    from noisyanchor.common.errors import NoisyAnchorError
    from noisyanchor.participant.gain import ensure_gain
    from noisyanchor.participant.predict import site_model
    from noisyanchor.participant.site_state import load_site_key

    try:
        key = load_site_key(cfg)
        return ensure_gain(cfg, key, site_model(cfg, refresh=refresh), refresh=refresh)
    except (NoisyAnchorError, ImportError) as err:
        return {"error": str(err)}


def _site_contribution(cfg) -> dict | None:
    """This site's own contribution aggregates, from its kept site model (None when it has
    none or cannot be had: the gain says why)."""
    from noisyanchor.common.errors import NoisyAnchorError
    from noisyanchor.participant.predict import site_model

    try:
        return site_model(cfg).site_metrics.get("contribution")
    except (NoisyAnchorError, ImportError):
        return None


def _status(args: argparse.Namespace) -> int:
    from noisyanchor.common.errors import AnalystUnavailableError
    from noisyanchor.participant.local_state import keep_last_status, now_iso
    from noisyanchor.participant.run import federation_progress
    from noisyanchor.participant.site_status import reach, site_holdings

    cfg = _config(args)
    tried_at = now_iso()
    try:
        reply, progress = federation_progress(cfg)
    except AnalystUnavailableError as err:
        return _local_status(cfg, err, tried_at, args.json)
    # Once done, what joining gained this site (the site model is fetched once and kept).
    gain = _site_gain(cfg) if reply.state == "done" else None
    contribution = _site_contribution(cfg) if gain is not None else None
    answer = analyst_answer(reply, progress)
    keep_last_status(cfg, answer)  # what status shows when the analyst is unreachable
    if args.json:
        print(json.dumps(answer | {"gain": gain, "contribution": contribution}
                         | reach(cfg, as_of=tried_at) | site_holdings(cfg), indent=2))
    else:
        print("\n".join(progress.lines()))
        _print_gain(gain, contribution)
    return 0


def _print_gain(gain: dict | None, contribution: dict | None) -> None:
    from noisyanchor.common.contribution_text import site_line
    from noisyanchor.participant.gain import gain_line

    if gain is not None:
        print(f"gain: {gain['error']}" if "error" in gain else f"gain {gain_line(gain)}")
    if (line := site_line(contribution)) is not None:
        print(line)


def _local_status(cfg, err, tried_at: str, as_json: bool) -> int:
    """``participant status`` when the analyst is unreachable: what the site keeps, said to
    be so (exit 0; 1 when it keeps nothing of the federation)."""
    from noisyanchor.participant.predict import SITE_MODEL_FILE
    from noisyanchor.participant.run import CONNECT_WAIT
    from noisyanchor.participant.site_status import local_lines, local_status

    status = local_status(cfg, err, tried_at, CONNECT_WAIT)
    # From the kept site model only: nothing is fetched.
    kept = (cfg.state_dir / SITE_MODEL_FILE).is_file()
    gain = _site_gain(cfg) if kept else None
    contribution = _site_contribution(cfg) if kept else None
    if as_json:
        print(json.dumps(status | {"gain": gain, "contribution": contribution}, indent=2))
    else:
        print("\n".join(local_lines(cfg, status)))
        _print_gain(gain, contribution)
    return 0


def _predict(args: argparse.Namespace) -> int:
    from noisyanchor.common.comparison import comparison_text
    from noisyanchor.participant.gain import gain_line
    from noisyanchor.participant.predict import (
        SITE_MODEL_FILE,
        class_names,
        load_predictor,
        predicted_chunks,
        write_predictions,
    )

    cfg = _config(args)
    fetched = args.refresh or not (cfg.state_dir / SITE_MODEL_FILE).is_file()
    predictor = load_predictor(cfg, refresh=args.refresh)
    names = class_names(cfg, predictor.classes)
    scored = _LabelledChunks(cfg, predictor) if args.labels is not None else None
    count = 0

    def chunks():  # one chunk of records held at a time, however many the input has
        nonlocal count
        for data, out in predicted_chunks(cfg, predictor, args.input, labels=args.labels,
                                          strict=args.strict):
            count += len(out.labels)
            if scored is not None:
                scored.add(data, out.labels)
            yield out

    write_predictions(args.out, chunks())
    gain = _site_gain(cfg)
    classes = list(names or predictor.classes.tolist())
    summary = {"participant": cfg.id, "input": str(args.input), "out": str(args.out),
               "records": count, "classes": classes, "model": predictor.model.name,
               "fetched": fetched, "site_model": str(cfg.state_dir / SITE_MODEL_FILE),
               "gain": gain}
    if scored is not None:
        summary["labelled_gain"] = {"label_column": args.labels} | scored.fields()
    if args.json:
        print(json.dumps(summary, indent=2))
        return 0
    source = ("fetched from the analyst and kept in" if fetched else "kept in")
    print(f"{cfg.id}: predicted {summary['records']} records of {args.input} into {args.out} "
          f"(label and the probability of each class {', '.join(map(str, classes))}) with "
          f"the federation's {predictor.model.name} model and {cfg.id}'s own map, "
          f"{source} {summary['site_model']}; nothing about the records left this host")
    print(f"gain: {gain['error']}" if "error" in gain else f"gain {gain_line(gain)}")
    if args.labels is not None:
        print(f"gain on the {summary['records']} records of {args.input} (labels in column "
              f"{args.labels}): {comparison_text(summary['labelled_gain'])}")
    return 0


class _LabelledChunks:
    """``predict --labels``: each chunk's true labels and both models' labels of it, kept
    (integers, a few bytes a record) for the paired comparison once every chunk is read."""

    def __init__(self, cfg, predictor) -> None:
        from noisyanchor.participant.gain import site_baseline

        self.cfg, self.key = cfg, predictor.key
        self.baseline = site_baseline(cfg, predictor)
        self.truth: list = []
        self.ours: list = []
        self.alone: list = []

    def add(self, data, labels) -> None:
        """One chunk's records (with their true labels) and the federation's labels of them."""
        self.truth.append(data.labels)
        self.ours.append(labels)
        self.alone.append(self.baseline.predict(data.x))

    def fields(self) -> dict:
        """:func:`participant.gain.labelled_gain`'s fields over every chunk."""
        import numpy as np

        from noisyanchor.participant.gain import labelled_comparison

        alone = None if self.baseline.model is None else np.concatenate(self.alone)
        return labelled_comparison(self.cfg, self.key, np.concatenate(self.truth),
                                   np.concatenate(self.ours), alone, self.baseline.not_fitted)


def _keygen(args: argparse.Namespace) -> int:
    from noisyanchor.participant.keygen import make_key_and_csr

    made = make_key_and_csr(args.id, args.out)
    if args.json:
        print(json.dumps({"key": str(made.key), "csr": str(made.csr)}, indent=2))
    else:
        print(f"{args.id}: key {made.key} (mode 0600, stays here); send {made.csr} to the "
              "operator, then unpack the startup kit you get back into "
              f"{Path(args.out).resolve()}")
    return 0

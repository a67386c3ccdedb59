"""Subcommands of the deploy role: ``certs`` (a demo PKI) and ``demo`` (the whole system as
separate processes on 127.0.0.1)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

#: Top-level commands of this role and their one-line help (see :mod:`noisyanchor.cli`).
COMMANDS = {"certs": "make a CA, the analyst's server certificate and one client certificate "
                     "per participant",
            "demo": "run analyst, participants, colluder and attack as separate processes over "
                    "mutual TLS on bundled data (digits, or the breast cancer table); "
                    "--transport flower: the Flower app on Flower's simulation engine",
            "provision": "make one startup kit per site (and the analyst) from a project file; "
                         "add sites, renew certificates, sign a site's CSR"}


def register(sub: argparse._SubParsersAction) -> None:
    """Add this role's subcommands to the top-level parser."""
    certs = sub.add_parser("certs", help=COMMANDS["certs"])
    certs.add_argument("--out", type=Path, required=True, help="output folder")
    certs.add_argument("--participants", nargs="+", required=True, metavar="ID",
                       help="participant ids (certificate common names)")
    certs.add_argument("--server-name", default="localhost",
                       help="host name of the analyst's certificate (also covers localhost, "
                       "127.0.0.1)")
    certs.add_argument("--json", action="store_true", help="print the file paths as JSON")
    certs.set_defaults(handler=_certs)

    prov = sub.add_parser("provision", help=COMMANDS["provision"])
    prov.add_argument("--project", type=Path, required=True,
                      help="project file (deploy/templates/federation.toml)")
    prov.add_argument("--out", type=Path, default=None,
                      help="kits folder (default: kits/ beside the project file); it may hold "
                      "data split's tables for the sites already")
    prov.add_argument("--schema", type=Path, default=None, metavar="FILE",
                      help="use this file's [schema] (schema draft's output, reviewed) instead "
                      "of the project's; first run only")
    action = prov.add_mutually_exclusive_group()
    action.add_argument("--add-site", nargs="+", default=None, metavar="SITE",
                        help="make kits for sites added to the project, with the kept CA")
    action.add_argument("--renew", nargs="+", default=None, metavar="SITE",
                        help="issue these certificates again (a site, analyst, or ca: the CA's "
                        "own, same key and name) for their existing keys, valid "
                        "validity_days from now")
    action.add_argument("--sign", type=Path, default=None, metavar="CSR",
                        help="make the kit of the site this CSR names (participant keygen); "
                        "the kit holds no key")
    action.add_argument("--expiry", action="store_true",
                        help="list when the CA's and every kit's certificates expire, and what "
                        "to renew or re-ship (--renew ca renews the CA for its same key)")
    prov.add_argument("--json", action="store_true", help="print the kits as JSON")
    prov.set_defaults(handler=_provision)

    from noisyanchor.common.cliargs import int_at_least, nonnegative_float
    from noisyanchor.common.methods import DEFAULT_ANCHOR_NOISE, Method
    from noisyanchor.deploy.demo import TRANSPORTS

    demo = sub.add_parser("demo", help=COMMANDS["demo"])
    demo.add_argument("--participants", type=int_at_least(2), default=4, help="p")
    demo.add_argument("--method", choices=[m.value for m in Method], default="aa-igdp-an",
                      help="one of the six methods")
    demo.add_argument("--v", type=nonnegative_float, default=DEFAULT_ANCHOR_NOISE,
                      help="anchor noise level (aa-igdp-an)")
    demo.add_argument("--sigma", type=nonnegative_float, default=0.0,
                      help="private-data noise level")
    demo.add_argument("--dim", type=int_at_least(1), default=None,
                      help="width h of the public projection")
    demo.add_argument("--anchors", type=int_at_least(2), default=None,
                      help="anchor rows r (default 4 d)")
    demo.add_argument("--colluder", type=int_at_least(-1), default=0,
                      help="index of the colluding participant (-1: none)")
    demo.add_argument("--seed", type=int_at_least(0), default=None,
                      help="root seed of data split and secrets (default: random, reported)")
    demo.add_argument("--workdir", type=Path, default=None,
                      help="where the demo keeps everything: summary.md, summary.json, the "
                      "figures, configs, certificates, logs, the store and each site's state "
                      "(default: a new folder noisyanchor-demo-<date>-<time> under the working "
                      "directory)")
    demo.add_argument("--dataset", choices=("digits", "breast-cancer"), default="digits",
                      help="bundled data: handwritten digits, or the breast cancer table scaled "
                      "as deploy/templates/federation-breast-cancer.toml declares")
    demo.add_argument("--transport", choices=TRANSPORTS, default="grpc",
                      help="grpc: analyst and sites as processes over mutual TLS (default); "
                      "flower: the Flower app on Flower's simulation engine, one virtual "
                      "SuperNode per site (up to 100 on one host; needs the flower extra; no "
                      "colluder, as the Flower app carries no disclosure)")
    demo.add_argument("--json", action="store_true", help="print the summary as JSON")
    demo.set_defaults(handler=_demo)


def _provision(args: argparse.Namespace) -> int:
    from noisyanchor.common.json_vocabulary import deadline_fields
    from noisyanchor.deploy.provision import provision, sign_request

    if args.expiry:
        return _expiry(args)
    if args.sign is not None:
        done = sign_request(args.project, args.sign, args.out)
    else:
        done = provision(args.project, args.out, add_sites=tuple(args.add_site or ()),
                         renew=tuple(args.renew or ()), schema=args.schema)
    kits = {name: str(path) for name, path in sorted(done.kits.items())}
    project = done.project
    deadline = project.federation.get("deadline") if project else None
    changed = {name: list(files) for name, files in (done.changed or {}).items()}
    if args.json:
        print(json.dumps({"out": str(done.out), "ca": str(done.out / "ca"), "kits": kits,
                          "port": project.port if project else None,
                          "health_port": project.health_port if project else None,
                          "ship": changed} | deadline_fields(deadline), indent=2))
        return 0
    print(f"startup kits in {done.out}: {', '.join(kits)}; the CA key stays in "
          f"{done.out / 'ca'} (never ship it)")
    if project is not None:
        print(_federation_line(project))
    if args.schema is not None and project is not None:
        print(_schema_line(project, args.schema))
    if args.add_site or args.renew or args.sign:
        for name, files in changed.items():
            print(f"  ship again to {name}: {', '.join(files)} (from {done.out / name})")
    if args.renew and "ca" in args.renew:
        print(_ca_renewed(done.out))
    return 0


def _ca_renewed(out: Path) -> str:
    """What a CA renewal means for the kits already shipped."""
    from noisyanchor.deploy.expiry import expiry_report

    ca = expiry_report(out)[0]
    return (f"CA certificate renewed for its same key and name, valid until "
            f"{ca.not_after:%Y-%m-%d %H:%M} UTC: every certificate it issued still verifies, "
            "so sites and the analyst keep connecting; " + "; ".join(ca.notes))


def _expiry(args: argparse.Namespace) -> int:
    from noisyanchor.deploy.expiry import expiry_report, expiry_table
    from noisyanchor.deploy.provision import load_project

    out = args.out if args.out is not None else load_project(args.project).path.parent / "kits"
    rows = expiry_report(out)
    if args.json:
        import datetime

        now = datetime.datetime.now(datetime.UTC)
        print(json.dumps({"out": str(out), "certificates": [r.as_dict(now) for r in rows]},
                         indent=2))
    else:
        print(expiry_table(rows))
    return 0


def _federation_line(project) -> str:
    """What the sites were told: where the analyst listens, and until when they wait."""
    from noisyanchor.common.durations import human_time

    deadline = project.federation.get("deadline")
    health = f", health checks on 127.0.0.1:{project.health_port}" if project.health_port else ""
    until = f"deadline {human_time(deadline)}" if deadline else "no deadline (sites wait 1 h)"
    return (f"federation {project.name}: the analyst listens on {project.bind}:{project.port}"
            f"{health}; {until}")


def _schema_line(project, source: Path) -> str:
    """What ``--schema`` gave every kit: the encoded width and the digest each pins."""
    from noisyanchor.common.tabular import TabularSchema

    if "column" not in project.schema:
        return f"[schema] from {source} (plain) in every kit"
    schema = TabularSchema.from_toml(project.schema, source)
    n = len(schema.columns)
    return (f"[schema] from {source}: {n} column{'s' * (n != 1)}, d_in = {schema.width} "
            f"encoded; every site's kit pins its preprocessing {schema.digest().hex()[:16]}...")


def _certs(args: argparse.Namespace) -> int:
    from noisyanchor.deploy.certs import write_pki

    pki = write_pki(args.out, args.participants, server_name=args.server_name)
    paths = {"ca": str(pki.ca), "server_cert": str(pki.server_cert),
             "server_key": str(pki.server_key),
             "clients": {pid: [str(c), str(k)] for pid, (c, k) in pki.clients.items()}}
    if args.json:
        print(json.dumps(paths, indent=2))
    else:
        print(f"CA {pki.ca}; analyst {pki.server_cert}; {len(pki.clients)} client "
              f"certificates in {args.out}")
    return 0


def _demo(args: argparse.Namespace) -> int:
    from noisyanchor.deploy.demo import run_demo
    from noisyanchor.deploy.demo_report import gain_text, number_text

    s = run_demo(participants=args.participants, method=args.method, v=args.v,
                 sigma=args.sigma, dim=args.dim, anchors=args.anchors,
                 colluder=None if args.colluder < 0 else args.colluder, seed=args.seed,
                 workdir=args.workdir, dataset=args.dataset, transport=args.transport)
    if args.json:
        print(json.dumps(s, indent=2))
        return 0
    ran = (f"colluder and attack ran as {len(s['pids'])} separate processes over mutual TLS"
           if s["transport"] == "grpc" else "ran as a Flower ServerApp and one ClientApp per "
           "virtual SuperNode on Flower's simulation engine")
    print(f"demo: analyst, {s['participants']} participants, {ran}; method {s['method']} "
          f"(d = {s['dim']} columns aligned, an anchor of r = {s['anchors']} rows, anchor "
          f"noise v = {s['v']}, seed {s['seed']})")
    solver = s["solver"]
    print(f"alignment: {solver.get('name')}, converged {solver.get('converged')}, certified "
          f"{solver.get('certified')}; the collaboration matrix Z equals the in-process "
          "simulator's: "
          f"{s['z_matches_inprocess']} (max |diff| {s['z_max_abs_diff']:.2g}, "
          f"{s['z_max_rel_diff']:.2g} of max |Z|)")
    for pid, site in s["sites"].items():
        fed, alone = site["federation"], site["local_only"]
        print(f"site {pid}: predicted {site['held_back']} records it never uploaded, "
              f"{_share(fed['held_back_accuracy'])} correctly (alone: "
              f"{_share(alone['held_back_accuracy'])}); balanced accuracy on its "
              f"{site['test_rows']} test rows {number_text(fed['test_balanced_accuracy'])} vs "
              f"{number_text(alone['test_balanced_accuracy'])} alone "
              f"({gain_text(site['gain'], site['gain_interval'])} from joining"
              + (f"; not told: {site['gain_not_told']})" if site["gain_not_told"] else ")"))
    for name, res in s["attacks"].items():
        print(f"attack {name} by colluder {s['colluder']}: relative reconstruction error "
              f"{res['relative_error']:.4g}: {res['meaning']}")
    print(f"utility: balanced accuracy {s['utility']['balanced_accuracy']:.4f} over every "
          f"site's test rows; {s['seconds']:.1f} s")
    files = ", ".join(s["files"].values())
    print(f"results in {s['folder']} ({files}); what each number means, and what a site can "
          "change (noise, projection, model), in summary.md; who can attack whom and what each "
          "defence costs in THREAT_MODEL.md")
    return 0


def _share(value) -> str:
    return "n/a" if value is None else f"{100 * value:.0f}%"

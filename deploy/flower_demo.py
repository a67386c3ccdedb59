"""``noisyanchor demo --transport flower``: the demo's federation run by the Flower app on
Flower's simulation engine (one virtual SuperNode per site, up to 100 on one host), then every
site predicting its held-back records from what the ClientApp kept in its state folder.

The federation's files (PKI, analyst config, each site's kit and data) are the gRPC demo's
(:func:`deploy.demo.write_analyst`, :func:`deploy.demo.write_participant`), so the same seed
gives the same uploads, ``Z`` and model over either transport.

References: issue 32, item 5.
"""

from __future__ import annotations

import contextlib
import io
import os
from pathlib import Path

import numpy as np

from noisyanchor.common.blas import blas_threads
from noisyanchor.common.errors import PreconditionError
from noisyanchor.deploy.demo import (
    _Run,
    _write_data,
    participant_ids,
    write_analyst,
    write_participant,
)

#: What a Flower kit names as its analyst: the SuperLink reaches the site, not the other way.
FLOWER_ADDRESS = "flower-superlink"


def flower_kits(root: Path, config, fed) -> tuple[Path, dict[str, Path]]:
    """The demo's analyst config and every site's kit under ``root`` (no colluder: the Flower
    app carries no disclosure), with the seeds of :func:`experiments.simulate.prepare`."""
    ids = participant_ids(config.participants)
    files = write_analyst(root, ids, federation_id="demo", method=config.method,
                          anchors=config.anchors, dim=config.dim, sigma=config.sigma, v=config.v,
                          accept_collusion=False, data=_write_data(root, ids, fed))
    kits = {pid: write_participant(
        files, pid, federation_id="demo", address=FLOWER_ADDRESS, method=config.method,
        anchors=config.anchors, dim=config.dim, projection_seed=fed.projection_seed,
        sigma=config.sigma, v=config.v, seed=fed.participant_seeds[i],
        anchor_seed=fed.shared_seed if i == 0 else None) for i, pid in enumerate(ids)}
    return files.analyst_config, kits


def predict_offline(root: Path, kits: dict[str, Path],
                    held: dict[str, tuple[np.ndarray, np.ndarray]]
                    ) -> tuple[dict[str, np.ndarray], dict[str, dict]]:
    """Every site runs ``participant predict`` on its held-back records (the CLI's own code,
    in this process: at 100 sites, 100 interpreters would cost more than the federation);
    nothing reaches an analyst, only the state folder is read. Predicted labels and each
    site's ``gain.json``."""
    import json

    from noisyanchor.cli import main

    predictions, gains = {}, {}
    for pid, kit in kits.items():
        x = held[pid][0]
        table, out = root / "new" / f"{pid}.csv", root / "predictions" / f"{pid}.csv"
        table.parent.mkdir(parents=True, exist_ok=True)
        np.savetxt(table, x, delimiter=",", header=",".join(f"f{j}" for j in range(x.shape[1])),
                   comments="", fmt="%.17g")
        with contextlib.redirect_stdout(io.StringIO()):
            status = main(["participant", "predict", "--config", str(kit), "--input",
                           str(table), "--out", str(out)])
        if status != 0:
            raise PreconditionError(f"participant {pid}'s prediction exited with {status}")
        predictions[pid] = np.loadtxt(out, delimiter=",", skiprows=1, ndmin=2)[:, 2].astype(int)
        gains[pid] = json.loads((root / "state" / pid / "gain.json").read_text())
    return predictions, gains


def run_flower(root: Path, config, fed, held: dict[str, tuple[np.ndarray, np.ndarray]]
               ) -> _Run:
    """The federation on Flower's simulation engine, then every site's offline prediction."""
    try:
        from noisyanchor.deploy.flower_sim import simulate
    except ModuleNotFoundError as err:
        raise PreconditionError(f"the Flower transport needs the flower extra ({err}): "
                                "pip install -e '.[flower]'") from None

    analyst_config, kits = flower_kits(root, config, fed)
    # The ServerApp aligns in this process with one BLAS thread, as the gRPC demo's analyst
    # process does (Z then equals the in-process simulator's, computed with one thread too).
    with blas_threads(1):
        result = simulate(analyst_config, list(kits.values()),
                          cpus=min(os.cpu_count() or 1, 4)).result
    predictions, gains = predict_offline(root, kits, held)
    return _Run(result, {}, {}, predictions, gains, {})


"""``noisyanchor attack --store DIR``: the attacks of the engine, run from what an analyst store
holds (uploads, alignment, a colluder's disclosure), or with ``--alone`` the attacks the analyst
runs without a colluder, from side knowledge it is given (known records of a participant, a
public sample).

Reconstructions are in the working space (``X_i F`` when a public projection is used) and are
written as ``.npy`` files with a JSON summary; scoring them needs the true records, which the
analyst does not have (the demo scores them).

References: SPEC.md section 3.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

from noisyanchor.analyst.storage import FEDERATION_FILE, Store, npy_bytes, read_bundle
from noisyanchor.common.attacks import (
    DEFAULT_KNOWN_RECORDS,
    AttackerView,
    Disclosure,
    SideKnowledge,
    attack_all,
    available_attacks,
)
from noisyanchor.common.errors import InvalidInputError, NotFoundError, PreconditionError
from noisyanchor.common.files import atomic_write
from noisyanchor.common.gdp import GdpKey
from noisyanchor.common.methods import Method


def _noise_level(v: float | None, disclosed: dict[str, np.ndarray]) -> tuple[float | None, str]:
    """``v`` for the anchor attacks and where it came from: the operator's value, else the
    colluder's disclosed anchor noise ``V_c = v W_c`` (``v^ = ||V_c||_F / sqrt(r d)``), else None
    (the attacks estimate it from the residuals of every uploaded anchor)."""
    if v is not None:
        return v, "given"
    noise = disclosed.get("anchor_noise")
    if noise is not None and noise.size:
        return float(np.linalg.norm(noise) / np.sqrt(noise.size)), "colluder's anchor noise"
    return None, "anchor residuals"


def attack_store(store_dir: Path, out_dir: Path | None = None,
                 colluder: str | None = None, v: float | None = None, *, alone: bool = False,
                 public: np.ndarray | None = None,
                 known: dict[str, np.ndarray] | None = None) -> dict[str, Any]:
    """Run every attack of the federation's method (built-in and plug-in, see
    :mod:`common.attacks`) against every non-colluding participant (every participant with
    ``alone``).

    Parameters
    ----------
    store_dir : Path
        The analyst's ``output_dir``.
    out_dir : Path, optional
        Destination of ``<attack>/<participant>.npy`` and ``summary.json`` (default
        ``store_dir/attack``).
    colluder : str, optional
        Which disclosure to use when several participants disclosed.
    v : float, optional
        The anchor-noise level, if known (default: from the colluder's disclosed anchor noise,
        else estimated from the residuals of the uploaded anchors).
    alone : bool
        The analyst without a colluder: no disclosure is read, and only the attacks that need
        none run (known-input and known-sample, given ``known`` and ``public``).
    public : (N, d) ndarray, optional
        A public sample of the population in the working space (known-sample attacks).
    known : dict, optional
        ``{participant id: (m, d) records of it the attacker knows}``, working space.
    """
    store = Store(store_dir).check_private()
    meta_path = store.root / FEDERATION_FILE
    if not meta_path.is_file():
        raise NotFoundError(f"{store.root} is not an analyst store (no {FEDERATION_FILE})")
    meta = json.loads(store.read(meta_path))
    method = Method(meta["method"])
    participants = meta["participants"]
    disclosed = store.committed(store.disclosures)
    if alone and colluder is not None:
        raise InvalidInputError("--alone runs without a colluder; drop --colluder")
    unknown = sorted(set(known or {}) - set(participants))
    if unknown:
        raise InvalidInputError(f"known records of {unknown}: not participants of this "
                                f"federation ({participants})")
    if alone:
        pass
    elif colluder is None:
        if len(disclosed) != 1:
            raise PreconditionError(f"the store holds disclosures from {disclosed}; exactly one "
                                    "is needed (or name one with --colluder)")
        colluder = disclosed[0]
    if not alone and colluder not in disclosed:
        raise NotFoundError(f"no disclosure from {colluder!r} in {store.root}")
    missing = sorted(set(participants) - set(store.committed(store.uploads)))
    if missing:
        raise PreconditionError(f"uploads of {missing} are missing from {store.root}")
    rotations = None
    if method.uses_anchor:
        if not (store.result / "rotations.npy").is_file():
            raise PreconditionError("the alignment has not finished (no result/rotations.npy)")
        rotations = store.result_array("rotations.npy")  # verified against the manifest
    bundles = [read_bundle(store.upload_path(pid), root=store.root)[1] for pid in participants]
    disclosure, source = None, None
    if colluder is not None:
        _, secrets_ = read_bundle(store.disclosure_path(colluder), root=store.root)
        level, source = _noise_level(v, secrets_)
        disclosure = Disclosure(participants.index(colluder), secrets_["data"],
                                GdpKey(secrets_["rotation"], secrets_["translation"]),
                                secrets_.get("anchor"), level)
        if method.uses_anchor and disclosure.anchor is None:
            raise InvalidInputError(f"the disclosure of {colluder!r} lacks the anchor")
    side = SideKnowledge({participants.index(pid): rows for pid, rows in (known or {}).items()},
                         public)
    sizes = sorted({len(rows) for rows in side.known_records.values()}) or DEFAULT_KNOWN_RECORDS
    run = attack_all(AttackerView(method, disclosure, [b["data"] for b in bundles],
                                  [b.get("anchor") for b in bundles], rotations, side=side),
                     available_attacks(known_records=[m for m in sizes if m >= 2]))
    recon = run.reconstructions
    out = Path(out_dir) if out_dir is not None else store.root / "attack"
    files: dict[str, dict[str, str]] = {}
    for name, per_target in recon.items():
        (out / name).mkdir(parents=True, exist_ok=True)
        files[name] = {}
        for i, x_hat in per_target.items():
            path = out / name / f"{participants[i]}.npy"
            atomic_write(path, npy_bytes(x_hat))
            files[name][participants[i]] = str(path)
    summary = {"federation_id": meta["federation_id"], "method": method.value,
               "colluder": colluder, "targets": [p for p in participants if p != colluder],
               "space": "working", "out_dir": str(out), "reconstructions": files,
               "skipped": run.skipped,
               "diagnostics": {name: {participants[i]: facts for i, facts in per.items()}
                               for name, per in run.diagnostics.items()},
               "noise_level": {"v": run.noise_level, "source": source if method.uses_anchor
                               else None, "estimated_from_residuals": run.estimated_noise_level}}
    out.mkdir(parents=True, exist_ok=True)
    atomic_write(out / "summary.json", json.dumps(summary, indent=2).encode())
    return summary

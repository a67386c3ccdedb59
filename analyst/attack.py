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
from collections.abc import Sequence
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


def _noise_level(v: float | None, disclosed: list[dict[str, np.ndarray]],
                 ) -> tuple[float | None, str]:
    """``v`` for the anchor attacks and where it came from: the operator's value, else the
    colluders' disclosed anchor noise ``V_c = v W_c`` pooled
    (``v^ = sqrt(sum_c ||V_c||_F^2 / (k r d))``), else None (the attacks estimate it from the
    residuals of every uploaded anchor)."""
    if v is not None:
        return v, "given"
    noises = [n for n in (d.get("anchor_noise") for d in disclosed) if n is not None and n.size]
    if noises:
        total = sum(float(np.sum(n**2)) for n in noises)
        return float(np.sqrt(total / sum(n.size for n in noises))), "colluder's anchor noise"
    return None, "anchor residuals"


def attack_store(store_dir: Path, out_dir: Path | None = None,
                 colluder: str | Sequence[str] | None = None, v: float | None = None, *,
                 alone: bool = False,
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
    colluder : str or sequence of str, optional
        Which disclosure to use when several participants disclosed, or several used jointly
        (``"all"``: every disclosure in the store); the summary's ``colluder`` is the first,
        ``colluders`` every one.
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
    colluders: list[str] = []
    if alone:
        pass
    elif colluder is None:
        if len(disclosed) != 1:
            raise PreconditionError(f"the store holds disclosures from {disclosed}; exactly one "
                                    "is needed (or name one or several with --colluder, or "
                                    "--colluder all)")
        colluders = [disclosed[0]]
    else:
        colluders = ([colluder] if isinstance(colluder, str) else list(colluder))
        colluders = list(disclosed) if colluders == ["all"] else list(dict.fromkeys(colluders))
    for c in colluders:
        if c not in disclosed:
            raise NotFoundError(f"no disclosure from {c!r} in {store.root}")
    missing = sorted(set(participants) - set(store.committed(store.uploads)))
    if missing:
        raise PreconditionError(f"uploads of {missing} are missing from {store.root}")
    rotations = None
    if method.uses_anchor:
        if not (store.result / "rotations.npy").is_file():
            raise PreconditionError("the alignment has not finished (no result/rotations.npy)")
        rotations = store.result_array("rotations.npy")  # verified against the manifest
    bundles = [read_bundle(store.upload_path(pid), root=store.root)[1] for pid in participants]
    secrets_ = [read_bundle(store.disclosure_path(c), root=store.root)[1] for c in colluders]
    level, source = _noise_level(v, secrets_) if colluders else (None, None)
    disclosures = []
    for c, sec in zip(colluders, secrets_, strict=True):
        if method.uses_anchor and sec.get("anchor") is None:
            raise InvalidInputError(f"the disclosure of {c!r} lacks the anchor")
        disclosures.append(Disclosure(participants.index(c), sec["data"],
                                      GdpKey(sec["rotation"], sec["translation"]),
                                      sec.get("anchor"), level))
    side = SideKnowledge({participants.index(pid): rows for pid, rows in (known or {}).items()},
                         public)
    sizes = sorted({len(rows) for rows in side.known_records.values()}) or DEFAULT_KNOWN_RECORDS
    run = attack_all(AttackerView(method, disclosures or None, [b["data"] for b in bundles],
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
               "colluder": colluders[0] if colluders else None, "colluders": colluders,
               "targets": [p for p in participants if p not in colluders],
               "space": "working", "out_dir": str(out), "reconstructions": files,
               "skipped": run.skipped,
               "diagnostics": {name: {participants[i]: facts for i, facts in per.items()}
                               for name, per in run.diagnostics.items()},
               "noise_level": {"v": run.noise_level, "source": source if method.uses_anchor
                               else None, "estimated_from_residuals": run.estimated_noise_level}}
    out.mkdir(parents=True, exist_ok=True)
    atomic_write(out / "summary.json", json.dumps(summary, indent=2).encode())
    return summary

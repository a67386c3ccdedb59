"""The participant's two actions: its one upload, and (colluder role only) the disclosure.

References: SPEC.md sections 1 and 3; issue 3, items 3-5.
"""

from __future__ import annotations

import io
import logging
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from noisyanchor.common.errors import AlreadyExistsError, NotFoundError
from noisyanchor.common.files import atomic_write
from noisyanchor.common.gdp import anchor_from_seed, gaussian_projection, secret_rng
from noisyanchor.common.splits import split_tags
from noisyanchor.common.wire import bundle_spec
from noisyanchor.participant.anchor import SharedParameters, agree_on_seed, exchange_key_path
from noisyanchor.participant.client import AnalystClient
from noisyanchor.participant.compute import compute_upload
from noisyanchor.participant.config import ParticipantConfig
from noisyanchor.participant.data import LocalData, load_local_data

log = logging.getLogger(__name__)

#: File (in ``state_dir``) of the secrets a colluder keeps.
SECRETS_FILE = "secrets.npz"


@dataclass(frozen=True)
class Sent:
    """Outcome of a sent bundle (what the CLI prints)."""

    participant: str
    kind: str
    receipt: str
    already_committed: bool
    records: int
    bytes: int


def working_data(cfg: ParticipantConfig, x: np.ndarray) -> np.ndarray:
    """``X_i F`` with the public Gaussian ``F`` drawn from ``projection_seed`` (``X_i`` if no
    projection), exactly as the simulator computes it."""
    if cfg.dim is None:
        return x
    f = gaussian_projection(x.shape[1], cfg.dim, np.random.default_rng(cfg.projection_seed))
    return x @ f


def local_data(cfg: ParticipantConfig) -> LocalData:
    """This participant's records, labels and (optional) tags, as its config describes them."""
    return load_local_data(cfg.data, label_column=cfg.label_column, tag_column=cfg.tag_column,
                           label_index=cfg.label_index)


def _tags(cfg: ParticipantConfig, data: LocalData) -> np.ndarray:
    # Tags are not secret; without given tags hold out a stratified 20% test split, drawn from
    # a generator separate from the secret one (so keys do not depend on it).
    if data.tags is not None:
        return data.tags
    rng = np.random.default_rng(None if cfg.seed is None else [cfg.seed, 1])
    return split_tags(data.labels, rng).astype("|i1")


def analyst_client(cfg: ParticipantConfig) -> AnalystClient:
    """A mutual-TLS client to this participant's analyst (use as a context manager)."""
    return AnalystClient(cfg.analyst, cfg.tls, cfg.server_name, cfg.federation_id, cfg.timeout)


def _write_secrets(cfg: ParticipantConfig, arrays: dict[str, np.ndarray]) -> Path:
    # Mode 0600 (atomic_write): the secrets never leave this machine unless the colluder says so.
    cfg.state_dir.mkdir(parents=True, exist_ok=True)
    path = cfg.state_dir / SECRETS_FILE
    buf = io.BytesIO()
    np.savez(buf, **arrays)
    atomic_write(path, buf.getvalue())
    return path


def run_upload(cfg: ParticipantConfig) -> Sent:
    """Load the data, agree on the anchor, compute the upload with the engine, stream it once."""
    data = local_data(cfg)
    x = working_data(cfg, data.x)
    tags = _tags(cfg, data)
    rng = secret_rng(cfg.seed)
    d = x.shape[1]
    r = cfg.anchors or 4 * d
    # Kept until an upload is committed (by this run or an earlier one): after that the
    # agreement cannot be resumed any more, so the key need not stay on disk.
    key_file = exchange_key_path(cfg.state_dir, cfg.federation_id)
    with analyst_client(cfg) as client:
        seed = None
        if cfg.needs_shared_seed:
            seed = agree_on_seed(
                client, participant_id=cfg.id, dealer=cfg.dealer,
                tls_key_pem=cfg.tls.key.read_bytes(), ca_pem=cfg.tls.ca.read_bytes(),
                params=SharedParameters(cfg.method, r, d, cfg.translation_scale),
                key_path=key_file,
                dealer_seed=cfg.anchor_seed)
        upload, state = compute_upload(cfg.method, x, rng, shared_seed=seed, anchors=r,
                                       sigma=cfg.sigma, v=cfg.v,
                                       translation_scale=cfg.translation_scale)
        arrays = {"data": upload.data}
        if upload.anchor is not None:
            arrays["anchor"] = upload.anchor
        arrays |= {"labels": data.labels.astype("<i8"), "tags": tags.astype("|i1")}
        spec = bundle_spec(cfg.federation_id, cfg.method, arrays)
        try:
            receipt = client.send_bundle("upload", spec, arrays)
        except AlreadyExistsError:
            key_file.unlink(missing_ok=True)
            raise
    key_file.unlink(missing_ok=True)
    if cfg.keep_secrets:
        kept = {"rotation": state.key.rotation, "translation": state.key.translation}
        if cfg.method_enum.uses_anchor:
            kept["anchor"] = anchor_from_seed(seed, r, d)
        for name in ("data_noise", "anchor_noise"):
            if getattr(state, name) is not None:
                kept[name] = getattr(state, name)
        _write_secrets(cfg, kept)
    return Sent(cfg.id, "upload", receipt.receipt.hex(), receipt.already_committed, len(x),
                spec.nbytes)


def analyst_status(cfg: ParticipantConfig):
    """The analyst's ``StatusReply`` for this participant's federation."""
    with analyst_client(cfg) as client:
        return client.status()


def run_collude(cfg: ParticipantConfig) -> Sent:
    """Disclose ``X_c``, the secret state and the anchor ``A`` to the analyst (colluder role)."""
    path = cfg.state_dir / SECRETS_FILE
    if not path.is_file():
        raise NotFoundError(f"no kept secrets at {path}: run 'participant upload' with "
                            "keep_secrets = true first")
    with np.load(path, allow_pickle=False) as kept:
        secrets_ = {k: kept[k] for k in kept.files}
    arrays = {"data": working_data(cfg, local_data(cfg).x)} | secrets_
    spec = bundle_spec(cfg.federation_id, cfg.method, arrays)
    with analyst_client(cfg) as client:
        receipt = client.send_bundle("disclosure", spec, arrays)
    return Sent(cfg.id, "disclosure", receipt.receipt.hex(), receipt.already_committed,
                len(arrays["data"]), spec.nbytes)

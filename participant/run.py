"""The participant's two actions: its one upload, and (colluder role only) the disclosure.

References: SPEC.md sections 1 and 3; issue 3, items 3-5.
"""

from __future__ import annotations

import io
import logging
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from noisyanchor.common.errors import AlreadyExistsError, InvalidInputError, NotFoundError
from noisyanchor.common.files import atomic_write
from noisyanchor.common.gdp import anchor_from_seed, gaussian_projection, secret_rng
from noisyanchor.common.schema import RecordSchema, check_declared
from noisyanchor.common.splits import split_tags
from noisyanchor.common.wire import bundle_spec
from noisyanchor.participant.anchor import SharedParameters, agree_on_seed, exchange_key_path
from noisyanchor.participant.client import AnalystClient
from noisyanchor.participant.compute import compute_upload
from noisyanchor.participant.config import ParticipantConfig
from noisyanchor.participant.data import LocalData, load_local_data
from noisyanchor.protos.v1 import analyst_pb2 as pb

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


#: Seconds ``participant status`` retries an unavailable analyst (a question, not a wait).
STATUS_WAIT = 10.0


def analyst_client(cfg: ParticipantConfig, wait: float | None = None) -> AnalystClient:
    """A mutual-TLS client to this participant's analyst (use as a context manager) that
    retries and waits up to ``wait`` seconds (default: the config's)."""
    return AnalystClient(cfg.analyst, cfg.tls, cfg.server_name, cfg.federation_id,
                         cfg.wait_seconds if wait is None else wait)


def _declared(info: pb.FederationInfo) -> dict:
    """The parameters the analyst declares, by the participant config's key names."""
    declared = {"federation_id": info.federation_id, "method": info.method}
    for name in ("anchors", "dim", "sigma", "v", "dealer", "projection_seed",
                 "translation_scale"):
        declared[name] = getattr(info, name) if info.HasField(name) else None
    return declared


def check_fits_federation(cfg: ParticipantConfig, info: pb.FederationInfo, data: LocalData,
                          x: np.ndarray) -> None:
    """Refuse locally, naming both sides, when this participant's config or data do not fit
    what the analyst declares (issue 10, item 2): before any key, seed or upload leaves.

    The working width ``d`` is compared with a declared ``dim``: it is ``h`` with a public
    projection and the data's own width without one.
    """
    if cfg.id not in info.participants:
        raise InvalidInputError(f"participant {cfg.id!r} is not one of federation "
                                f"{info.federation_id!r}'s participants {list(info.participants)}")
    d = x.shape[1]
    own = {"federation_id": cfg.federation_id, "method": cfg.method, "sigma": cfg.sigma,
           "v": cfg.v, "anchors": cfg.anchors or 4 * d, "dim": d, "dealer": cfg.dealer,
           "projection_seed": cfg.projection_seed if cfg.dim is not None else None,
           "translation_scale": cfg.translation_scale}
    declared = _declared(info)
    if declared["anchors"] is None and declared["dim"] is not None:
        declared["anchors"] = 4 * declared["dim"]
    if info.HasField("schema"):
        schema = RecordSchema(info.schema.features, info.schema.dtype,
                              tuple(info.schema.feature_names))
        schema.check(data.x, data.feature_names, who=f"{cfg.id}'s data {cfg.data}",
                     federation=info.federation_id)
    check_declared(declared, own, who=f"{cfg.id}'s config", analyst="the analyst")


def _join(client: AnalystClient, cfg: ParticipantConfig, data: LocalData,
          x: np.ndarray) -> pb.FederationInfo:
    """Read the federation's declaration, check this participant against it (withdrawing
    with the reason when it does not fit), and wait until the federation's deadline."""
    info = client.describe()
    try:
        check_fits_federation(cfg, info, data, x)
    except InvalidInputError as err:
        client.withdraw(str(err))
        raise
    if info.deadline_unix and (cfg.timeout is None
                               or info.deadline_unix < time.time() + cfg.timeout):
        client.wait_until(time.monotonic() + max(0.0, info.deadline_unix - time.time()))
    log.info("%s joined federation %s (%d participants, %s); waiting at most %.0f s for the "
             "others", cfg.id, info.federation_id, len(info.participants), info.method,
             client.timeout)
    return info


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
        _join(client, cfg, data, x)
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
        spec = bundle_spec(cfg.federation_id, cfg.method, arrays, digests=False)
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
    with analyst_client(cfg, min(cfg.wait_seconds, STATUS_WAIT)) as client:
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
    spec = bundle_spec(cfg.federation_id, cfg.method, arrays, digests=False)
    with analyst_client(cfg) as client:
        receipt = client.send_bundle("disclosure", spec, arrays)
    return Sent(cfg.id, "disclosure", receipt.receipt.hex(), receipt.already_committed,
                len(arrays["data"]), spec.nbytes)

"""What an honest site keeps in its state folder so it can map new records as it mapped its
training records, and nothing more: its GDP key ``(O_i, Psi_i)``, the public projection ``F``,
the split tags of its upload and a digest of the records it uploaded (``site-key.bin``). Never
uploaded; mode 0600 in a 0700 folder.

Until its upload is committed a site also keeps the seeds its secret generator and its
train/test split were drawn from (``upload-seed-<federation>.bin``), so a run interrupted
after the analyst committed the upload but before the key was written computes the identical
upload again (the analyst answers it as a repeat) and keeps the key then; the seeds are deleted
once the key is kept, since they would also regenerate the noise, which prediction does not need.

This is not ``keep_secrets``: that is the colluder's role (disclosing everything, noise and
anchor included, for threat-model testing). What a stolen state folder reveals is in
``THREAT_MODEL.md``.

References: SPEC.md section 1 (the key), issue 20 (item 2).
"""

from __future__ import annotations

import hashlib
import secrets
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from noisyanchor.common.errors import IntegrityError, InvalidInputError, PreconditionError
from noisyanchor.common.files import atomic_write, private_dir, read_under
from noisyanchor.common.gdp import GdpKey, gdp_map
from noisyanchor.common.models.container import dump_arrays, load_arrays
from noisyanchor.common.splits import SPLIT_NAMES
from noisyanchor.participant.config import ParticipantConfig

#: The kept key, in ``state_dir``.
SITE_KEY_FILE = "site-key.bin"

#: Format name of the kept key file.
SITE_KEY_FORMAT = "noisyanchor.site-key"

#: Bytes of each seed kept until the upload commits (the secret generator's, the split's).
SEED_BYTES = 32


@dataclass(frozen=True)
class UploadSeeds:
    """Seeds of one upload: the secret generator (key, then noise) and the train/test split,
    each from OS entropy and independent of the other (the split is uploaded in the clear)."""

    secret: int
    split: int


def upload_seed_path(cfg: ParticipantConfig) -> Path:
    """Where the seeds of the pending upload are kept."""
    return cfg.state_dir / f"upload-seed-{cfg.federation_id}.bin"


def upload_seeds(cfg: ParticipantConfig) -> UploadSeeds:
    """The seeds of this site's upload: kept ones (an earlier, interrupted run), else fresh from
    OS entropy, written (0600) before anything derived from them leaves the site."""
    path = upload_seed_path(cfg)
    if path.is_file():
        raw = cfg.read_state(path, 4 * SEED_BYTES)
        if len(raw) != 2 * SEED_BYTES:
            raise InvalidInputError(f"{path} is not a pair of {SEED_BYTES}-byte seeds; remove it "
                                    "only if no upload of this site was committed")
    else:
        private_dir(cfg.state_dir)
        raw = secrets.token_bytes(2 * SEED_BYTES)
        atomic_write(path, raw)
    return UploadSeeds(int.from_bytes(raw[:SEED_BYTES], "little"),
                       int.from_bytes(raw[SEED_BYTES:], "little"))


def records_digest(x: np.ndarray, labels: np.ndarray) -> str:
    """SHA-256 (hex) of the records ``X_i`` (``d_in`` columns, float64) and their labels: what
    ties the kept split to the records it was drawn for."""
    h = hashlib.sha256()
    for arr in (np.ascontiguousarray(x, dtype="<f8"), np.ascontiguousarray(labels, dtype="<i8")):
        h.update(str(arr.shape).encode())
        h.update(arr.tobytes())
    return h.hexdigest()


@dataclass(frozen=True)
class SiteKey:
    """A site's kept map from raw records into its upload's frame: ``x -> x F O_i + Psi_i``.

    Attributes
    ----------
    federation_id, participant, method : str
    key : GdpKey
        ``(O_i, Psi_i)`` (for C-GDP the common key).
    projection : (d_in, h) ndarray or None
        The public ``F`` (None: the records are used as they are, ``d = d_in``).
    d_in : int
        Columns of a record.
    tags : (n_i,) ndarray of int8
        The split tags of the upload (train, validation, test).
    records_sha256 : str
        :func:`records_digest` of the uploaded records.
    feature_names : tuple of str or None
        The uploaded table's column names in order (None: it named none).
    """

    federation_id: str
    participant: str
    method: str
    key: GdpKey
    projection: np.ndarray | None
    d_in: int
    tags: np.ndarray
    records_sha256: str
    feature_names: tuple[str, ...] | None = None

    def __post_init__(self) -> None:
        d = self.key.dim
        if self.key.rotation.shape != (d, d) or self.key.translation.shape != (d,):
            raise InvalidInputError(f"a site key needs O_i (d, d) and Psi_i (d,), got "
                                    f"{self.key.rotation.shape} and "
                                    f"{self.key.translation.shape}")
        if not np.allclose(self.key.rotation.T @ self.key.rotation, np.eye(d), atol=1e-8):
            raise InvalidInputError("the kept O_i is not orthogonal")
        f = self.projection
        if (self.d_in if f is None else f.shape[1]) != d or (f is not None and
                                                             f.shape[0] != self.d_in):
            shape = "(none)" if f is None else f.shape
            raise InvalidInputError(f"the kept projection F {shape} does not take "
                                    f"{self.d_in} columns to the key's width {d}")
        if self.tags.ndim != 1 or not np.isin(self.tags, list(SPLIT_NAMES)).all():
            raise InvalidInputError(f"the kept split tags must be in {sorted(SPLIT_NAMES)}")

    def working(self, x: np.ndarray) -> np.ndarray:
        """``x F`` (``x`` without a projection) for raw records ``x`` (``n x d_in``)."""
        x = np.asarray(x, dtype=np.float64)
        if x.ndim != 2 or x.shape[1] != self.d_in:
            raise InvalidInputError(f"records for {self.participant}'s key have {self.d_in} "
                                    f"columns, got shape {x.shape}")
        return x if self.projection is None else x @ self.projection

    def encode(self, x: np.ndarray) -> np.ndarray:
        """``M_i(x F) = x F O_i + 1 Psi_i^T``: raw records in the frame of this site's upload."""
        return gdp_map(self.working(x), self.key)

    def to_bytes(self) -> bytes:
        """The key file (:mod:`common.models.container`)."""
        arrays = {"rotation": self.key.rotation, "translation": self.key.translation,
                  "tags": self.tags.astype("|i1")}
        if self.projection is not None:
            arrays["projection"] = self.projection
        return dump_arrays(SITE_KEY_FORMAT, {
            "federation_id": self.federation_id, "participant": self.participant,
            "method": self.method, "d_in": self.d_in, "records_sha256": self.records_sha256,
            "feature_names": None if self.feature_names is None else list(self.feature_names)},
            arrays)


def keep_site_key(cfg: ParticipantConfig, site_key: SiteKey) -> Path:
    """Write the kept key (0600, atomically) into the state folder (0700)."""
    private_dir(cfg.state_dir)
    path = cfg.state_dir / SITE_KEY_FILE
    atomic_write(path, site_key.to_bytes())
    return path


def digest_path(path: Path) -> Path:
    """Where the SHA-256 of the kept file ``path`` is written (``site-model.bin`` ->
    ``site-model.sha256``)."""
    return path.with_suffix(".sha256")


def keep_with_digest(path: Path, raw: bytes) -> None:
    """Write ``raw`` to ``path`` and its whole SHA-256 beside it (both 0600, atomically)."""
    private_dir(path.parent)
    atomic_write(path, raw)
    atomic_write(digest_path(path), hashlib.sha256(raw).hexdigest().encode())


def check_kept_digest(path: Path, raw: bytes, remedy: str, *, since: str = "kept") -> None:
    """Refuse the kept file's bytes ``raw`` unless they match the digest written beside it when
    it was kept (an edit of its JSON header, which its own per-array digests do not cover);
    a file kept before digests were written gets its digest now. ``remedy`` says what to do,
    ``since`` when the file was written ("kept", "fetched")."""
    kept = digest_path(path)
    actual = hashlib.sha256(raw).hexdigest()
    if not kept.is_file():
        atomic_write(kept, actual.encode())
    elif read_under(path.parent, kept, 256).decode(errors="replace").strip() != actual:
        raise IntegrityError(f"{path} was changed since it was {since} (its SHA-256 is not the "
                             f"one in {kept.name}); {remedy}")


def load_site_key(cfg: ParticipantConfig) -> SiteKey:
    """This site's kept key, refused unless it is this federation's and this participant's."""
    path = cfg.state_dir / SITE_KEY_FILE
    if not path.is_file():
        raise PreconditionError(
            f"no kept key at {path}: a site keeps its key when its upload commits "
            f"('noisyanchor participant upload --config ...' with this config and state_dir); "
            "without it new records cannot be mapped as the training records were")
    loaded = load_arrays(cfg.read_state(path), SITE_KEY_FORMAT, what=str(path))
    meta, arrays = loaded.meta, loaded.arrays
    expected = {"federation_id", "participant", "method", "d_in", "records_sha256",
                "feature_names"}
    names = {"rotation", "translation", "tags"}
    if set(meta) != expected or not names <= set(arrays) <= names | {"projection"}:
        raise InvalidInputError(f"{path}: not a site key (entries {sorted(meta)}, arrays "
                                f"{sorted(arrays)})")
    if (meta["federation_id"], meta["participant"]) != (cfg.federation_id, cfg.id):
        raise PreconditionError(f"{path} is the key of {meta['participant']!r} in federation "
                                f"{meta['federation_id']!r}, not of {cfg.id!r} in "
                                f"{cfg.federation_id!r}")
    names = meta["feature_names"]
    try:
        return SiteKey(meta["federation_id"], meta["participant"], meta["method"],
                       GdpKey(arrays["rotation"], arrays["translation"]),
                       arrays.get("projection"), int(meta["d_in"]), arrays["tags"],
                       str(meta["records_sha256"]),
                       None if names is None else tuple(str(n) for n in names))
    except InvalidInputError as err:
        raise InvalidInputError(f"{path}: {err}") from None

"""A site joining a federation, free of any transport (issue 32, item 2): its records read
with the federation's schema and both checked against the analyst's declaration
(:class:`common.protocol_messages.FederationInfo`) before any key, seed or upload leaves; the
schema kept for later uses of the records.

A transport gives the declaration as the dataclass (gRPC: ``Describe`` converted with
:func:`common.wire_messages.federation_info_of`; Flower: the ``hello`` message's).

References: SPEC.md section 3; issue 10, item 2; issue 32.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import numpy as np

from noisyanchor.common.errors import InvalidInputError
from noisyanchor.common.files import atomic_write, private_dir
from noisyanchor.common.gdp import gaussian_projection
from noisyanchor.common.protocol_messages import FederationInfo
from noisyanchor.common.schema import RecordSchema, check_declared
from noisyanchor.common.validation import check_projection_dim
from noisyanchor.participant.config import ParticipantConfig
from noisyanchor.participant.data import LocalData, load_local_data

#: Parameters of the declaration compared with the site's config (by its key names).
_DECLARED = ("anchors", "dim", "sigma", "v", "dealer", "projection_seed", "translation_scale")


class SchemaCodec(Protocol):
    """How a kept schema is encoded (the protobuf ``RecordSchema`` so far:
    :data:`common.wire_messages.PROTO_CODEC`)."""

    def schema_bytes(self, schema: RecordSchema) -> bytes:
        """The canonical bytes of ``schema``."""
        ...


def public_projection(cfg: ParticipantConfig, d_in: int) -> np.ndarray | None:
    """The public Gaussian ``F`` (``d_in x h``) drawn from ``projection_seed``, exactly as the
    simulator draws it; None without a projection. Refused when ``h > d_in`` (naming the key:
    an analyst without a ``[schema]`` cannot check it)."""
    if cfg.dim is None:
        return None
    try:
        check_projection_dim(cfg.dim, d_in, f"the columns of {cfg.data}")
    except InvalidInputError as err:
        raise InvalidInputError(f"[protocol] dim: {err}") from None
    return gaussian_projection(d_in, cfg.dim, np.random.default_rng(cfg.projection_seed))


def working_data(cfg: ParticipantConfig, x: np.ndarray) -> np.ndarray:
    """``X_i F`` (``X_i`` if no projection)."""
    f = public_projection(cfg, x.shape[1])
    return x if f is None else x @ f


def read_records(cfg: ParticipantConfig, schema: RecordSchema | None, *,
                 require_labels: bool = True) -> LocalData:
    """This participant's records read with exactly ``schema`` (None: no schema declared)."""
    return load_local_data(cfg.data, schema=schema, label_column=cfg.label_column,
                           tag_column=cfg.tag_column, label_index=cfg.label_index,
                           require_labels=require_labels, delimiter=cfg.delimiter,
                           decimal=cfg.decimal)


def schema_path(cfg: ParticipantConfig) -> Path:
    """Where the federation's schema is kept once this site joined (``state_dir``)."""
    return cfg.state_dir / f"schema-{cfg.federation_id}.pb"


def keep_schema(cfg: ParticipantConfig, info: FederationInfo, codec: SchemaCodec) -> None:
    """Keep the schema the analyst served, encoded by ``codec``, so that later uses of this
    site's records (disclosure, release queries, prediction) preprocess them exactly as the
    upload did."""
    if info.schema is not None:
        private_dir(cfg.state_dir)
        atomic_write(schema_path(cfg), codec.schema_bytes(info.schema))
    else:  # a schema kept from an earlier declaration of this federation no longer applies
        schema_path(cfg).unlink(missing_ok=True)


def served_schema(cfg: ParticipantConfig, info: FederationInfo) -> RecordSchema | None:
    """The schema the analyst declares, checked against the preprocessing digest this site's
    kit pins (``[protocol] preprocessing_sha256``), if any."""
    schema = info.schema
    digest = schema.preprocessing_sha256.hex() if schema is not None else ""
    if cfg.preprocessing_sha256 is not None and digest != cfg.preprocessing_sha256:
        raise InvalidInputError(
            f"the analyst serves a preprocessing (digest {digest[:16] or 'none'}) other than "
            f"the one {cfg.id}'s config agreed to ([protocol] preprocessing_sha256 = "
            f"{cfg.preprocessing_sha256[:16]}...): the federation's [schema] changed after "
            "this kit was provisioned; ask the operator for the current kit")
    return schema


def _declared(info: FederationInfo) -> dict:
    """The parameters the analyst declares, by the participant config's key names."""
    return {"federation_id": info.federation_id, "method": info.method} | {
        name: getattr(info, name) for name in _DECLARED}


def check_member(cfg: ParticipantConfig, info: FederationInfo) -> None:
    """Refuse a participant the federation does not name."""
    if cfg.id not in info.participants:
        raise InvalidInputError(f"participant {cfg.id!r} is not one of federation "
                                f"{info.federation_id!r}'s participants {list(info.participants)}")


def check_fits_federation(cfg: ParticipantConfig, info: FederationInfo, data: LocalData,
                          x: np.ndarray) -> None:
    """Refuse locally, naming both sides, when this participant's config or data do not fit
    what the analyst declares (issue 10, item 2): before any key, seed or upload leaves.

    The working width ``d`` is compared with a declared ``dim``: it is ``h`` with a public
    projection and the data's own width without one.
    """
    check_member(cfg, info)
    d = x.shape[1]
    own = {"federation_id": cfg.federation_id, "method": cfg.method, "sigma": cfg.sigma,
           "v": cfg.v, "anchors": cfg.anchors or 4 * d, "dim": d, "dealer": cfg.dealer,
           "projection_seed": cfg.projection_seed if cfg.dim is not None else None,
           "translation_scale": cfg.translation_scale}
    declared = _declared(info)
    if declared["anchors"] is None and declared["dim"] is not None:
        declared["anchors"] = 4 * declared["dim"]
    if info.schema is not None:
        info.schema.check(data.x, data.feature_names, who=f"{cfg.id}'s data {cfg.data.name}",
                          federation=info.federation_id)
    check_declared(declared, own, who=f"{cfg.id}'s config", analyst="the analyst")


@dataclass(frozen=True)
class Joined:
    """A participant that joined: the declaration, its records as the federation's schema
    encodes them, the working data ``X_i F`` (``x``, ``n_i x d``) and the preprocessing
    digest."""

    info: FederationInfo
    data: LocalData
    x: np.ndarray
    preprocessing_sha256: bytes


def join(cfg: ParticipantConfig, info: FederationInfo, early: LocalData | None = None
         ) -> Joined:
    """This site's records read with the federation's schema (or ``early``, read before
    anything connected with the kit's copy of the same schema) and checked, with its config,
    against the declaration ``info``.

    Raises
    ------
    InvalidInputError
        The site is not a member, its kit pins another preprocessing, its records or config do
        not fit the declaration (what the transport reports as this site's withdrawal).
    """
    check_member(cfg, info)
    schema = served_schema(cfg, info)
    same = schema is not None and schema.tabular == cfg.schema
    data = early if early is not None and same else read_records(cfg, schema)
    x = working_data(cfg, data.x)
    check_fits_federation(cfg, info, data, x)
    return Joined(info, data, x, schema.preprocessing_sha256 if schema is not None else b"")

"""The protocol's messages on the gRPC wire: protobuf to and from the dataclasses of
:mod:`common.protocol_messages` and :mod:`common.schema`, and :data:`PROTO_CODEC`, the
encoding of every analyst store so far (:class:`analyst.core.codec.StoreCodec`).

The one place, with :mod:`common.wire` (bundles), that knows the generated code: the protocol
core above it never imports it.

References: ``protos/v1/analyst.proto``; issue 32.
"""

from __future__ import annotations

import json
from typing import Any

from noisyanchor.common.errors import InvalidInputError
from noisyanchor.common.protocol_messages import (
    AnchorSecret,
    Commitment,
    FederationInfo,
    SealedShare,
    SignedKey,
    Withdrawal,
)
from noisyanchor.common.schema import RecordSchema
from noisyanchor.common.tabular.columns import (
    COLUMN_TYPES,
    MAX_SCHEMA_COLUMNS,
    BooleanColumn,
    CategoricalColumn,
    NumericColumn,
    check_count_limit,
)
from noisyanchor.common.tabular.schema import TabularSchema
from noisyanchor.common.wire import ProtoHeaders
from noisyanchor.protos.v1 import analyst_pb2 as pb

#: Optional fields of ``FederationInfo`` (unset when the analyst config leaves them open).
_OPTIONAL_INFO = ("anchors", "dim", "sigma", "v", "dealer", "projection_seed",
                  "translation_scale", "model")


# -- record schema ----------------------------------------------------------------------------
def schema_message(schema: RecordSchema) -> pb.RecordSchema:
    """The ``RecordSchema`` message ``Describe`` serves."""
    if schema.tabular is not None:
        return tabular_message(schema.tabular)
    return pb.RecordSchema(features=schema.features, dtype=schema.dtype,
                           feature_names=schema.feature_names)


def schema_of(msg: pb.RecordSchema) -> RecordSchema:
    """The schema a ``RecordSchema`` message declares (typed when it has columns)."""
    tabular = tabular_of(msg)
    if tabular is not None:
        schema = RecordSchema.typed(tabular)
        if msg.features != schema.features:
            raise InvalidInputError(f"the analyst declares {msg.features} features but its "
                                    f"typed columns encode to {schema.features}")
        return schema
    return RecordSchema(msg.features, msg.dtype, tuple(msg.feature_names))


def tabular_message(schema: TabularSchema) -> pb.RecordSchema:
    """The ``RecordSchema`` message of typed columns participants read from ``Describe``."""
    msg = pb.RecordSchema(features=schema.width, dtype="float64",
                          feature_names=schema.encoded_names,
                          label=schema.label or "", label_classes=schema.label_classes,
                          missing_tokens=schema.missing_tokens,
                          preprocessing_sha256=schema.digest())
    for c in schema.columns:
        spec = msg.columns.add(name=c.name, type=c.kind, missing=c.missing, unit=c.unit)
        if c.fill is not None:
            spec.fill = json.dumps(c.fill)
        if isinstance(c, NumericColumn):
            for key in ("center", "scale", "min", "max"):
                if getattr(c, key) is not None:
                    setattr(spec, key, getattr(c, key))
        elif isinstance(c, CategoricalColumn):
            spec.categories.extend(c.categories)
            spec.unknown = c.unknown
        elif isinstance(c, BooleanColumn):
            spec.true_tokens.extend(c.true)
            spec.false_tokens.extend(c.false)
    return msg


def tabular_of(msg: pb.RecordSchema) -> TabularSchema | None:
    """The typed schema a ``RecordSchema`` message declares (None: a plain ``features = N``
    schema), checked against the digest the analyst computed."""
    if not msg.columns:
        return None
    check_count_limit(len(msg.columns), MAX_SCHEMA_COLUMNS,
                      f"the analyst's schema declares {len(msg.columns):,} columns")
    columns = []
    for spec in msg.columns:
        kind = COLUMN_TYPES.get(spec.type)
        if kind is None:
            raise InvalidInputError(f"the analyst declares column {spec.name!r} of unknown "
                                    f"type {spec.type!r} (a newer version?)")
        args: dict[str, Any] = {"name": spec.name, "missing": spec.missing or "refuse",
                                "fill": json.loads(spec.fill) if spec.fill else None,
                                "unit": spec.unit}
        if kind is NumericColumn:
            args |= {k: getattr(spec, k) if spec.HasField(k) else None
                     for k in ("center", "scale", "min", "max")}
        elif kind is CategoricalColumn:
            args |= {"categories": tuple(spec.categories), "unknown": spec.unknown}
        else:
            args |= {"true": tuple(spec.true_tokens), "false": tuple(spec.false_tokens)}
        columns.append(kind(**args))
    schema = TabularSchema(tuple(columns), msg.label or None, tuple(msg.label_classes),
                           tuple(msg.missing_tokens))
    if msg.preprocessing_sha256 and msg.preprocessing_sha256 != schema.digest():
        raise InvalidInputError("the schema the analyst serves does not match the "
                                "preprocessing digest it declares (a different version of "
                                "noisyanchor at the analyst?)")
    return schema


# -- federation declaration --------------------------------------------------------------------
def federation_info_message(info: FederationInfo) -> pb.FederationInfo:
    """The ``FederationInfo`` message of ``info`` (optional fields set only when declared)."""
    msg = pb.FederationInfo(federation_id=info.federation_id, participants=info.participants,
                            method=info.method, reference=info.reference,
                            deadline_unix=info.deadline_unix)
    for name in _OPTIONAL_INFO:
        if getattr(info, name) is not None:
            setattr(msg, name, getattr(info, name))
    if info.schema is not None:
        msg.schema.CopyFrom(schema_message(info.schema))
    if info.report_projection_cost:
        msg.report_projection_cost = True
    return msg


def federation_info_of(msg: pb.FederationInfo) -> FederationInfo:
    """The declaration a ``FederationInfo`` message carries (its schema checked:
    :func:`schema_of`)."""
    return FederationInfo(
        federation_id=msg.federation_id, participants=tuple(msg.participants),
        method=msg.method, reference=msg.reference, deadline_unix=msg.deadline_unix,
        schema=schema_of(msg.schema) if msg.HasField("schema") else None,
        report_projection_cost=msg.report_projection_cost,
        **{name: getattr(msg, name) if msg.HasField(name) else None for name in _OPTIONAL_INFO})


# -- relay objects -------------------------------------------------------------------------------
def key_message(key: SignedKey) -> pb.SignedKey:
    """The ``SignedKey`` message of ``key``."""
    return pb.SignedKey(participant_id=key.participant_id, public_key=key.public_key,
                        signature=key.signature, certificate_pem=key.certificate_pem,
                        bound_to=key.bound_to)


def key_of(msg: pb.SignedKey) -> SignedKey:
    """The signed key a ``SignedKey`` message carries."""
    return SignedKey(msg.participant_id, bytes(msg.public_key), bytes(msg.signature),
                     bytes(msg.certificate_pem), bytes(msg.bound_to))


def share_message(share: SealedShare) -> pb.SealedShare:
    """The ``SealedShare`` message of ``share``."""
    return pb.SealedShare(dealer_id=share.dealer_id, recipient_id=share.recipient_id,
                          nonce=share.nonce, ciphertext=share.ciphertext,
                          signature=share.signature)


def share_of(msg: pb.SealedShare) -> SealedShare:
    """The sealed share a ``SealedShare`` message carries."""
    return SealedShare(msg.dealer_id, msg.recipient_id, bytes(msg.nonce),
                       bytes(msg.ciphertext), bytes(msg.signature))


def commitment_message(commitment: Commitment) -> pb.Commitment:
    """The ``Commitment`` message of ``commitment``."""
    return pb.Commitment(participant_id=commitment.participant_id, digest=commitment.digest,
                         signature=commitment.signature,
                         certificate_pem=commitment.certificate_pem)


def commitment_of(msg: pb.Commitment) -> Commitment:
    """The commitment a ``Commitment`` message carries."""
    return Commitment(msg.participant_id, bytes(msg.digest), bytes(msg.signature),
                      bytes(msg.certificate_pem))


def withdrawal_message(withdrawal: Withdrawal) -> pb.Withdrawal:
    """The ``Withdrawal`` message of ``withdrawal``."""
    return pb.Withdrawal(participant_id=withdrawal.participant_id, reason=withdrawal.reason)


class ProtoCodec(ProtoHeaders):
    """The protobuf encoding of everything the cores keep or seal: the analyst's
    :class:`analyst.core.codec.StoreCodec` (bundle headers, :class:`common.wire.ProtoHeaders`,
    and relay objects) and the site's :class:`participant.core.agreement.SecretCodec` (a sealed
    share's plaintext) and :class:`participant.core.join.SchemaCodec` (its kept schema), each
    serialized deterministically."""

    def key_bytes(self, key: SignedKey) -> bytes:
        """The canonical bytes of a signed key."""
        return key_message(key).SerializeToString(deterministic=True)

    def key_of(self, raw: bytes) -> SignedKey:
        """The signed key ``raw`` encodes."""
        return key_of(pb.SignedKey.FromString(raw))

    def share_bytes(self, share: SealedShare) -> bytes:
        """The canonical bytes of a sealed share."""
        return share_message(share).SerializeToString(deterministic=True)

    def share_of(self, raw: bytes) -> SealedShare:
        """The sealed share ``raw`` encodes."""
        return share_of(pb.SealedShare.FromString(raw))

    def schema_bytes(self, schema: RecordSchema) -> bytes:
        """The canonical bytes of a record schema (what a site keeps once it joined)."""
        return schema_message(schema).SerializeToString(deterministic=True)

    def secret_bytes(self, secret: AnchorSecret) -> bytes:
        """The canonical bytes of a sealed share's plaintext (``AnchorSecret``)."""
        return pb.AnchorSecret(
            seed=secret.seed, method=secret.method, anchors=secret.anchors, dim=secret.dim,
            translation_scale=secret.translation_scale, sealed_to=secret.sealed_to,
        ).SerializeToString(deterministic=True)

    def secret_of(self, raw: bytes) -> AnchorSecret:
        """The plaintext ``raw`` of an opened share encodes."""
        msg = pb.AnchorSecret.FromString(raw)
        return AnchorSecret(bytes(msg.seed), msg.method, msg.anchors, msg.dim,
                            msg.translation_scale, dict(msg.sealed_to))


#: The codec of the gRPC path (and of every store it wrote).
PROTO_CODEC = ProtoCodec()

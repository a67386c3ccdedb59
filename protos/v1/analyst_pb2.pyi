from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class ArrayHeader(_message.Message):
    __slots__ = ("name", "dtype", "shape", "nbytes", "sha256")
    NAME_FIELD_NUMBER: _ClassVar[int]
    DTYPE_FIELD_NUMBER: _ClassVar[int]
    SHAPE_FIELD_NUMBER: _ClassVar[int]
    NBYTES_FIELD_NUMBER: _ClassVar[int]
    SHA256_FIELD_NUMBER: _ClassVar[int]
    name: str
    dtype: str
    shape: _containers.RepeatedScalarFieldContainer[int]
    nbytes: int
    sha256: bytes
    def __init__(self, name: _Optional[str] = ..., dtype: _Optional[str] = ..., shape: _Optional[_Iterable[int]] = ..., nbytes: _Optional[int] = ..., sha256: _Optional[bytes] = ...) -> None: ...

class BundleHeader(_message.Message):
    __slots__ = ("federation_id", "method", "arrays", "preprocessing_sha256", "projection_cost", "signature")
    FEDERATION_ID_FIELD_NUMBER: _ClassVar[int]
    METHOD_FIELD_NUMBER: _ClassVar[int]
    ARRAYS_FIELD_NUMBER: _ClassVar[int]
    PREPROCESSING_SHA256_FIELD_NUMBER: _ClassVar[int]
    PROJECTION_COST_FIELD_NUMBER: _ClassVar[int]
    SIGNATURE_FIELD_NUMBER: _ClassVar[int]
    federation_id: str
    method: str
    arrays: _containers.RepeatedCompositeFieldContainer[ArrayHeader]
    preprocessing_sha256: bytes
    projection_cost: float
    signature: bytes
    def __init__(self, federation_id: _Optional[str] = ..., method: _Optional[str] = ..., arrays: _Optional[_Iterable[_Union[ArrayHeader, _Mapping]]] = ..., preprocessing_sha256: _Optional[bytes] = ..., projection_cost: _Optional[float] = ..., signature: _Optional[bytes] = ...) -> None: ...

class BundleTrailer(_message.Message):
    __slots__ = ("sha256", "signature")
    SHA256_FIELD_NUMBER: _ClassVar[int]
    SIGNATURE_FIELD_NUMBER: _ClassVar[int]
    sha256: _containers.RepeatedScalarFieldContainer[bytes]
    signature: bytes
    def __init__(self, sha256: _Optional[_Iterable[bytes]] = ..., signature: _Optional[bytes] = ...) -> None: ...

class UploadRequest(_message.Message):
    __slots__ = ("header", "chunk", "trailer")
    HEADER_FIELD_NUMBER: _ClassVar[int]
    CHUNK_FIELD_NUMBER: _ClassVar[int]
    TRAILER_FIELD_NUMBER: _ClassVar[int]
    header: BundleHeader
    chunk: bytes
    trailer: BundleTrailer
    def __init__(self, header: _Optional[_Union[BundleHeader, _Mapping]] = ..., chunk: _Optional[bytes] = ..., trailer: _Optional[_Union[BundleTrailer, _Mapping]] = ...) -> None: ...

class Receipt(_message.Message):
    __slots__ = ("participant_id", "receipt", "already_committed")
    PARTICIPANT_ID_FIELD_NUMBER: _ClassVar[int]
    RECEIPT_FIELD_NUMBER: _ClassVar[int]
    ALREADY_COMMITTED_FIELD_NUMBER: _ClassVar[int]
    participant_id: str
    receipt: bytes
    already_committed: bool
    def __init__(self, participant_id: _Optional[str] = ..., receipt: _Optional[bytes] = ..., already_committed: bool = ...) -> None: ...

class StatusRequest(_message.Message):
    __slots__ = ("federation_id", "rejoin")
    FEDERATION_ID_FIELD_NUMBER: _ClassVar[int]
    REJOIN_FIELD_NUMBER: _ClassVar[int]
    federation_id: str
    rejoin: bool
    def __init__(self, federation_id: _Optional[str] = ..., rejoin: bool = ...) -> None: ...

class StatusReply(_message.Message):
    __slots__ = ("federation_id", "state", "expected", "committed", "disclosed", "error", "result_json", "withdrawn", "deadline_unix")
    FEDERATION_ID_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    EXPECTED_FIELD_NUMBER: _ClassVar[int]
    COMMITTED_FIELD_NUMBER: _ClassVar[int]
    DISCLOSED_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    RESULT_JSON_FIELD_NUMBER: _ClassVar[int]
    WITHDRAWN_FIELD_NUMBER: _ClassVar[int]
    DEADLINE_UNIX_FIELD_NUMBER: _ClassVar[int]
    federation_id: str
    state: str
    expected: _containers.RepeatedScalarFieldContainer[str]
    committed: _containers.RepeatedScalarFieldContainer[str]
    disclosed: _containers.RepeatedScalarFieldContainer[str]
    error: str
    result_json: str
    withdrawn: _containers.RepeatedCompositeFieldContainer[Withdrawal]
    deadline_unix: float
    def __init__(self, federation_id: _Optional[str] = ..., state: _Optional[str] = ..., expected: _Optional[_Iterable[str]] = ..., committed: _Optional[_Iterable[str]] = ..., disclosed: _Optional[_Iterable[str]] = ..., error: _Optional[str] = ..., result_json: _Optional[str] = ..., withdrawn: _Optional[_Iterable[_Union[Withdrawal, _Mapping]]] = ..., deadline_unix: _Optional[float] = ...) -> None: ...

class Withdrawal(_message.Message):
    __slots__ = ("participant_id", "reason")
    PARTICIPANT_ID_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    participant_id: str
    reason: str
    def __init__(self, participant_id: _Optional[str] = ..., reason: _Optional[str] = ...) -> None: ...

class WithdrawRequest(_message.Message):
    __slots__ = ("federation_id", "reason")
    FEDERATION_ID_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    federation_id: str
    reason: str
    def __init__(self, federation_id: _Optional[str] = ..., reason: _Optional[str] = ...) -> None: ...

class WithdrawReply(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class RecordSchema(_message.Message):
    __slots__ = ("features", "dtype", "feature_names", "columns", "label", "label_classes", "missing_tokens", "preprocessing_sha256")
    FEATURES_FIELD_NUMBER: _ClassVar[int]
    DTYPE_FIELD_NUMBER: _ClassVar[int]
    FEATURE_NAMES_FIELD_NUMBER: _ClassVar[int]
    COLUMNS_FIELD_NUMBER: _ClassVar[int]
    LABEL_FIELD_NUMBER: _ClassVar[int]
    LABEL_CLASSES_FIELD_NUMBER: _ClassVar[int]
    MISSING_TOKENS_FIELD_NUMBER: _ClassVar[int]
    PREPROCESSING_SHA256_FIELD_NUMBER: _ClassVar[int]
    features: int
    dtype: str
    feature_names: _containers.RepeatedScalarFieldContainer[str]
    columns: _containers.RepeatedCompositeFieldContainer[ColumnSpec]
    label: str
    label_classes: _containers.RepeatedScalarFieldContainer[str]
    missing_tokens: _containers.RepeatedScalarFieldContainer[str]
    preprocessing_sha256: bytes
    def __init__(self, features: _Optional[int] = ..., dtype: _Optional[str] = ..., feature_names: _Optional[_Iterable[str]] = ..., columns: _Optional[_Iterable[_Union[ColumnSpec, _Mapping]]] = ..., label: _Optional[str] = ..., label_classes: _Optional[_Iterable[str]] = ..., missing_tokens: _Optional[_Iterable[str]] = ..., preprocessing_sha256: _Optional[bytes] = ...) -> None: ...

class ColumnSpec(_message.Message):
    __slots__ = ("name", "type", "center", "scale", "min", "max", "categories", "unknown", "missing", "fill", "unit", "true_tokens", "false_tokens")
    NAME_FIELD_NUMBER: _ClassVar[int]
    TYPE_FIELD_NUMBER: _ClassVar[int]
    CENTER_FIELD_NUMBER: _ClassVar[int]
    SCALE_FIELD_NUMBER: _ClassVar[int]
    MIN_FIELD_NUMBER: _ClassVar[int]
    MAX_FIELD_NUMBER: _ClassVar[int]
    CATEGORIES_FIELD_NUMBER: _ClassVar[int]
    UNKNOWN_FIELD_NUMBER: _ClassVar[int]
    MISSING_FIELD_NUMBER: _ClassVar[int]
    FILL_FIELD_NUMBER: _ClassVar[int]
    UNIT_FIELD_NUMBER: _ClassVar[int]
    TRUE_TOKENS_FIELD_NUMBER: _ClassVar[int]
    FALSE_TOKENS_FIELD_NUMBER: _ClassVar[int]
    name: str
    type: str
    center: float
    scale: float
    min: float
    max: float
    categories: _containers.RepeatedScalarFieldContainer[str]
    unknown: str
    missing: str
    fill: str
    unit: str
    true_tokens: _containers.RepeatedScalarFieldContainer[str]
    false_tokens: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, name: _Optional[str] = ..., type: _Optional[str] = ..., center: _Optional[float] = ..., scale: _Optional[float] = ..., min: _Optional[float] = ..., max: _Optional[float] = ..., categories: _Optional[_Iterable[str]] = ..., unknown: _Optional[str] = ..., missing: _Optional[str] = ..., fill: _Optional[str] = ..., unit: _Optional[str] = ..., true_tokens: _Optional[_Iterable[str]] = ..., false_tokens: _Optional[_Iterable[str]] = ...) -> None: ...

class DescribeRequest(_message.Message):
    __slots__ = ("federation_id",)
    FEDERATION_ID_FIELD_NUMBER: _ClassVar[int]
    federation_id: str
    def __init__(self, federation_id: _Optional[str] = ...) -> None: ...

class FederationInfo(_message.Message):
    __slots__ = ("federation_id", "participants", "method", "anchors", "dim", "sigma", "v", "reference", "schema", "deadline_unix", "dealer", "projection_seed", "translation_scale", "model", "report_projection_cost")
    FEDERATION_ID_FIELD_NUMBER: _ClassVar[int]
    PARTICIPANTS_FIELD_NUMBER: _ClassVar[int]
    METHOD_FIELD_NUMBER: _ClassVar[int]
    ANCHORS_FIELD_NUMBER: _ClassVar[int]
    DIM_FIELD_NUMBER: _ClassVar[int]
    SIGMA_FIELD_NUMBER: _ClassVar[int]
    V_FIELD_NUMBER: _ClassVar[int]
    REFERENCE_FIELD_NUMBER: _ClassVar[int]
    SCHEMA_FIELD_NUMBER: _ClassVar[int]
    DEADLINE_UNIX_FIELD_NUMBER: _ClassVar[int]
    DEALER_FIELD_NUMBER: _ClassVar[int]
    PROJECTION_SEED_FIELD_NUMBER: _ClassVar[int]
    TRANSLATION_SCALE_FIELD_NUMBER: _ClassVar[int]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    REPORT_PROJECTION_COST_FIELD_NUMBER: _ClassVar[int]
    federation_id: str
    participants: _containers.RepeatedScalarFieldContainer[str]
    method: str
    anchors: int
    dim: int
    sigma: float
    v: float
    reference: str
    schema: RecordSchema
    deadline_unix: float
    dealer: str
    projection_seed: int
    translation_scale: float
    model: str
    report_projection_cost: bool
    def __init__(self, federation_id: _Optional[str] = ..., participants: _Optional[_Iterable[str]] = ..., method: _Optional[str] = ..., anchors: _Optional[int] = ..., dim: _Optional[int] = ..., sigma: _Optional[float] = ..., v: _Optional[float] = ..., reference: _Optional[str] = ..., schema: _Optional[_Union[RecordSchema, _Mapping]] = ..., deadline_unix: _Optional[float] = ..., dealer: _Optional[str] = ..., projection_seed: _Optional[int] = ..., translation_scale: _Optional[float] = ..., model: _Optional[str] = ..., report_projection_cost: bool = ...) -> None: ...

class SignedKey(_message.Message):
    __slots__ = ("participant_id", "public_key", "signature", "certificate_pem", "bound_to")
    PARTICIPANT_ID_FIELD_NUMBER: _ClassVar[int]
    PUBLIC_KEY_FIELD_NUMBER: _ClassVar[int]
    SIGNATURE_FIELD_NUMBER: _ClassVar[int]
    CERTIFICATE_PEM_FIELD_NUMBER: _ClassVar[int]
    BOUND_TO_FIELD_NUMBER: _ClassVar[int]
    participant_id: str
    public_key: bytes
    signature: bytes
    certificate_pem: bytes
    bound_to: bytes
    def __init__(self, participant_id: _Optional[str] = ..., public_key: _Optional[bytes] = ..., signature: _Optional[bytes] = ..., certificate_pem: _Optional[bytes] = ..., bound_to: _Optional[bytes] = ...) -> None: ...

class PublishKeyRequest(_message.Message):
    __slots__ = ("federation_id", "public_key", "signature", "bound_to")
    FEDERATION_ID_FIELD_NUMBER: _ClassVar[int]
    PUBLIC_KEY_FIELD_NUMBER: _ClassVar[int]
    SIGNATURE_FIELD_NUMBER: _ClassVar[int]
    BOUND_TO_FIELD_NUMBER: _ClassVar[int]
    federation_id: str
    public_key: bytes
    signature: bytes
    bound_to: bytes
    def __init__(self, federation_id: _Optional[str] = ..., public_key: _Optional[bytes] = ..., signature: _Optional[bytes] = ..., bound_to: _Optional[bytes] = ...) -> None: ...

class PublishKeyReply(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ListKeysRequest(_message.Message):
    __slots__ = ("federation_id",)
    FEDERATION_ID_FIELD_NUMBER: _ClassVar[int]
    federation_id: str
    def __init__(self, federation_id: _Optional[str] = ...) -> None: ...

class ListKeysReply(_message.Message):
    __slots__ = ("expected", "keys")
    EXPECTED_FIELD_NUMBER: _ClassVar[int]
    KEYS_FIELD_NUMBER: _ClassVar[int]
    expected: _containers.RepeatedScalarFieldContainer[str]
    keys: _containers.RepeatedCompositeFieldContainer[SignedKey]
    def __init__(self, expected: _Optional[_Iterable[str]] = ..., keys: _Optional[_Iterable[_Union[SignedKey, _Mapping]]] = ...) -> None: ...

class SealedShare(_message.Message):
    __slots__ = ("dealer_id", "recipient_id", "nonce", "ciphertext", "signature")
    DEALER_ID_FIELD_NUMBER: _ClassVar[int]
    RECIPIENT_ID_FIELD_NUMBER: _ClassVar[int]
    NONCE_FIELD_NUMBER: _ClassVar[int]
    CIPHERTEXT_FIELD_NUMBER: _ClassVar[int]
    SIGNATURE_FIELD_NUMBER: _ClassVar[int]
    dealer_id: str
    recipient_id: str
    nonce: bytes
    ciphertext: bytes
    signature: bytes
    def __init__(self, dealer_id: _Optional[str] = ..., recipient_id: _Optional[str] = ..., nonce: _Optional[bytes] = ..., ciphertext: _Optional[bytes] = ..., signature: _Optional[bytes] = ...) -> None: ...

class PostSealedRequest(_message.Message):
    __slots__ = ("federation_id", "shares")
    FEDERATION_ID_FIELD_NUMBER: _ClassVar[int]
    SHARES_FIELD_NUMBER: _ClassVar[int]
    federation_id: str
    shares: _containers.RepeatedCompositeFieldContainer[SealedShare]
    def __init__(self, federation_id: _Optional[str] = ..., shares: _Optional[_Iterable[_Union[SealedShare, _Mapping]]] = ...) -> None: ...

class PostSealedReply(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class GetSealedRequest(_message.Message):
    __slots__ = ("federation_id",)
    FEDERATION_ID_FIELD_NUMBER: _ClassVar[int]
    federation_id: str
    def __init__(self, federation_id: _Optional[str] = ...) -> None: ...

class AnchorSecret(_message.Message):
    __slots__ = ("seed", "method", "anchors", "dim", "translation_scale", "sealed_to")
    class SealedToEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: bytes
        def __init__(self, key: _Optional[str] = ..., value: _Optional[bytes] = ...) -> None: ...
    SEED_FIELD_NUMBER: _ClassVar[int]
    METHOD_FIELD_NUMBER: _ClassVar[int]
    ANCHORS_FIELD_NUMBER: _ClassVar[int]
    DIM_FIELD_NUMBER: _ClassVar[int]
    TRANSLATION_SCALE_FIELD_NUMBER: _ClassVar[int]
    SEALED_TO_FIELD_NUMBER: _ClassVar[int]
    seed: bytes
    method: str
    anchors: int
    dim: int
    translation_scale: float
    sealed_to: _containers.ScalarMap[str, bytes]
    def __init__(self, seed: _Optional[bytes] = ..., method: _Optional[str] = ..., anchors: _Optional[int] = ..., dim: _Optional[int] = ..., translation_scale: _Optional[float] = ..., sealed_to: _Optional[_Mapping[str, bytes]] = ...) -> None: ...

class Commitment(_message.Message):
    __slots__ = ("participant_id", "digest")
    PARTICIPANT_ID_FIELD_NUMBER: _ClassVar[int]
    DIGEST_FIELD_NUMBER: _ClassVar[int]
    participant_id: str
    digest: bytes
    def __init__(self, participant_id: _Optional[str] = ..., digest: _Optional[bytes] = ...) -> None: ...

class PublishCommitmentRequest(_message.Message):
    __slots__ = ("federation_id", "digest", "signature")
    FEDERATION_ID_FIELD_NUMBER: _ClassVar[int]
    DIGEST_FIELD_NUMBER: _ClassVar[int]
    SIGNATURE_FIELD_NUMBER: _ClassVar[int]
    federation_id: str
    digest: bytes
    signature: bytes
    def __init__(self, federation_id: _Optional[str] = ..., digest: _Optional[bytes] = ..., signature: _Optional[bytes] = ...) -> None: ...

class PublishCommitmentReply(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ListCommitmentsRequest(_message.Message):
    __slots__ = ("federation_id",)
    FEDERATION_ID_FIELD_NUMBER: _ClassVar[int]
    federation_id: str
    def __init__(self, federation_id: _Optional[str] = ...) -> None: ...

class ListCommitmentsReply(_message.Message):
    __slots__ = ("expected", "commitments")
    EXPECTED_FIELD_NUMBER: _ClassVar[int]
    COMMITMENTS_FIELD_NUMBER: _ClassVar[int]
    expected: _containers.RepeatedScalarFieldContainer[str]
    commitments: _containers.RepeatedCompositeFieldContainer[Commitment]
    def __init__(self, expected: _Optional[_Iterable[str]] = ..., commitments: _Optional[_Iterable[_Union[Commitment, _Mapping]]] = ...) -> None: ...

class SiteModelRequest(_message.Message):
    __slots__ = ("federation_id", "participant_id", "signature")
    FEDERATION_ID_FIELD_NUMBER: _ClassVar[int]
    PARTICIPANT_ID_FIELD_NUMBER: _ClassVar[int]
    SIGNATURE_FIELD_NUMBER: _ClassVar[int]
    federation_id: str
    participant_id: str
    signature: bytes
    def __init__(self, federation_id: _Optional[str] = ..., participant_id: _Optional[str] = ..., signature: _Optional[bytes] = ...) -> None: ...

class SiteModelHeader(_message.Message):
    __slots__ = ("participant_id", "format", "nbytes", "sha256")
    PARTICIPANT_ID_FIELD_NUMBER: _ClassVar[int]
    FORMAT_FIELD_NUMBER: _ClassVar[int]
    NBYTES_FIELD_NUMBER: _ClassVar[int]
    SHA256_FIELD_NUMBER: _ClassVar[int]
    participant_id: str
    format: str
    nbytes: int
    sha256: bytes
    def __init__(self, participant_id: _Optional[str] = ..., format: _Optional[str] = ..., nbytes: _Optional[int] = ..., sha256: _Optional[bytes] = ...) -> None: ...

class SiteModelPart(_message.Message):
    __slots__ = ("header", "chunk")
    HEADER_FIELD_NUMBER: _ClassVar[int]
    CHUNK_FIELD_NUMBER: _ClassVar[int]
    header: SiteModelHeader
    chunk: bytes
    def __init__(self, header: _Optional[_Union[SiteModelHeader, _Mapping]] = ..., chunk: _Optional[bytes] = ...) -> None: ...

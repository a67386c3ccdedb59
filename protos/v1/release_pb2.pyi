from noisyanchor.protos.v1 import analyst_pb2 as _analyst_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class Account(_message.Message):
    __slots__ = ("name", "budget_epsilon", "spent_epsilon", "left_epsilon", "releases", "max_releases")
    NAME_FIELD_NUMBER: _ClassVar[int]
    BUDGET_EPSILON_FIELD_NUMBER: _ClassVar[int]
    SPENT_EPSILON_FIELD_NUMBER: _ClassVar[int]
    LEFT_EPSILON_FIELD_NUMBER: _ClassVar[int]
    RELEASES_FIELD_NUMBER: _ClassVar[int]
    MAX_RELEASES_FIELD_NUMBER: _ClassVar[int]
    name: str
    budget_epsilon: float
    spent_epsilon: float
    left_epsilon: float
    releases: int
    max_releases: int
    def __init__(self, name: _Optional[str] = ..., budget_epsilon: _Optional[float] = ..., spent_epsilon: _Optional[float] = ..., left_epsilon: _Optional[float] = ..., releases: _Optional[int] = ..., max_releases: _Optional[int] = ...) -> None: ...

class Spend(_message.Message):
    __slots__ = ("dataset", "sigma", "sensitivity", "epsilon", "delta", "charged_epsilon", "spent_epsilon", "remaining_epsilon", "budget_epsilon", "budget_delta", "participant", "request_id", "repeated", "regime", "guarantee", "record_epsilon")
    DATASET_FIELD_NUMBER: _ClassVar[int]
    SIGMA_FIELD_NUMBER: _ClassVar[int]
    SENSITIVITY_FIELD_NUMBER: _ClassVar[int]
    EPSILON_FIELD_NUMBER: _ClassVar[int]
    DELTA_FIELD_NUMBER: _ClassVar[int]
    CHARGED_EPSILON_FIELD_NUMBER: _ClassVar[int]
    SPENT_EPSILON_FIELD_NUMBER: _ClassVar[int]
    REMAINING_EPSILON_FIELD_NUMBER: _ClassVar[int]
    BUDGET_EPSILON_FIELD_NUMBER: _ClassVar[int]
    BUDGET_DELTA_FIELD_NUMBER: _ClassVar[int]
    PARTICIPANT_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    REPEATED_FIELD_NUMBER: _ClassVar[int]
    REGIME_FIELD_NUMBER: _ClassVar[int]
    GUARANTEE_FIELD_NUMBER: _ClassVar[int]
    RECORD_EPSILON_FIELD_NUMBER: _ClassVar[int]
    dataset: str
    sigma: float
    sensitivity: float
    epsilon: float
    delta: float
    charged_epsilon: float
    spent_epsilon: float
    remaining_epsilon: float
    budget_epsilon: float
    budget_delta: float
    participant: Account
    request_id: str
    repeated: bool
    regime: str
    guarantee: str
    record_epsilon: float
    def __init__(self, dataset: _Optional[str] = ..., sigma: _Optional[float] = ..., sensitivity: _Optional[float] = ..., epsilon: _Optional[float] = ..., delta: _Optional[float] = ..., charged_epsilon: _Optional[float] = ..., spent_epsilon: _Optional[float] = ..., remaining_epsilon: _Optional[float] = ..., budget_epsilon: _Optional[float] = ..., budget_delta: _Optional[float] = ..., participant: _Optional[_Union[Account, _Mapping]] = ..., request_id: _Optional[str] = ..., repeated: bool = ..., regime: _Optional[str] = ..., guarantee: _Optional[str] = ..., record_epsilon: _Optional[float] = ...) -> None: ...

class ScoreQuery(_message.Message):
    __slots__ = ("federation_id", "dataset", "record_header", "record", "epsilon", "delta", "top_k", "request_id", "adjacency", "margin")
    FEDERATION_ID_FIELD_NUMBER: _ClassVar[int]
    DATASET_FIELD_NUMBER: _ClassVar[int]
    RECORD_HEADER_FIELD_NUMBER: _ClassVar[int]
    RECORD_FIELD_NUMBER: _ClassVar[int]
    EPSILON_FIELD_NUMBER: _ClassVar[int]
    DELTA_FIELD_NUMBER: _ClassVar[int]
    TOP_K_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    ADJACENCY_FIELD_NUMBER: _ClassVar[int]
    MARGIN_FIELD_NUMBER: _ClassVar[int]
    federation_id: str
    dataset: str
    record_header: _analyst_pb2.ArrayHeader
    record: bytes
    epsilon: float
    delta: float
    top_k: int
    request_id: str
    adjacency: str
    margin: float
    def __init__(self, federation_id: _Optional[str] = ..., dataset: _Optional[str] = ..., record_header: _Optional[_Union[_analyst_pb2.ArrayHeader, _Mapping]] = ..., record: _Optional[bytes] = ..., epsilon: _Optional[float] = ..., delta: _Optional[float] = ..., top_k: _Optional[int] = ..., request_id: _Optional[str] = ..., adjacency: _Optional[str] = ..., margin: _Optional[float] = ...) -> None: ...

class RowQuery(_message.Message):
    __slots__ = ("federation_id", "dataset", "row", "epsilon", "delta", "top_k", "request_id", "margin")
    FEDERATION_ID_FIELD_NUMBER: _ClassVar[int]
    DATASET_FIELD_NUMBER: _ClassVar[int]
    ROW_FIELD_NUMBER: _ClassVar[int]
    EPSILON_FIELD_NUMBER: _ClassVar[int]
    DELTA_FIELD_NUMBER: _ClassVar[int]
    TOP_K_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    MARGIN_FIELD_NUMBER: _ClassVar[int]
    federation_id: str
    dataset: str
    row: int
    epsilon: float
    delta: float
    top_k: int
    request_id: str
    margin: float
    def __init__(self, federation_id: _Optional[str] = ..., dataset: _Optional[str] = ..., row: _Optional[int] = ..., epsilon: _Optional[float] = ..., delta: _Optional[float] = ..., top_k: _Optional[int] = ..., request_id: _Optional[str] = ..., margin: _Optional[float] = ...) -> None: ...

class ScoreRelease(_message.Message):
    __slots__ = ("spend", "scores_header", "scores", "top_ids", "records", "clipped", "noise_dominated", "useful_epsilon")
    SPEND_FIELD_NUMBER: _ClassVar[int]
    SCORES_HEADER_FIELD_NUMBER: _ClassVar[int]
    SCORES_FIELD_NUMBER: _ClassVar[int]
    TOP_IDS_FIELD_NUMBER: _ClassVar[int]
    RECORDS_FIELD_NUMBER: _ClassVar[int]
    CLIPPED_FIELD_NUMBER: _ClassVar[int]
    NOISE_DOMINATED_FIELD_NUMBER: _ClassVar[int]
    USEFUL_EPSILON_FIELD_NUMBER: _ClassVar[int]
    spend: Spend
    scores_header: _analyst_pb2.ArrayHeader
    scores: bytes
    top_ids: _containers.RepeatedScalarFieldContainer[int]
    records: int
    clipped: int
    noise_dominated: bool
    useful_epsilon: float
    def __init__(self, spend: _Optional[_Union[Spend, _Mapping]] = ..., scores_header: _Optional[_Union[_analyst_pb2.ArrayHeader, _Mapping]] = ..., scores: _Optional[bytes] = ..., top_ids: _Optional[_Iterable[int]] = ..., records: _Optional[int] = ..., clipped: _Optional[int] = ..., noise_dominated: bool = ..., useful_epsilon: _Optional[float] = ...) -> None: ...

class GramQuery(_message.Message):
    __slots__ = ("federation_id", "dataset", "epsilon", "delta", "projector", "max_iterations", "request_id", "adjacency")
    FEDERATION_ID_FIELD_NUMBER: _ClassVar[int]
    DATASET_FIELD_NUMBER: _ClassVar[int]
    EPSILON_FIELD_NUMBER: _ClassVar[int]
    DELTA_FIELD_NUMBER: _ClassVar[int]
    PROJECTOR_FIELD_NUMBER: _ClassVar[int]
    MAX_ITERATIONS_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    ADJACENCY_FIELD_NUMBER: _ClassVar[int]
    federation_id: str
    dataset: str
    epsilon: float
    delta: float
    projector: str
    max_iterations: int
    request_id: str
    adjacency: str
    def __init__(self, federation_id: _Optional[str] = ..., dataset: _Optional[str] = ..., epsilon: _Optional[float] = ..., delta: _Optional[float] = ..., projector: _Optional[str] = ..., max_iterations: _Optional[int] = ..., request_id: _Optional[str] = ..., adjacency: _Optional[str] = ...) -> None: ...

class GramBaseline(_message.Message):
    __slots__ = ("noisy_distance", "projected_bound", "projected_estimate", "projected_stderr", "identity_estimate", "identity_stderr", "identity_max", "identity_floor", "no_better_than_identity", "useful_epsilon", "useful_epsilon_basis", "warning")
    NOISY_DISTANCE_FIELD_NUMBER: _ClassVar[int]
    PROJECTED_BOUND_FIELD_NUMBER: _ClassVar[int]
    PROJECTED_ESTIMATE_FIELD_NUMBER: _ClassVar[int]
    PROJECTED_STDERR_FIELD_NUMBER: _ClassVar[int]
    IDENTITY_ESTIMATE_FIELD_NUMBER: _ClassVar[int]
    IDENTITY_STDERR_FIELD_NUMBER: _ClassVar[int]
    IDENTITY_MAX_FIELD_NUMBER: _ClassVar[int]
    IDENTITY_FLOOR_FIELD_NUMBER: _ClassVar[int]
    NO_BETTER_THAN_IDENTITY_FIELD_NUMBER: _ClassVar[int]
    USEFUL_EPSILON_FIELD_NUMBER: _ClassVar[int]
    USEFUL_EPSILON_BASIS_FIELD_NUMBER: _ClassVar[int]
    WARNING_FIELD_NUMBER: _ClassVar[int]
    noisy_distance: float
    projected_bound: float
    projected_estimate: float
    projected_stderr: float
    identity_estimate: float
    identity_stderr: float
    identity_max: float
    identity_floor: float
    no_better_than_identity: bool
    useful_epsilon: float
    useful_epsilon_basis: str
    warning: str
    def __init__(self, noisy_distance: _Optional[float] = ..., projected_bound: _Optional[float] = ..., projected_estimate: _Optional[float] = ..., projected_stderr: _Optional[float] = ..., identity_estimate: _Optional[float] = ..., identity_stderr: _Optional[float] = ..., identity_max: _Optional[float] = ..., identity_floor: _Optional[float] = ..., no_better_than_identity: bool = ..., useful_epsilon: _Optional[float] = ..., useful_epsilon_basis: _Optional[str] = ..., warning: _Optional[str] = ...) -> None: ...

class ReleaseRef(_message.Message):
    __slots__ = ("federation_id", "request_id")
    FEDERATION_ID_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    federation_id: str
    request_id: str
    def __init__(self, federation_id: _Optional[str] = ..., request_id: _Optional[str] = ...) -> None: ...

class GramHeader(_message.Message):
    __slots__ = ("spend", "matrix", "projector", "iterations", "converged", "min_eigenvalue", "max_diag_error", "eigendecompositions", "relative_residual", "seconds", "baseline")
    SPEND_FIELD_NUMBER: _ClassVar[int]
    MATRIX_FIELD_NUMBER: _ClassVar[int]
    PROJECTOR_FIELD_NUMBER: _ClassVar[int]
    ITERATIONS_FIELD_NUMBER: _ClassVar[int]
    CONVERGED_FIELD_NUMBER: _ClassVar[int]
    MIN_EIGENVALUE_FIELD_NUMBER: _ClassVar[int]
    MAX_DIAG_ERROR_FIELD_NUMBER: _ClassVar[int]
    EIGENDECOMPOSITIONS_FIELD_NUMBER: _ClassVar[int]
    RELATIVE_RESIDUAL_FIELD_NUMBER: _ClassVar[int]
    SECONDS_FIELD_NUMBER: _ClassVar[int]
    BASELINE_FIELD_NUMBER: _ClassVar[int]
    spend: Spend
    matrix: _analyst_pb2.ArrayHeader
    projector: str
    iterations: int
    converged: bool
    min_eigenvalue: float
    max_diag_error: float
    eigendecompositions: int
    relative_residual: float
    seconds: float
    baseline: GramBaseline
    def __init__(self, spend: _Optional[_Union[Spend, _Mapping]] = ..., matrix: _Optional[_Union[_analyst_pb2.ArrayHeader, _Mapping]] = ..., projector: _Optional[str] = ..., iterations: _Optional[int] = ..., converged: bool = ..., min_eigenvalue: _Optional[float] = ..., max_diag_error: _Optional[float] = ..., eigendecompositions: _Optional[int] = ..., relative_residual: _Optional[float] = ..., seconds: _Optional[float] = ..., baseline: _Optional[_Union[GramBaseline, _Mapping]] = ...) -> None: ...

class GramPart(_message.Message):
    __slots__ = ("header", "chunk")
    HEADER_FIELD_NUMBER: _ClassVar[int]
    CHUNK_FIELD_NUMBER: _ClassVar[int]
    header: GramHeader
    chunk: bytes
    def __init__(self, header: _Optional[_Union[GramHeader, _Mapping]] = ..., chunk: _Optional[bytes] = ...) -> None: ...

class GramJob(_message.Message):
    __slots__ = ("request_id", "state", "spend", "queue_position", "iterations", "relative_residual", "tolerance", "seconds", "header", "error")
    class State(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
        __slots__ = ()
        STATE_UNSPECIFIED: _ClassVar[GramJob.State]
        QUEUED: _ClassVar[GramJob.State]
        RUNNING: _ClassVar[GramJob.State]
        DONE: _ClassVar[GramJob.State]
        FAILED: _ClassVar[GramJob.State]
    STATE_UNSPECIFIED: GramJob.State
    QUEUED: GramJob.State
    RUNNING: GramJob.State
    DONE: GramJob.State
    FAILED: GramJob.State
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    SPEND_FIELD_NUMBER: _ClassVar[int]
    QUEUE_POSITION_FIELD_NUMBER: _ClassVar[int]
    ITERATIONS_FIELD_NUMBER: _ClassVar[int]
    RELATIVE_RESIDUAL_FIELD_NUMBER: _ClassVar[int]
    TOLERANCE_FIELD_NUMBER: _ClassVar[int]
    SECONDS_FIELD_NUMBER: _ClassVar[int]
    HEADER_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    request_id: str
    state: GramJob.State
    spend: Spend
    queue_position: int
    iterations: int
    relative_residual: float
    tolerance: float
    seconds: float
    header: GramHeader
    error: str
    def __init__(self, request_id: _Optional[str] = ..., state: _Optional[_Union[GramJob.State, str]] = ..., spend: _Optional[_Union[Spend, _Mapping]] = ..., queue_position: _Optional[int] = ..., iterations: _Optional[int] = ..., relative_residual: _Optional[float] = ..., tolerance: _Optional[float] = ..., seconds: _Optional[float] = ..., header: _Optional[_Union[GramHeader, _Mapping]] = ..., error: _Optional[str] = ...) -> None: ...

class BudgetQuery(_message.Message):
    __slots__ = ("federation_id", "dataset")
    FEDERATION_ID_FIELD_NUMBER: _ClassVar[int]
    DATASET_FIELD_NUMBER: _ClassVar[int]
    federation_id: str
    dataset: str
    def __init__(self, federation_id: _Optional[str] = ..., dataset: _Optional[str] = ...) -> None: ...

class BudgetReport(_message.Message):
    __slots__ = ("budget_delta", "dataset", "participants", "min_epsilon")
    BUDGET_DELTA_FIELD_NUMBER: _ClassVar[int]
    DATASET_FIELD_NUMBER: _ClassVar[int]
    PARTICIPANTS_FIELD_NUMBER: _ClassVar[int]
    MIN_EPSILON_FIELD_NUMBER: _ClassVar[int]
    budget_delta: float
    dataset: Account
    participants: _containers.RepeatedCompositeFieldContainer[Account]
    min_epsilon: float
    def __init__(self, budget_delta: _Optional[float] = ..., dataset: _Optional[_Union[Account, _Mapping]] = ..., participants: _Optional[_Iterable[_Union[Account, _Mapping]]] = ..., min_epsilon: _Optional[float] = ...) -> None: ...

"""A probe of the standard gRPC health service (``grpc.health.v1``) on the analyst's plaintext
health port, for operators, container health checks and load balancers."""

from __future__ import annotations

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc


def check_health(address: str, service: str = "", timeout: float = 5.0) -> str:
    """The serving status of ``service`` (empty: the whole server) at ``address``:
    ``SERVING``, ``NOT_SERVING``, ``SERVICE_UNKNOWN``, or ``UNREACHABLE (<gRPC status>)`` when no
    answer came within ``timeout`` seconds."""
    with grpc.insecure_channel(address) as channel:
        stub = health_pb2_grpc.HealthStub(channel)
        try:
            reply = stub.Check(health_pb2.HealthCheckRequest(service=service), timeout=timeout)
        except grpc.RpcError as err:
            if err.code() == grpc.StatusCode.NOT_FOUND:
                return "SERVICE_UNKNOWN"
            return f"UNREACHABLE ({err.code().name}: {err.details()})"
    return health_pb2.HealthCheckResponse.ServingStatus.Name(reply.status)

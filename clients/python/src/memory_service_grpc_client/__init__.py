"""memory-service-grpc-client: the Python client of memory-service's gRPC services.

`MemoryClient` has one typed method per RPC (request and response are the generated messages of
``memory.v1``, shipped in this distribution), deadlines, retries of idempotent calls on UNAVAILABLE
(`call_policy`), errors as exceptions with the field violations (`errors`), consistency tokens for
read-after-write (`ConsistencyTokens`) and iterators over paged RPCs (`iter_pages`). See README.md.
"""

from memory_service_grpc_client.channels import (
    CHANNEL_OPTIONS,
    CallDetails,
    ChannelWrapper,
    ClientSecurity,
    ServiceChannels,
    health_status,
    make_channel,
    wait_for_serving,
)
from memory_service_grpc_client.consistency_tokens import ConsistencyTokens
from memory_service_grpc_client.errors import (
    AlreadyExists,
    DeadlineExceeded,
    FailedPrecondition,
    FieldViolation,
    Internal,
    InvalidArgument,
    NotFound,
    PermissionDenied,
    QuotaViolation,
    ResourceExhausted,
    RpcFailure,
    ServiceError,
    Unauthenticated,
    Unavailable,
    error_from_rpc,
    field_violations,
    format_rpc_error,
    is_unavailable,
    raise_for_status,
    rpc_failure,
)
from memory_service_grpc_client.memory_client import MemoryClient
from memory_service_grpc_client.pagination import iter_pages

__version__ = "0.1.0"

__all__ = [
    "CHANNEL_OPTIONS",
    "AlreadyExists",
    "CallDetails",
    "ChannelWrapper",
    "ClientSecurity",
    "ConsistencyTokens",
    "DeadlineExceeded",
    "FailedPrecondition",
    "FieldViolation",
    "Internal",
    "InvalidArgument",
    "MemoryClient",
    "NotFound",
    "PermissionDenied",
    "QuotaViolation",
    "ResourceExhausted",
    "RpcFailure",
    "ServiceChannels",
    "ServiceError",
    "Unauthenticated",
    "Unavailable",
    "error_from_rpc",
    "field_violations",
    "format_rpc_error",
    "health_status",
    "is_unavailable",
    "iter_pages",
    "make_channel",
    "raise_for_status",
    "rpc_failure",
    "wait_for_serving",
]

"""memory-service-grpc-client: the Python client of memory-service's gRPC services.

`MemoryClient` has one typed method per RPC (request and response are the generated messages of
``memory.v1``, shipped in this distribution), deadlines, retries of idempotent calls on UNAVAILABLE
(`call_policy`), errors as exceptions with the field violations (`errors`), consistency tokens for
read-after-write (`ConsistencyTokens`) and iterators over paged RPCs (`iter_pages`). See README.md.
"""

from memory_service_grpc_client.channels import CHANNEL_OPTIONS
from memory_service_grpc_client.channels import CallDetails
from memory_service_grpc_client.channels import ChannelWrapper
from memory_service_grpc_client.channels import ClientSecurity
from memory_service_grpc_client.channels import ServiceChannels
from memory_service_grpc_client.channels import health_status
from memory_service_grpc_client.channels import make_channel
from memory_service_grpc_client.channels import wait_for_serving
from memory_service_grpc_client.consistency_tokens import ConsistencyTokens
from memory_service_grpc_client.errors import AlreadyExists
from memory_service_grpc_client.errors import DeadlineExceeded
from memory_service_grpc_client.errors import FailedPrecondition
from memory_service_grpc_client.errors import FieldViolation
from memory_service_grpc_client.errors import Internal
from memory_service_grpc_client.errors import InvalidArgument
from memory_service_grpc_client.errors import NotFound
from memory_service_grpc_client.errors import PermissionDenied
from memory_service_grpc_client.errors import QuotaViolation
from memory_service_grpc_client.errors import ResourceExhausted
from memory_service_grpc_client.errors import RpcFailure
from memory_service_grpc_client.errors import ServiceError
from memory_service_grpc_client.errors import Unauthenticated
from memory_service_grpc_client.errors import Unavailable
from memory_service_grpc_client.errors import error_from_rpc
from memory_service_grpc_client.errors import field_violations
from memory_service_grpc_client.errors import format_rpc_error
from memory_service_grpc_client.errors import is_unavailable
from memory_service_grpc_client.errors import raise_for_status
from memory_service_grpc_client.errors import rpc_failure
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

"""Domain errors -> the `google.rpc.Status` a client receives (AIP-193): where an RPC maps its errors.

Each `common.kernel.errors.DomainError` subclass has one gRPC code (`grpc_code_for`). The status carries
one `ErrorInfo` (reason = the error's UPPER_SNAKE reason, domain ``memory.v1``, metadata
``request_id``) and, for `InvalidArgument`, a `BadRequest` with one field violation per violation.
Anything else (a bug, a library error, a bare `DomainError`) becomes INTERNAL with a generic message that
names the request id. The error-mapping interceptor (`common.grpc.interceptors`) calls
`status_for_exception` for every exception a handler raises; the auth interceptor calls it for streams
it refuses outright.
"""

from __future__ import annotations

from typing import Any

import grpc
from google.protobuf import any_pb2
from google.rpc import code_pb2, error_details_pb2, status_pb2
from grpc_status import rpc_status

from common.kernel.errors import (
    AlreadyExists,
    DomainError,
    FailedPrecondition,
    InvalidArgument,
    NotFound,
    PermissionDenied,
    Unauthenticated,
    Unavailable,
)

__all__ = ["ERROR_DOMAIN", "grpc_code_for", "status_for_exception"]

ERROR_DOMAIN = "memory.v1"

# Checked in order: the first matching class wins (subclasses of one another would need care).
_DOMAIN_CODES: tuple[tuple[type[DomainError], grpc.StatusCode], ...] = (
    (InvalidArgument, grpc.StatusCode.INVALID_ARGUMENT),
    (NotFound, grpc.StatusCode.NOT_FOUND),
    (AlreadyExists, grpc.StatusCode.ALREADY_EXISTS),
    (FailedPrecondition, grpc.StatusCode.FAILED_PRECONDITION),
    (PermissionDenied, grpc.StatusCode.PERMISSION_DENIED),
    (Unauthenticated, grpc.StatusCode.UNAUTHENTICATED),
    (Unavailable, grpc.StatusCode.UNAVAILABLE),
)


def grpc_code_for(exc: BaseException) -> grpc.StatusCode | None:
    """The gRPC code of a mapped domain error; None for anything else (it becomes INTERNAL)."""
    if isinstance(exc, DomainError):
        for cls, code in _DOMAIN_CODES:
            if isinstance(exc, cls):
                return code
    return None


def _pack(message: Any) -> any_pb2.Any:
    packed = any_pb2.Any()
    packed.Pack(message)
    return packed


def status_for_exception(exc: BaseException, request_id: str | None) -> grpc.Status:
    """Maps an exception raised by a handler to the status sent to the client.

    Args:
        exc: a `common.kernel.errors.DomainError` subclass instance, or anything else.
        request_id: put in ErrorInfo metadata and, for INTERNAL, in the message.

    Returns:
        A `grpc.Status` whose trailing metadata holds ``grpc-status-details-bin``: a `google.rpc.Status`
        with one `ErrorInfo` (reason = ``exc.reason``, domain ``memory.v1``) and, for `InvalidArgument`,
        a `BadRequest` with one field violation per ``exc.violations`` item. Unmapped exceptions (and a
        bare `DomainError`) become INTERNAL with the message ``"internal error (request id X)"``.
    """
    metadata = {"request_id": request_id} if request_id else {}
    code = grpc_code_for(exc)
    if code is None or not isinstance(exc, DomainError):
        message = f"internal error (request id {request_id or '-'})"
        details = [
            _pack(error_details_pb2.ErrorInfo(reason="INTERNAL", domain=ERROR_DOMAIN, metadata=metadata))
        ]
        proto = status_pb2.Status(code=code_pb2.INTERNAL, message=message, details=details)
        return rpc_status.to_status(proto)
    details = [_pack(error_details_pb2.ErrorInfo(reason=exc.reason, domain=ERROR_DOMAIN, metadata=metadata))]
    if isinstance(exc, InvalidArgument):
        bad_request = error_details_pb2.BadRequest(
            field_violations=[
                error_details_pb2.BadRequest.FieldViolation(field=v.field, description=v.description)
                for v in exc.violations
            ]
        )
        details.append(_pack(bad_request))
    proto = status_pb2.Status(code=code.value[0], message=exc.message, details=details)
    return rpc_status.to_status(proto)

"""Domain errors -> the `google.rpc.Status` a client receives (AIP-193): where an RPC maps its errors.

Each `common.kernel.errors.DomainError` subclass has one gRPC code (`grpc_code_for`). The status carries
one `ErrorInfo` (reason = the error's UPPER_SNAKE reason, domain ``memory.v1``, metadata
``request_id``) and, for `InvalidArgument`, a `BadRequest` with one field violation per violation, for
`ResourceExhausted` a `QuotaFailure` with its subject and description.
Anything else (a bug, a library error, a bare `DomainError`) becomes INTERNAL with a generic message that
names the request id. The error-mapping interceptor (`common.grpc.interceptors`) calls
`status_for_exception` for every exception a handler raises; the auth interceptor calls it for streams
it refuses outright.
"""

from __future__ import annotations

from typing import Any

import grpc
from google.protobuf import any_pb2
from google.rpc import code_pb2
from google.rpc import error_details_pb2
from google.rpc import status_pb2
from grpc_status import rpc_status

from common.kernel.errors import AlreadyExists
from common.kernel.errors import DomainError
from common.kernel.errors import FailedPrecondition
from common.kernel.errors import FieldViolation
from common.kernel.errors import InvalidArgument
from common.kernel.errors import NotFound
from common.kernel.errors import PermissionDenied
from common.kernel.errors import ResourceExhausted
from common.kernel.errors import Unauthenticated
from common.kernel.errors import Unavailable

__all__ = ["ERROR_DOMAIN", "bounded_bad_request", "grpc_code_for", "shorten", "status_for_exception"]

ERROR_DOMAIN = "memory.v1"
# Error details stay small whatever the input: gRPC clients refuse trailing metadata past
# 8 KiB in all (a soft limit, refused at random between it and 16 KiB: RESOURCE_EXHAUSTED), and the
# details travel there beside the message, so the violations get 4 KiB and the message 512 characters.
MAX_VIOLATIONS = 100
MAX_VIOLATION_BYTES = 4 * 1024
MAX_FIELD_CHARS = 256
MAX_DESCRIPTION_CHARS = 512
MAX_MESSAGE_CHARS = 512

# Checked in order: the first matching class wins (subclasses of one another would need care).
_DOMAIN_CODES: tuple[tuple[type[DomainError], grpc.StatusCode], ...] = (
    (InvalidArgument, grpc.StatusCode.INVALID_ARGUMENT),
    (NotFound, grpc.StatusCode.NOT_FOUND),
    (AlreadyExists, grpc.StatusCode.ALREADY_EXISTS),
    (FailedPrecondition, grpc.StatusCode.FAILED_PRECONDITION),
    (PermissionDenied, grpc.StatusCode.PERMISSION_DENIED),
    (Unauthenticated, grpc.StatusCode.UNAUTHENTICATED),
    (ResourceExhausted, grpc.StatusCode.RESOURCE_EXHAUSTED),
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
        a `BadRequest` with one field violation per ``exc.violations`` item (bounded:
        `bounded_bad_request`; the message is at most `MAX_MESSAGE_CHARS`). Unmapped exceptions (and a
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
    # A domain error may name values the client acts on (e.g. the oldest cursor a change feed keeps).
    metadata.update({key: shorten(value, MAX_FIELD_CHARS) for key, value in exc.metadata.items()})
    details = [_pack(error_details_pb2.ErrorInfo(reason=exc.reason, domain=ERROR_DOMAIN, metadata=metadata))]
    if isinstance(exc, InvalidArgument):
        details.append(_pack(bounded_bad_request(exc.violations)))
    if isinstance(exc, ResourceExhausted):
        violation = error_details_pb2.QuotaFailure.Violation(
            subject=shorten(exc.subject, MAX_FIELD_CHARS),
            description=shorten(exc.description, MAX_DESCRIPTION_CHARS),
        )
        details.append(_pack(error_details_pb2.QuotaFailure(violations=[violation])))
    proto = status_pb2.Status(
        code=code.value[0], message=shorten(exc.message, MAX_MESSAGE_CHARS), details=details
    )
    return rpc_status.to_status(proto)


def shorten(text: str, limit: int) -> str:
    """``text`` cut to at most ``limit`` characters, saying how many were left out."""
    if len(text) <= limit:
        return text
    note = f"... ({len(text) - limit} more characters)"
    return text[: max(limit - len(note), 0)] + note


def bounded_bad_request(violations: list[FieldViolation]) -> error_details_pb2.BadRequest:
    """A `BadRequest` of ``violations`` that a client always accepts: at most
    `MAX_VIOLATIONS` violations and `MAX_VIOLATION_BYTES` in all, each field path and description
    shortened (`MAX_FIELD_CHARS`, `MAX_DESCRIPTION_CHARS`); when some are left out, one last violation
    (field ``""``) says how many."""
    kept: list[error_details_pb2.BadRequest.FieldViolation] = []
    total = 0
    for violation in violations:
        entry = error_details_pb2.BadRequest.FieldViolation(
            field=shorten(violation.field, MAX_FIELD_CHARS),
            description=shorten(violation.description, MAX_DESCRIPTION_CHARS),
        )
        size = entry.ByteSize()
        if len(kept) >= MAX_VIOLATIONS or total + size > MAX_VIOLATION_BYTES:
            break
        kept.append(entry)
        total += size
    left_out = len(violations) - len(kept)
    if left_out:
        kept.append(
            error_details_pb2.BadRequest.FieldViolation(
                field="", description=f"{left_out} more violations left out"
            )
        )
    return error_details_pb2.BadRequest(field_violations=kept)

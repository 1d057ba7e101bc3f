"""The request id of the RPC being handled, free of any transport.

The request-id interceptor of `common.grpc.interceptors` sets it for the duration of each call (from the
``x-request-id`` metadata, or generated) and echoes it in the trailing metadata. Domain code reads it
without importing grpc, e.g. `common.domain.audit` uses it as the trace id of an audit event recorded without
one.
"""

from __future__ import annotations

import contextvars

request_id_var: contextvars.ContextVar[str | None] = contextvars.ContextVar("memory_request_id", default=None)
"""Request id of the RPC in progress on this thread (None outside an RPC)."""


def current_request_id() -> str | None:
    """Returns the request id of the RPC being handled on this thread, or None outside an RPC."""
    return request_id_var.get()


__all__ = ["current_request_id", "request_id_var"]

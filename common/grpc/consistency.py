"""Consistency tokens on the wire (docs/explanation/architecture.md; docs/how-to/read-replicas.md): two server interceptors.

* `WriteTokenInterceptor` (ingest_service): after a write RPC returned, its response gets the token of
  the primary's WAL position (`common.kernel.consistency`), in the field ``consistency_token`` (every
  write response has it; a response without the field is a read and gets none) and in the trailing
  metadata ``x-consistency-token``. The position is taken after the handler's transaction committed, so
  it is at or past the commit. When it cannot be taken (the database went away right after the commit)
  the write still succeeds, without a token.
* `ReadTokenInterceptor` (query_service): the ``x-consistency-token`` metadata of a read becomes
  `common.kernel.consistency.required_position_var` for the duration of the call, which
  `common.storage.replicas.read_routing.RoutedDatabase` honours. A malformed token is INVALID_ARGUMENT (field
  ``x-consistency-token``) before the handler runs.

Both are installed innermost (`build_server(..., interceptors=...)`), inside the error mapping.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import grpc

from common.grpc.interceptors import _Behavior
from common.grpc.interceptors import _UnaryInterceptor
from common.kernel.consistency import CONSISTENCY_TOKEN_METADATA
from common.kernel.consistency import decode_token
from common.kernel.consistency import encode_token
from common.kernel.consistency import required_position_var

__all__ = ["ReadTokenInterceptor", "WriteTokenInterceptor"]

log = logging.getLogger("memory.server")

TOKEN_FIELD = "consistency_token"


class WriteTokenInterceptor(_UnaryInterceptor):
    """Adds the consistency token to every successful write response (see the module docstring).

    Args:
        position: returns the primary's current WAL position (integer ``pg_lsn``), e.g.
            `common.storage.replicas.wal_position.current_wal_position` bound to the service's database.
    """

    def __init__(self, position: Callable[[], int]) -> None:
        self._position = position

    def _wrap(self, behavior: _Behavior, details: grpc.HandlerCallDetails) -> _Behavior:
        def wrapped(request: Any, context: grpc.ServicerContext) -> Any:
            response = behavior(request, context)
            if response is None or TOKEN_FIELD not in response.DESCRIPTOR.fields_by_name:
                return response
            try:
                token = encode_token(self._position())
            except Exception as error:  # noqa: BLE001 - the write committed; it succeeds without a token
                log.warning("%s: no consistency token: %s", details.method, error)
                return response
            setattr(response, TOKEN_FIELD, token)
            trailing = tuple(context.trailing_metadata() or ())
            context.set_trailing_metadata((*trailing, (CONSISTENCY_TOKEN_METADATA, token)))
            return response

        return wrapped


class ReadTokenInterceptor(_UnaryInterceptor):
    """Makes the ``x-consistency-token`` of a read the required WAL position of the call."""

    def _wrap(self, behavior: _Behavior, details: grpc.HandlerCallDetails) -> _Behavior:
        def wrapped(request: Any, context: grpc.ServicerContext) -> Any:
            token = next(
                (
                    value
                    for key, value in context.invocation_metadata() or ()
                    if key == CONSISTENCY_TOKEN_METADATA
                ),
                None,
            )
            if not token:
                return behavior(request, context)
            reset = required_position_var.set(decode_token(str(token)))
            try:
                return behavior(request, context)
            finally:
                required_position_var.reset(reset)

        return wrapped

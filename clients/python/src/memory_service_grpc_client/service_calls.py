"""`ServiceCalls`: what every call of `MemoryClient` goes through (deadline, retries, errors, metadata).

The per-service mixins of `memory_service_grpc_client.services` derive from it and call `_read` /
`_write` (unary calls) or `_send_stream` (client streams); `MemoryClient` composes them and sets the
attributes declared here.
"""

from __future__ import annotations

from collections.abc import Callable
from collections.abc import Iterable
from typing import Any
from typing import TypeVar

import grpc
from google.protobuf.message import Message

from memory_service_grpc_client import call_policy
from memory_service_grpc_client.channels import ServiceChannels
from memory_service_grpc_client.errors import raise_for_status

__all__ = ["Metadata", "ServiceCalls"]

ResponseT = TypeVar("ResponseT", bound=Message)
Metadata = tuple[tuple[str, str], ...]


class ServiceCalls:
    """The call plumbing shared by the service mixins of `MemoryClient`.

    Attributes:
        _channels: the channel pair to ingest_service and query_service.
        _retry_seconds: how long idempotent calls are retried on UNAVAILABLE (None: the policy's default).
        _retry_reads: False sends reads once.
        _token: the per-call bearer token of a `MemoryClient.with_token` view (None: the channels' own).
    """

    _channels: ServiceChannels
    _retry_seconds: float | None
    _retry_reads: bool
    _token: str | None

    @property
    def ingest_channel(self) -> grpc.Channel:
        """The channel to ingest_service (for bulk helpers such as `observation_loader`)."""
        return self._channels.ingest_channel()

    @property
    def query_channel(self) -> grpc.Channel:
        """The channel to query_service."""
        return self._channels.query_channel()

    def _call_metadata(self) -> Metadata:
        """Metadata of every call: the per-call token of a `with_token` view (consistency tokens travel
        through the channels' interceptors, see the module doc of `memory_service_grpc_client.memory_client`)."""
        if not self._token:
            return ()
        return (("authorization", f"Bearer {self._token}"),)

    def _call(
        self,
        method: Callable[..., ResponseT],
        request: Message,
        *,
        retry: bool,
        timeout: float,
        on_retry: Callable[[str], None] | None = None,
        project_id: str = "",
    ) -> ResponseT:
        metadata = self._call_metadata() + ((("x-project-id", project_id),) if project_id else ())

        def once() -> ResponseT:
            return method(request, timeout=timeout, metadata=metadata)

        try:
            if retry:
                return call_policy.retry_while_unavailable(
                    once, on_retry=on_retry, max_seconds=self._retry_seconds
                )
            return once()
        except grpc.RpcError as exc:
            raise_for_status(exc)

    def _read(self, method: Callable[..., ResponseT], request: Message, *, project_id: str = "") -> ResponseT:
        return self._call(
            method,
            request,
            retry=self._retry_reads,
            timeout=call_policy.READ_TIMEOUT_SECONDS,
            project_id=project_id,
        )

    def _write(
        self,
        method: Callable[..., ResponseT],
        request: Message,
        *,
        idempotent: bool,
        on_retry: Callable[[str], None] | None = None,
        timeout: float | None = None,
        project_id: str = "",
    ) -> ResponseT:
        return self._call(
            method,
            request,
            retry=idempotent,
            timeout=call_policy.WRITE_TIMEOUT_SECONDS if timeout is None else timeout,
            on_retry=on_retry,
            project_id=project_id,
        )

    def _send_stream(
        self, method: Callable[..., ResponseT], requests: Iterable[Any], *, timeout: float
    ) -> ResponseT:
        """A client-streaming call, sent once (an iterator cannot be replayed)."""
        try:
            return method(iter(requests), timeout=timeout, metadata=self._call_metadata())
        except grpc.RpcError as exc:
            raise_for_status(exc)

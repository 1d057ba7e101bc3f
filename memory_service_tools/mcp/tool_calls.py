"""`ToolCalls`: how a tool reaches the services: the client of the call (over HTTP a view carrying the
request's bearer token) and a call whose refusal becomes a tool error."""

from __future__ import annotations

from typing import Any

from google.protobuf.message import Message
from mcp.server.mcpserver import Context
from mcp.server.mcpserver.exceptions import ToolError

from memory_service_grpc_client import MemoryClient
from memory_service_grpc_client import ServiceError
from memory_service_tools.cli.terminal import error_lines

__all__ = ["ToolCalls"]


class ToolCalls:
    """The services as the tool functions see them: one client, and where each call's token comes from."""

    def __init__(self, client: MemoryClient | None, *, token_from_request: bool) -> None:
        self._client = client
        self._token_from_request = token_from_request

    def client_for(self, ctx: Context) -> MemoryClient:
        """The client a tool call uses: over HTTP a view carrying the request's bearer token (or none)."""
        if self._client is None:
            raise ToolError("error: the server has no client")
        if not self._token_from_request:
            return self._client
        headers = ctx.headers or {}
        authorization = next((value for key, value in headers.items() if key.lower() == "authorization"), "")
        scheme, _, token = authorization.strip().partition(" ")
        return self._client.with_token(token.strip() if scheme.lower() == "bearer" else "")

    def call(self, ctx: Context, method_name: str, request: Message, **options: Any) -> Any:
        """``method_name`` of the call's client with ``request``; a refusal becomes a `ToolError`."""
        client = self.client_for(ctx)
        try:
            return getattr(client, method_name)(request, **options)
        except ServiceError as exc:
            raise ToolError("\n".join(error_lines(exc))) from exc

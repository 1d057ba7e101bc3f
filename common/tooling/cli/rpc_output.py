"""The one way a CLI command calls a unary RPC and prints its response.

A command takes a stub on a channel that closes when the command ends (`query_stub`, `ingest_stub`: the
channels of `CliState.channel`) and hands the stub method, its request, the ``--json`` flag and a
renderer to `call_and_print`: a failure becomes ``error: CODE: message`` lines and exit code 1, the
response is printed either as proto3 JSON or by the renderer.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

import grpc
import typer
from google.protobuf import json_format
from google.protobuf.message import Message

from common.tooling.call_policy import READ_TIMEOUT_SECONDS
from common.tooling.cli.cli_state import cli_state
from common.tooling.cli.terminal import reported_errors

ResponseT = TypeVar("ResponseT", bound=Message)
StubT = TypeVar("StubT")


def print_json(message: Message) -> None:
    """Prints ``message`` as indented proto3 JSON (camelCase names, non-ASCII kept) on stdout."""
    typer.echo(json_format.MessageToJson(message, indent=2, ensure_ascii=False))


def _stub(ctx: typer.Context, address: str, stub_class: Callable[[grpc.Channel], StubT]) -> StubT:
    channel = cli_state(ctx).channel(address)
    ctx.call_on_close(channel.close)
    return stub_class(channel)


def query_stub(ctx: typer.Context, stub_class: Callable[[grpc.Channel], StubT]) -> StubT:
    """A ``stub_class`` stub of query_service (``--query-addr``), its channel closed when the command ends."""
    return _stub(ctx, cli_state(ctx).query(), stub_class)


def ingest_stub(ctx: typer.Context, stub_class: Callable[[grpc.Channel], StubT]) -> StubT:
    """A ``stub_class`` stub of ingest_service (``--ingest-addr``), its channel closed when the command
    ends."""
    return _stub(ctx, cli_state(ctx).ingest(), stub_class)


def call_and_print(
    method: Callable[..., ResponseT],
    request: Message,
    *,
    as_json: bool,
    render: Callable[[ResponseT], None],
    timeout: float = READ_TIMEOUT_SECONDS,
) -> None:
    """Calls ``method(request, timeout=timeout)`` and prints the response.

    Args:
        method: a stub method, e.g. ``query_stub(ctx, SourceServiceStub).GetSource``.
        request: its request message.
        as_json: print the response as proto3 JSON instead of calling ``render``.
        render: prints the response for humans.
        timeout: deadline of the call in seconds.

    Raises:
        typer.Exit: exit code 1 after printing the error lines of a failed call.
    """
    with reported_errors():
        response = method(request, timeout=timeout)
    if as_json:
        print_json(response)
        return
    render(response)

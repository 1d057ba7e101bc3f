"""The one way a CLI command calls a unary RPC and prints its response.

A command takes the run's `MemoryClient` (`memory_client`: closed when the command ends) and hands one of
its methods, the request, the ``--json`` flag and a renderer to `call_and_print`: a failure becomes
``error: CODE: message`` lines and exit code 1, the response is printed either as proto3 JSON or by the
renderer.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

import typer
from google.protobuf import json_format
from google.protobuf.message import Message

from memory_service_grpc_client import MemoryClient
from memory_service_tools.cli.cli_state import cli_state
from memory_service_tools.cli.terminal import reported_errors

ResponseT = TypeVar("ResponseT", bound=Message)
RequestT = TypeVar("RequestT", bound=Message)


def print_json(message: Message) -> None:
    """Prints ``message`` as indented proto3 JSON (camelCase names, non-ASCII kept) on stdout."""
    typer.echo(json_format.MessageToJson(message, indent=2, ensure_ascii=False))


def memory_client(ctx: typer.Context) -> MemoryClient:
    """The command's `MemoryClient` (`CliState.client`), closed when the command ends."""
    client = cli_state(ctx).client()
    ctx.call_on_close(client.close)
    return client


def call_and_print(
    method: Callable[[RequestT], ResponseT],
    request: RequestT,
    *,
    as_json: bool,
    render: Callable[[ResponseT], None],
) -> ResponseT:
    """Calls ``method(request)``, prints the response and returns it.

    Args:
        method: a `MemoryClient` method, e.g. ``memory_client(ctx).get_source``.
        request: its request message.
        as_json: print the response as proto3 JSON instead of calling ``render``.
        render: prints the response for humans.

    Raises:
        typer.Exit: exit code 1 after printing the error lines of a failed call.
    """
    with reported_errors():
        response = method(request)
    if as_json:
        print_json(response)
    else:
        render(response)
    return response

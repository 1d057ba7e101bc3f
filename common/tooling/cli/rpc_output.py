"""The one way a CLI command calls a unary RPC and prints its response.

`call_and_print` opens a channel (`CliState.channel`), makes the call, turns a failure into
``error: CODE: message`` lines and exit code 1, and prints the response either as proto3 JSON
(``--json``) or with the command's own renderer.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

import grpc
import typer
from google.protobuf import json_format
from google.protobuf.message import Message

from common.tooling.call_policy import READ_TIMEOUT_SECONDS
from common.tooling.cli.cli_state import CliState
from common.tooling.cli.terminal import reported_errors

ResponseT = TypeVar("ResponseT", bound=Message)


def print_json(message: Message) -> None:
    """Prints ``message`` as indented proto3 JSON (camelCase names, non-ASCII kept) on stdout."""
    typer.echo(json_format.MessageToJson(message, indent=2, ensure_ascii=False))


def call_and_print(
    state: CliState,
    address: str,
    method: Callable[[grpc.Channel], Callable[..., ResponseT]],
    request: Message,
    *,
    as_json: bool,
    render: Callable[[ResponseT], None],
    timeout: float = READ_TIMEOUT_SECONDS,
) -> None:
    """Calls ``method(channel)(request, timeout=timeout)`` on a channel to ``address`` and prints the result.

    Args:
        state: the run's global options (token, TLS files).
        address: ``host:port`` of the service (``state.query()`` or ``state.ingest()``).
        method: gives the stub method on a channel, e.g.
            ``lambda channel: SourceServiceStub(channel).GetSource``.
        request: the request message.
        as_json: print the response as proto3 JSON instead of calling ``render``.
        render: prints the response for humans.
        timeout: deadline of the call in seconds.

    Raises:
        typer.Exit: exit code 1 after printing the error lines of a failed call.
    """
    with reported_errors(), state.channel(address) as channel:
        response = method(channel)(request, timeout=timeout)
    if as_json:
        print_json(response)
        return
    render(response)

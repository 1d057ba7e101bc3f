"""Options several commands share (``--namespace``, ``--json``, ``--as-of``) and the parsing of their values.

An instant given on the command line may leave out its offset (it is read as UTC), unlike instants in
files and over gRPC; the parsing itself is the kernel's (`common.kernel.identifiers.parse_instant`).
"""

from __future__ import annotations

from typing import Annotated
from typing import Any

import typer
from google.protobuf import timestamp_pb2

from common.grpc.proto_mapping import timestamp
from common.kernel import identifiers

NamespaceOption = Annotated[str, typer.Option("--namespace", "-n", help="namespace to read")]
WriteNamespaceOption = Annotated[str, typer.Option("--namespace", "-n", help="namespace to change")]
JsonOption = Annotated[
    bool,
    typer.Option(
        "--json", help="print the result as JSON (the response in proto3 JSON, or the command's report)"
    ),
]
AsOfOption = Annotated[str | None, typer.Option("--as-of", help="ISO 8601 instant; default now")]


def input_file_option(help_text: str) -> Any:
    """``--file`` / ``-f``: an existing, readable file (not a folder) the command reads; for `Annotated`."""
    return typer.Option("--file", "-f", exists=True, dir_okay=False, readable=True, help=help_text)


def mass_sweep_option(help_text: str) -> Any:
    """``--allow-mass-sweep``: the explicit word a sweep needs to remove more than the server's share; for
    `Annotated`."""
    return typer.Option("--allow-mass-sweep", help=help_text)


def parse_instant(text: str) -> timestamp_pb2.Timestamp:
    """Parses an ISO 8601 instant (``2024-05-01``, ``2024-05-01T10:00:00Z``, ``...+03:00``) to a Timestamp.

    A value without a zone is UTC.

    Raises:
        ValueError: not an ISO 8601 date or date-time.
    """
    try:
        moment = identifiers.parse_instant(text, assume_utc=True)
    except ValueError as exc:
        raise ValueError(f"{text!r} is not an ISO 8601 instant (e.g. 2024-05-01T10:00:00Z)") from exc
    return timestamp(moment)


def as_of_timestamp(text: str | None) -> timestamp_pb2.Timestamp | None:
    """The value of ``--as-of``: None when not given (the server's now), else `parse_instant` of it.

    Raises:
        typer.BadParameter: not an ISO 8601 instant (usage error, exit code 2).
    """
    if text is None or not text.strip():
        return None
    try:
        return parse_instant(text)
    except ValueError as exc:
        raise typer.BadParameter(str(exc), param_hint="--as-of") from exc


def key_value_pairs(values: list[str] | None, option: str) -> dict[str, str]:
    """``key=value`` texts of a repeatable option as a dict (a later key wins).

    Raises:
        typer.BadParameter: a text without ``=`` or with an empty key (named by ``option``).
    """
    result: dict[str, str] = {}
    for value in values or []:
        key, sep, item = value.partition("=")
        if not sep or not key:
            raise typer.BadParameter(f"{value!r}: expected key=value", param_hint=option)
        result[key] = item
    return result

"""The command classes of ``cb``: their help shows no value type after a flag.

Typer's rich help prints every option's type, flags included (``--json <bool>``), which reads as if the
flag took a value; click's plain help leaves it out for flags and counters, and so does ``cb``.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from typer.core import TyperCommand
from typer.core import TyperGroup
from typer.core import TyperOption


def hide_flag_types(params: Iterable[Any]) -> None:
    """Gives every flag and counter among ``params`` an empty metavar: its help row then names no type
    (the metavar is only ever shown in help; a flag's parsing never reads it)."""
    for param in params:
        if isinstance(param, TyperOption) and (param.is_flag or param.count):
            param.metavar = ""


class FlagsCommand(TyperCommand):
    """A ``cb`` command: flags without a value type in its help."""

    def format_help(self, ctx: Any, formatter: Any) -> None:  # typer's own click types
        hide_flag_types(self.get_params(ctx))
        super().format_help(ctx, formatter)


class FlagsGroup(TyperGroup):
    """A ``cb`` command group: flags without a value type in its help."""

    def format_help(self, ctx: Any, formatter: Any) -> None:  # typer's own click types
        hide_flag_types(self.get_params(ctx))
        super().format_help(ctx, formatter)

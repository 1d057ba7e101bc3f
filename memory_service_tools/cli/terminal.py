"""What the CLI writes to the terminal: the stdout and stderr consoles, progress bars, and error lines.

Results go to stdout (`out`), everything about the run (progress, tables of context packs, errors) to
stderr (`err`). Errors print as ``error: CODE: message`` plus one ``  - violation`` line per field
violation, and the command exits 1 (`fail`, `reported_errors`).
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Collection
from collections.abc import Iterator
from collections.abc import Sequence
from collections.abc import Sized
from typing import Any
from typing import NoReturn

import grpc
import typer
from rich.console import Console
from rich.console import RenderableType
from rich.markup import escape
from rich.measure import Measurement
from rich.progress import BarColumn
from rich.progress import MofNCompleteColumn
from rich.progress import Progress
from rich.progress import TextColumn
from rich.progress import TimeElapsedColumn
from rich.table import Table

from common.kernel.errors import DomainError
from common.kernel.errors import InvalidArgument
from memory_service_grpc_client import ServiceError
from memory_service_grpc_client import rpc_failure

out = Console(highlight=False, soft_wrap=False)
err = Console(stderr=True, highlight=False)


def fail(lines: Sequence[str], code: int = 1) -> NoReturn:
    """Prints ``lines`` on stderr (markup escaped) and exits with ``code``.

    Raises:
        typer.Exit: always.
    """
    for line in lines:
        err.print(escape(line), soft_wrap=True)
    raise typer.Exit(code)


def error_lines(exc: BaseException) -> list[str]:
    """``error: CODE: message`` and the field violations of a failed call or of a local domain error.

    A failed call is a `grpc.RpcError`, or the `memory_service_grpc_client.ServiceError` that `MemoryClient`
    raises for it.
    """
    if isinstance(exc, grpc.RpcError):
        return rpc_failure(exc).lines()
    if isinstance(exc, ServiceError):
        return exc.lines()
    if isinstance(exc, InvalidArgument):
        return [f"error: {exc.reason}: {exc.message}", *(f"  - {v}" for v in exc.violations)]
    if isinstance(exc, DomainError):
        return [f"error: {exc.reason}: {exc.message}"]
    return [f"error: {exc}"]


@contextlib.contextmanager
def reported_errors() -> Iterator[None]:
    """Turns server and domain errors into ``error: ...`` lines on stderr and exit code 1."""
    try:
        yield
    except (grpc.RpcError, ServiceError, DomainError) as exc:
        fail(error_lines(exc))


def print_wide(renderable: RenderableType) -> None:
    """Prints ``renderable`` (a table of keys and ids) on stdout at its natural width, wider than the
    terminal when it needs to be, so that no key is cut to ``…`` or broken over lines: what a user copies
    from it is whole (a terminal narrower than a line soft-wraps it; a pager or a file keeps it)."""
    natural = Measurement.get(out, out.options.update(width=_UNBOUNDED), renderable).maximum
    if natural <= out.width:
        out.print(renderable)
        return
    Console(
        file=out.file, width=natural, highlight=False, soft_wrap=False, color_system=out.color_system
    ).print(renderable)


_UNBOUNDED = 1 << 16


def printed_none(items: Sized, none: str) -> bool:
    """Whether ``items`` is empty, when ``none`` (e.g. ``no facts``) is printed on stdout in its place."""
    if len(items):
        return False
    out.print(none)
    return True


def column_table(*columns: str, right: Collection[str] = (), **options: Any) -> Table:
    """A rich `Table` headed by ``columns``, in order, those in ``right`` right-aligned (figures), the
    others left-aligned; ``options`` are `Table`'s own, e.g. ``title``."""
    table = Table(**options)
    for name in columns:
        table.add_column(name, justify="right" if name in right else "left")
    return table


def print_lines(lines: Sequence[str], *, none: str) -> None:
    """Prints each of ``lines`` on stdout (markup escaped), or ``none`` on stderr when there are none."""
    if not lines:
        err.print(none)
    for line in lines:
        out.print(escape(line))


def print_text(text: str) -> None:
    """Writes ``text`` as it is to stdout (no markup), ending it with a newline when it has none."""
    sys.stdout.write(text)
    if text and not text.endswith("\n"):
        sys.stdout.write("\n")
    sys.stdout.flush()


def progress_bar() -> Progress:
    """A progress bar on stderr: description, bar, ``done/total``, elapsed time."""
    return Progress(
        TextColumn("[progress.description]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=err,
    )

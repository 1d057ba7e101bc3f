"""``cb db up|down|status`` (the embedded development database, `common.tooling.embedded_db`) and
``cb init-db`` (the schema of ``CB_DATABASE_URL``, `common.storage.database.Database.migrate`).

The database modules are imported inside the commands, so ``cb --help`` stays fast.
"""

from __future__ import annotations

import dataclasses

import typer

from common.kernel.errors import DomainError
from common.tooling.cli.cli_state import cli_state
from common.tooling.cli.terminal import error_lines, fail

db_app = typer.Typer(
    help="The embedded development database (PostgreSQL 17 + AGE + pgvector).", no_args_is_help=True
)


@db_app.command("up")
def db_up() -> None:
    """Build (first time), initialise and start the embedded database; prints its DSN."""
    from common.tooling.embedded_db import EmbeddedDatabaseError, database_up

    try:
        dsn = database_up()
    except (EmbeddedDatabaseError, OSError) as exc:
        fail([f"error: {exc}"])
    typer.echo(dsn)


@db_app.command("down")
def db_down() -> None:
    """Stop the embedded database (nothing to do when it is not running)."""
    from common.tooling.embedded_db import EmbeddedDatabaseError, database_down

    try:
        database_down()
    except (EmbeddedDatabaseError, OSError) as exc:
        fail([f"error: {exc}"])
    typer.echo("embedded database stopped")


@db_app.command("status")
def db_status() -> None:
    """Show the embedded database's state and DSN; exit code 1 when it is not running."""
    from common.tooling.embedded_db import EmbeddedDatabaseError, database_status

    try:
        status = database_status()
    except (EmbeddedDatabaseError, OSError) as exc:
        fail([f"error: {exc}"])
    if dataclasses.is_dataclass(status) and not isinstance(status, type):
        for key, value in dataclasses.asdict(status).items():
            typer.echo(f"{key + ':':<14}{value}")
    else:
        typer.echo(str(status))
    if not getattr(status, "running", True):
        raise typer.Exit(1)


def init_db(ctx: typer.Context) -> None:
    """Create or upgrade the schema (extensions, graph, tables, indexes) of CB_DATABASE_URL now."""
    from common.storage.database import Database

    database = Database(cli_state(ctx).settings())
    try:
        applied = database.migrate()
    except (DomainError, OSError) as exc:
        fail(error_lines(exc))
    finally:
        database.close()
    if applied:
        for name in applied:
            typer.echo(f"applied {name}")
    else:
        typer.echo("schema up to date: no migration applied")

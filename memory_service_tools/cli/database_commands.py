"""``cb db up|down|status`` (the embedded development database, `memory_service_tools.embedded_db`) and
``cb init-db`` (the schema of ``CB_DATABASE_URL``, `common.storage.schema.migrations.apply`).

The embedded database is standard library only (cheap to import); the storage layer is imported inside
``init-db``, so ``cb --help`` stays fast.
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Iterator

import typer

from common.kernel.errors import DomainError
from memory_service_tools.cli.cli_state import cli_state
from memory_service_tools.cli.terminal import error_lines
from memory_service_tools.cli.terminal import fail
from memory_service_tools.embedded_db import EmbeddedDatabaseError
from memory_service_tools.embedded_db import database_down
from memory_service_tools.embedded_db import database_status
from memory_service_tools.embedded_db import database_up
from memory_service_tools.embedded_db.replica import replica_down
from memory_service_tools.embedded_db.replica import replica_status
from memory_service_tools.embedded_db.replica import replica_up

_REPLICA_HELP = "the streaming replica of the embedded database (127.0.0.1:55433) instead of the database"

db_app = typer.Typer(
    help="The embedded development database (PostgreSQL 17 + AGE + pgvector).", no_args_is_help=True
)


@contextlib.contextmanager
def _reported_database_errors() -> Iterator[None]:
    """Turns a failure of the embedded database into ``error: ...`` on stderr and exit code 1."""
    try:
        yield
    except (EmbeddedDatabaseError, OSError) as exc:
        fail([f"error: {exc}"])


@db_app.command("up")
def db_up(
    replica: bool = typer.Option(False, "--replica", help=_REPLICA_HELP),
    rebuild: bool = typer.Option(False, "--rebuild", help="with --replica: copy the primary again"),
) -> None:
    """Build (first time), initialise and start the embedded database; prints its DSN."""
    with _reported_database_errors():
        dsn = replica_up(rebuild=rebuild) if replica else database_up()
    typer.echo(dsn)


@db_app.command("down")
def db_down(replica: bool = typer.Option(False, "--replica", help=_REPLICA_HELP)) -> None:
    """Stop the embedded database (nothing to do when it is not running)."""
    with _reported_database_errors():
        if replica:
            replica_down()
        else:
            database_down()
    typer.echo("embedded replica stopped" if replica else "embedded database stopped")


@db_app.command("status")
def db_status(replica: bool = typer.Option(False, "--replica", help=_REPLICA_HELP)) -> None:
    """Show the embedded database's state and DSN; exit code 1 when it is not running."""
    with _reported_database_errors():
        status = replica_status() if replica else database_status()
    for key, value in dataclasses.asdict(status).items():
        typer.echo(f"{key + ':':<14}{value}")
    if not status.running:
        raise typer.Exit(1)


def init_db(ctx: typer.Context) -> None:
    """Create or upgrade the schema (extensions, graph, tables, indexes) of CB_DATABASE_URL now."""
    from common.storage.database import Database
    from common.storage.schema import migrations

    database = Database(cli_state(ctx).settings(), prepare=migrations.apply)
    try:
        applied = migrations.apply(database)
    except (DomainError, OSError) as exc:
        fail(error_lines(exc))
    finally:
        database.close()
    if applied:
        for name in applied:
            typer.echo(f"applied {name}")
    else:
        typer.echo("schema up to date: no migration applied")


def index_tenants(
    ctx: typer.Context,
    min_rows: int | None = typer.Option(
        None,
        "--min-rows",
        min=0,
        help="embedded chunks a namespace needs for its own index (default CB_TENANT_VECTOR_INDEX_MIN_ROWS; 0 drops all)",
    ),
) -> None:
    """Build the per-tenant vector indexes of CB_DATABASE_URL's chunks table now (and drop unneeded ones).

    A namespace with at least --min-rows embedded chunks and less than half of the table gets an HNSW
    index partial to it (`common.storage.chunks.tenant_vector_indexes`); prints one line per change.
    """
    from common.storage.chunks.tenant_vector_indexes import TenantVectorIndexes
    from common.storage.database import Database
    from common.storage.schema import migrations

    settings = cli_state(ctx).settings()
    database = Database(settings, prepare=migrations.apply)
    try:
        migrations.apply(database)
        changes = TenantVectorIndexes(settings).synchronise(min_rows)
    except (DomainError, OSError) as exc:
        fail(error_lines(exc))
    finally:
        database.close()
    for change in changes:
        index = change.index_name or "(the table's index)"
        rows = f"user={change.user_id} memories={change.rows}" if change.user_id else f"chunks={change.rows}"
        typer.echo(f"{change.action} {index} namespace={change.namespace} {rows} seconds={change.seconds}")
    if not changes:
        typer.echo("tenant vector indexes up to date")

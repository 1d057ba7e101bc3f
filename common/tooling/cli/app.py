"""The ``cb`` typer application: the global options and every command, registered in help order.

Each command lives in the module of its group; this module only names them.
"""

from __future__ import annotations

from typing import Annotated

import typer

from common.tooling.cli.cli_state import CliState
from common.tooling.cli.context_commands import context, typed_context
from common.tooling.cli.database_commands import db_app, init_db
from common.tooling.cli.pack_commands import pack_app
from common.tooling.cli.read_commands import facts, search, source, trace
from common.tooling.cli.service_commands import serve, up
from common.tooling.cli.token_commands import token_app
from common.tooling.cli.write_commands import delete_node, observe, reconcile, retain

app = typer.Typer(
    name="cb",
    help="memory-service: run the services and talk to them.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode="markdown",
)


@app.callback()
def _global_options(
    ctx: typer.Context,
    ingest_addr: Annotated[
        str | None,
        typer.Option(
            "--ingest-addr", help="ingest_service host:port (default: CB_INGEST_ADDR or 127.0.0.1:50051)"
        ),
    ] = None,
    query_addr: Annotated[
        str | None,
        typer.Option(
            "--query-addr", help="query_service host:port (default: CB_QUERY_ADDR or 127.0.0.1:50052)"
        ),
    ] = None,
    token: Annotated[
        str | None,
        typer.Option(
            "--token",
            help="bearer token sent with every call (default: CB_TOKEN)",
            show_default=False,
        ),
    ] = None,
) -> None:
    ctx.obj = CliState(ingest_addr=ingest_addr, query_addr=query_addr, token=token)


# Database and services
app.command("init-db")(init_db)
app.command("serve")(serve)
app.command("up")(up)
# Writes (ingest_service)
app.command("observe")(observe)
app.command("reconcile")(reconcile)
app.command("retain")(retain)
# Reads (query_service)
app.command("search")(search)
app.command("facts")(facts)
app.command("source")(source)
app.command("context")(context)
app.command("typed-context")(typed_context)
app.command("delete")(delete_node)
app.command("trace")(trace)
# Command groups
app.add_typer(db_app, name="db")
app.add_typer(token_app, name="token")
app.add_typer(pack_app, name="pack")

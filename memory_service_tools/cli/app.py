"""The ``cb`` typer application: the global options and every command, registered in help order.

Each command lives in the module of its group; this module only names them.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated

import typer
from typer.core import TyperCommand

from memory_service_tools.cli.audit_commands import audit
from memory_service_tools.cli.change_feed_commands import watch
from memory_service_tools.cli.change_feed_commands import webhook_app
from memory_service_tools.cli.cli_state import CliState
from memory_service_tools.cli.console_commands import console
from memory_service_tools.cli.context_commands import context
from memory_service_tools.cli.context_commands import typed_context
from memory_service_tools.cli.data_protection_commands import erase
from memory_service_tools.cli.data_protection_commands import export
from memory_service_tools.cli.data_protection_commands import hold_app
from memory_service_tools.cli.data_protection_commands import import_
from memory_service_tools.cli.data_protection_commands import receipt
from memory_service_tools.cli.data_protection_commands import retention_app
from memory_service_tools.cli.database_commands import db_app
from memory_service_tools.cli.database_commands import index_tenants
from memory_service_tools.cli.database_commands import init_db
from memory_service_tools.cli.health_commands import health
from memory_service_tools.cli.help_format import FlagsCommand
from memory_service_tools.cli.help_format import FlagsGroup
from memory_service_tools.cli.mcp_commands import McpCommand
from memory_service_tools.cli.mcp_commands import mcp
from memory_service_tools.cli.memory_commands import memory_app
from memory_service_tools.cli.namespace_commands import namespaces
from memory_service_tools.cli.namespace_commands import stats
from memory_service_tools.cli.pack_commands import pack_app
from memory_service_tools.cli.read_commands import facts
from memory_service_tools.cli.read_commands import search
from memory_service_tools.cli.read_commands import source
from memory_service_tools.cli.read_commands import trace
from memory_service_tools.cli.service_commands import serve
from memory_service_tools.cli.service_commands import up
from memory_service_tools.cli.token_commands import token_app
from memory_service_tools.cli.vault_commands import ingest
from memory_service_tools.cli.worker_commands import worker
from memory_service_tools.cli.write_commands import delete_node
from memory_service_tools.cli.write_commands import observe
from memory_service_tools.cli.write_commands import reconcile
from memory_service_tools.cli.write_commands import retain

app = typer.Typer(
    name="cb",
    help="memory-service: run the services and talk to them.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode="markdown",
    cls=FlagsGroup,
)


def _print_version(value: bool) -> None:
    if value:
        from importlib.metadata import PackageNotFoundError
        from importlib.metadata import version

        try:
            installed = version("memory-service")
        except PackageNotFoundError:
            installed = "unknown (not installed)"
        typer.echo(f"cb (memory-service) {installed}")
        raise typer.Exit()


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
    _version: Annotated[
        bool,
        typer.Option("--version", is_eager=True, callback=_print_version, help="print the version and exit"),
    ] = False,
    consistent: Annotated[
        bool,
        typer.Option(
            "--consistent",
            help="reads see the last write made by cb (its consistency token, kept in "
            "CB_CONSISTENCY_TOKEN_FILE or ~/.local/state/memory-service/consistency-token)",
        ),
    ] = False,
) -> None:
    ctx.obj = CliState(ingest_addr=ingest_addr, query_addr=query_addr, token=token, consistent=consistent)


COMMANDS: tuple[tuple[str, Callable[..., None]], ...] = (
    ("init-db", init_db),  # database and services
    ("index-tenants", index_tenants),
    ("serve", serve),
    ("up", up),
    ("worker", worker),
    ("health", health),
    ("observe", observe),  # writes (ingest_service)
    ("reconcile", reconcile),
    ("retain", retain),
    ("ingest", ingest),
    ("namespaces", namespaces),  # reads (query_service)
    ("stats", stats),
    ("search", search),
    ("facts", facts),
    ("source", source),
    ("context", context),
    ("typed-context", typed_context),
    ("delete", delete_node),
    ("trace", trace),
    ("audit", audit),
    ("watch", watch),
    ("erase", erase),  # data protection (admin)
    ("receipt", receipt),
    ("export", export),
    ("import", import_),
    ("mcp", mcp),  # agents (MCP server over both services)
    ("console", console),  # people (web console over both services)
)
COMMAND_GROUPS: tuple[tuple[str, typer.Typer], ...] = (
    ("db", db_app),
    ("token", token_app),
    ("pack", pack_app),
    ("memory", memory_app),
    ("webhook", webhook_app),
    ("hold", hold_app),
    ("retention", retention_app),
)

for name, command in COMMANDS:
    app.command(name, cls=McpCommand if command is mcp else FlagsCommand)(command)
for name, group in COMMAND_GROUPS:
    for info in group.registered_commands:
        if info.cls in (None, TyperCommand):  # registered with typer's default class
            info.cls = FlagsCommand
    app.add_typer(group, name=name, cls=FlagsGroup)

"""``cb console``: the web console (`memory_service_tools.console`) over both services, served by uvicorn."""

from __future__ import annotations

from typing import Annotated

import typer

from memory_service_tools.cli.cli_state import cli_state
from memory_service_tools.cli.terminal import fail


def console(
    ctx: typer.Context,
    host: Annotated[str, typer.Option("--host", help="address the console binds")] = "127.0.0.1",
    port: Annotated[int, typer.Option("--port", min=1, max=65535, help="HTTP port of the console")] = 8780,
    namespace: Annotated[
        list[str] | None,
        typer.Option(
            "--namespace", "-n", help="a namespace the start page lists even when empty (repeatable)"
        ),
    ] = None,
    secure_cookie: Annotated[
        bool,
        typer.Option("--secure-cookie", help="mark the token cookie Secure (behind HTTPS)"),
    ] = False,
) -> None:
    """Serve the web console on http://HOST:PORT: read-only pages over the services (``--ingest-addr``,
    ``--query-addr``); each visitor signs in with a bearer token and sees what that token may read."""
    import uvicorn

    from memory_service_tools.console import ConsoleConfig
    from memory_service_tools.console import create_app

    state = cli_state(ctx)
    security = state.security()
    try:
        security.channel_credentials()
    except ValueError as exc:
        fail([f"error: {exc}"])
    config = ConsoleConfig(
        ingest_addr=state.ingest(),
        query_addr=state.query(),
        security=security,
        namespaces=tuple(namespace or ()),
        secure_cookie=secure_cookie,
    )
    typer.echo(
        f"console on http://{host}:{port}/ (services {config.ingest_addr}, {config.query_addr})", err=True
    )
    # The access log prints paths and query strings only; the token travels in a cookie, never there.
    uvicorn.run(create_app(config), host=host, port=port, log_level="info")

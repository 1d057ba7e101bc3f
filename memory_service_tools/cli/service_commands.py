"""``cb serve ingest|query`` (one service in the foreground) and ``cb up`` (database, both services and
the enrichment worker, supervised by `memory_service_tools.cli.supervisor`).

The services are imported inside ``serve``: they sit below the tooling, and ``cb --help`` stays fast.
"""

from __future__ import annotations

from enum import Enum
from typing import Annotated

import typer

from memory_service_tools.cli.cli_state import cli_state
from memory_service_tools.cli.supervisor import run_until_stopped
from memory_service_tools.cli.terminal import fail


class ServiceKind(str, Enum):
    """The service ``cb serve`` runs."""

    ingest = "ingest"
    query = "query"


def serve(
    ctx: typer.Context,
    service: Annotated[ServiceKind, typer.Argument(help="which service to run")],
    log_level: Annotated[
        str | None, typer.Option("--log-level", help="DEBUG, INFO, WARNING, ERROR (default: CB_LOG_LEVEL)")
    ] = None,
) -> None:
    """Run ingest_service or query_service in the foreground until SIGTERM/Ctrl-C.

    Without CB_TOKENS_FILE the service runs in development mode (no authentication), which is refused
    unless its address is a loopback one; see docs/explanation/security-model.md. Logs are JSON lines on stderr
    (``CB_LOG_FORMAT=text`` for text); with ``CB_OTLP_ENDPOINT`` set, traces are exported by OTLP.
    ``CB_QUERY_PROCESSES=N`` runs the query service as N worker processes on its one port (docs/decisions/0005-query-worker-processes.md).
    """
    from common.grpc.security import ServerSetupError
    from common.grpc.security import checked_token_store
    from common.grpc.security import server_credentials
    from common.grpc.telemetry import configure_logging
    from common.grpc.telemetry import configure_tracing

    state = cli_state(ctx)
    settings = state.settings()
    try:
        configure_logging(log_level or settings.log_level, settings.log_format)
    except ValueError as exc:
        raise typer.BadParameter(str(exc), param_hint="--log-level") from exc
    configure_tracing(settings, f"{service.value}_service")
    address = state.ingest() if service is ServiceKind.ingest else state.query()
    try:  # refuse an insecure or broken configuration before loading the embedding model
        checked_token_store(settings, address=address, service_name=f"{service.value}_service")
        server_credentials(settings)
        if service is ServiceKind.ingest:
            from ingest_service.main import serve as serve_ingest

            serve_ingest(settings)
        else:
            from query_service.main import serve as serve_query

            serve_query(settings)
    except (ServerSetupError, ValueError) as exc:  # ValueError: embedding provider/dimension, tokenizer
        fail([f"error: {exc}"])


def up(
    ctx: typer.Context,
    timeout: Annotated[float, typer.Option(help="seconds to wait for both services to be SERVING")] = 120.0,
    worker: Annotated[
        bool, typer.Option("--worker/--no-worker", help="also run the enrichment worker (cb worker)")
    ] = True,
) -> None:
    """Start the embedded database, both services and the enrichment worker; stop them on Ctrl-C or
    SIGTERM.

    The database is stopped on exit only when this command started it. On the embedded server the services
    use a database of this checkout's own (``cb_<folder>_<hash of the path>``, created on first use and
    named on start), so two checkouts never share development data.

    The services run as child processes (``cb serve ingest`` / ``cb serve query``), and once both are
    SERVING the worker (``cb worker``, unless --no-worker). When CB_DATABASE_URL points to another
    database, the embedded one is neither started nor stopped. If a child exits, everything is stopped
    and the exit code is 1.
    """
    raise typer.Exit(run_until_stopped(cli_state(ctx), timeout, worker=worker))

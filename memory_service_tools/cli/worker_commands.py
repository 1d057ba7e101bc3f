"""``cb worker``: the enrichment worker in the foreground.

The worker is imported inside the command: it sits below the tooling, and ``cb --help`` stays fast.
"""

from __future__ import annotations

from typing import Annotated

import typer

from memory_service_tools.cli.cli_state import cli_state
from memory_service_tools.cli.terminal import fail


def worker(
    ctx: typer.Context,
    concurrency: Annotated[
        int | None,
        typer.Option(
            "--concurrency", min=1, max=64, help="jobs run at once (default: CB_WORKER_CONCURRENCY)"
        ),
    ] = None,
    log_level: Annotated[
        str | None, typer.Option("--log-level", help="DEBUG, INFO, WARNING, ERROR (default: CB_LOG_LEVEL)")
    ] = None,
) -> None:
    """Run the enrichment worker until SIGTERM/Ctrl-C: memories' enrichment jobs, the sweep that enqueues
    due memories, the tier policy and the expiry sweep (docs/how-to/enrichment.md).

    It migrates the database first (idempotent), loads the language models, then runs the queue on
    CB_DATABASE_URL. On SIGTERM or Ctrl-C it stops fetching jobs and waits for the running ones
    (at most CB_SHUTDOWN_GRACE_SECONDS; a job cut off then is retried later).
    """
    from common.grpc.telemetry import configure_logging

    settings = cli_state(ctx).settings()
    try:
        configure_logging(log_level or settings.log_level, settings.log_format)
    except ValueError as exc:
        raise typer.BadParameter(str(exc), param_hint="--log-level") from exc
    from ingest_service.worker import run_worker

    try:
        run_worker(settings, concurrency or settings.worker_concurrency)
    except ValueError as exc:  # enricher settings (CB_ENRICHMENT_LLM_*), embedding provider
        fail([f"error: {exc}"])

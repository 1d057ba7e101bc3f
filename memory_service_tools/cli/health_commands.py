"""``cb health``: the state of both services and of the database, as a table (or ``--json``) and an exit
code a script or a probe can test."""

from __future__ import annotations

import enum
import json
import os
from typing import Annotated

import typer
from rich.markup import escape

from common.kernel.config import EMBEDDED_DATABASE_URL
from common.kernel.config import Settings
from memory_service_tools.cli.checkout_database import checkout_database_url
from memory_service_tools.cli.cli_state import cli_state
from memory_service_tools.cli.option_types import JsonOption
from memory_service_tools.cli.terminal import column_table
from memory_service_tools.cli.terminal import out


class HealthExit(enum.IntEnum):
    """Exit codes of ``cb health`` (2 stays typer's usage error)."""

    HEALTHY = 0  # both services SERVING, the database reachable
    DEGRADED = 1  # a service up but NOT_SERVING (its database not ready), or the database unreachable
    DOWN = 3  # a service unreachable


def _database_state(url: str, timeout: float) -> tuple[str, str]:
    """``("reachable", "")`` when a connection to ``url`` opens within ``timeout`` seconds, else
    ``("unreachable", reason)``. Opens and closes one connection; runs no statement."""
    import psycopg

    try:
        psycopg.connect(url, connect_timeout=max(1, int(timeout))).close()
    except psycopg.Error as exc:
        return "unreachable", str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    return "reachable", ""


def _replica_rows(settings: Settings, timeout: float) -> list[dict[str, str]]:
    """One row per read replica of CB_READ_DATABASE_URL: ``streaming`` with its lag (bytes of WAL not
    replayed, seconds since its last replayed commit), ``not a standby``, or ``unreachable``."""
    from psycopg import Error as DatabaseError

    from common.storage.replicas.read_routing import read_database_urls
    from common.storage.replicas.wal_position import replica_lag

    rows = []
    for url in read_database_urls(settings):
        row = {"component": "read replica", "address": _without_password(url)}
        try:
            lag = replica_lag(settings.database_url, url, timeout_seconds=timeout)
        except DatabaseError as exc:
            row.update(
                state="unreachable", detail=str(exc).strip().splitlines()[0] if str(exc).strip() else ""
            )
        else:
            seconds = "unknown" if lag.lag_seconds is None else f"{lag.lag_seconds:.1f} s"
            row.update(
                state="streaming" if lag.standby else "not a standby",
                detail=f"lag {lag.lag_bytes} bytes, last replayed commit {seconds} ago",
                lag_bytes=str(lag.lag_bytes),
            )
        rows.append(row)
    return rows


def health(
    ctx: typer.Context,
    as_json: JsonOption = False,
    timeout: Annotated[float, typer.Option("--timeout", min=0.5, help="seconds per check")] = 3.0,
    database: Annotated[
        bool,
        typer.Option(
            "--database/--no-database",
            help="also connect to CB_DATABASE_URL (on the embedded server: this checkout's database, as `cb up`"
            " uses it; skip where the CLI cannot reach the database)",
        ),
    ] = True,
) -> None:
    """Check ingest_service, query_service (grpc.health.v1), the database (CB_DATABASE_URL) and each read
    replica of CB_READ_DATABASE_URL (streaming, with its lag).

    Exit code: 0 healthy, 1 degraded (a service NOT_SERVING, the database or a replica unreachable, or a
    replica that is not a standby), 3 a service unreachable.
    """
    from memory_service_grpc_client import health_status

    state = cli_state(ctx)
    settings = state.settings()
    rows: list[dict[str, str]] = []
    with state.client() as client:
        for name, address, channel in (
            ("ingest_service", state.ingest(), client.ingest_channel),
            ("query_service", state.query(), client.query_channel),
        ):
            rows.append(
                {"component": name, "address": address, "state": health_status(channel, timeout=timeout)}
            )
    if database:
        # without CB_DATABASE_URL the services of `cb up` use this checkout's own database on the embedded
        # server; a URL given explicitly is checked as it is
        embedded = "CB_DATABASE_URL" not in os.environ and settings.database_url == EMBEDDED_DATABASE_URL
        url = checkout_database_url(settings.database_url) if embedded else settings.database_url
        reached, reason = _database_state(url, timeout)
        rows.append({"component": "database", "address": _without_password(url), "state": reached})
        if reason:
            rows[-1]["detail"] = reason
        rows.extend(_replica_rows(settings, timeout))
    services = [row["state"] for row in rows if row["component"] not in ("database", "read replica")]
    if any(value == "UNREACHABLE" for value in services):
        code = HealthExit.DOWN
    elif all(row["state"] in ("SERVING", "reachable", "streaming") for row in rows):
        code = HealthExit.HEALTHY
    else:
        code = HealthExit.DEGRADED
    if as_json:
        typer.echo(json.dumps({"state": code.name.lower(), "components": rows}, indent=2))
    else:
        table = column_table("component", "address", "state")
        for row in rows:
            detail = f" ({row['detail']})" if row.get("detail") else ""
            table.add_row(row["component"], escape(row["address"]), escape(row["state"] + detail))
        out.print(table)
        out.print(code.name.lower())
    raise typer.Exit(int(code))


def _without_password(url: str) -> str:
    """The DSN with its password replaced by ``***`` (URL or key=value form)."""
    from psycopg.conninfo import conninfo_to_dict
    from psycopg.conninfo import make_conninfo

    try:
        parts = conninfo_to_dict(url)
    except Exception:  # noqa: BLE001 - an unparsable DSN is shown as nothing rather than leaked
        return "(invalid CB_DATABASE_URL)"
    if parts.get("password"):
        parts["password"] = "***"
    return make_conninfo(**{key: str(value) for key, value in parts.items() if value is not None})

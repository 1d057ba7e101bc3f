"""``python -m memory_service_tools.embedded_db up|down|status``: the embedded database's command line
(the Makefile's ``make db`` and CI call it before the project's dependencies are installed; stdlib only).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from memory_service_tools.embedded_db.cluster import DatabaseStatus
from memory_service_tools.embedded_db.cluster import database_down
from memory_service_tools.embedded_db.cluster import database_status
from memory_service_tools.embedded_db.cluster import database_up
from memory_service_tools.embedded_db.layout import EmbeddedDatabaseError
from memory_service_tools.embedded_db.replica import REPLICA_PORT
from memory_service_tools.embedded_db.replica import replica_down
from memory_service_tools.embedded_db.replica import replica_status
from memory_service_tools.embedded_db.replica import replica_up


def _format_status(status: DatabaseStatus) -> str:
    state = "running" if status.running else "stopped"
    if status.running and status.pid is not None:
        state += f" (pid {status.pid})"
    lines = [
        f"state:    {state}",
        f"dsn:      {status.dsn}",
        f"rootfs:   {status.rootfs}" + ("" if status.rootfs_ready else " (not built yet)"),
        f"data dir: {status.data_dir}",
    ]
    if status.log_file is not None:
        lines.append(f"log:      {status.log_file}")
    return "\n".join(lines)


def _replica_command(command: str, *, rebuild: bool, port: int) -> int:
    if command == "up":
        print(replica_up(rebuild=rebuild, port=port), flush=True)
        return 0
    if command == "down":
        replica_down(port)
        return 0
    status = replica_status(port)
    state = f"running (pid {status.pid})" if status.running else "stopped"
    print(f"state:    {state}\ndsn:      {status.dsn}", flush=True)
    return 0 if status.running else 1


def main(argv: Sequence[str] | None = None) -> int:
    """Command-line entry point: ``python -m memory_service_tools.embedded_db up|down|status``.

    Args:
        argv: Arguments without the program name; defaults to ``sys.argv[1:]``.

    Returns:
        The exit code: 0 on success (for ``status``: running), 1 on failure (for ``status``: stopped).
    """
    parser = argparse.ArgumentParser(
        prog="python -m memory_service_tools.embedded_db",
        description="Embedded development PostgreSQL 17 + AGE + pgvector (Debian trixie chroot, needs root).",
    )
    parser.add_argument(
        "command",
        choices=("up", "down", "status"),
        help="up: build/init/start, print the DSN; down: stop; status: print the state (exit 1 if stopped)",
    )
    parser.add_argument(
        "--replica",
        action="store_true",
        help="the streaming replica of the running database (127.0.0.1:55433) instead of the database",
    )
    parser.add_argument("--rebuild", action="store_true", help="with up --replica: copy the primary again")
    parser.add_argument(
        "--port",
        type=int,
        default=REPLICA_PORT,
        help=f"with --replica: another replica of the primary on this port (default {REPLICA_PORT})",
    )
    try:
        args = parser.parse_args(list(argv) if argv is not None else None)
    except SystemExit as exit_request:  # usage errors exit 1 (not argparse's 2); --help exits 0
        return 0 if exit_request.code in (0, None) else 1
    try:
        if args.replica:
            return _replica_command(args.command, rebuild=args.rebuild, port=args.port)
        if args.command == "up":
            print(database_up(), flush=True)
            return 0
        if args.command == "down":
            database_down()
            return 0
        status = database_status()
        print(_format_status(status), flush=True)
        return 0 if status.running else 1
    except EmbeddedDatabaseError as error:
        print(f"error: {error}", file=sys.stderr, flush=True)
        return 1
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr, flush=True)
        return 1

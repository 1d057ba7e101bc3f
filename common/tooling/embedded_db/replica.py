"""A streaming replica of the embedded database, for read-replica tests (stdlib only).

``up --replica`` copies the running primary with ``pg_basebackup -R -X stream`` into a second data
directory of the same rootfs (`REPLICA_DATA_DIR`) and starts it as a hot standby on `REPLICA_PORT`
(127.0.0.1 only, like the primary). ``down --replica`` stops only the replica; the primary is never
stopped, restarted or reconfigured here.

What the primary needs is what ``initdb`` gives the embedded database anyway: ``wal_level`` ``replica``,
``max_wal_senders`` > 0 and the ``host replication all 127.0.0.1/32 trust`` line of its ``pg_hba.conf``;
``up --replica`` checks them and names what is missing. No replication slot is kept (a stopped replica
must never make the shared primary keep WAL without bound), so a replica that was stopped for long may
not catch up: ``up --replica --rebuild`` copies the primary again.
"""

from __future__ import annotations

import dataclasses
import shlex
import subprocess

from common.tooling.embedded_db.chroot_commands import as_postgres, in_chroot, require_root
from common.tooling.embedded_db.cluster import (
    _locked,
    _port_open,
    _prepare_runtime,
    database_up,
    is_our_postmaster,
    read_postmaster_pid,
)
from common.tooling.embedded_db.layout import (
    HOST,
    MAX_CONNECTIONS,
    PG_BIN,
    PORT,
    SOCKET_DIR,
    EmbeddedDatabaseError,
    Layout,
    default_layout,
    log,
    tail,
)

__all__ = [
    "REPLICA_DSN",
    "REPLICA_PORT",
    "ReplicaStatus",
    "replica_down",
    "replica_status",
    "replica_up",
]

REPLICA_PORT = PORT + 1
REPLICA_DSN = f"postgresql://postgres@{HOST}:{REPLICA_PORT}/postgres"
REPLICA_DATA_DIR = "/var/lib/postgresql/replica"
REPLICA_LOG_FILE = "/var/lib/postgresql/replica.log"


@dataclasses.dataclass(frozen=True)
class ReplicaStatus:
    """State of the embedded replica.

    Attributes:
        running: whether its postmaster runs.
        dsn: its connection string.
        pid: process id of its postmaster, or None.
        built: whether its data directory exists (a base backup was taken).
    """

    running: bool
    dsn: str
    pid: int | None
    built: bool


def replica_status() -> ReplicaStatus:
    """Inspects the replica without changing anything."""
    layout = default_layout()
    data_dir = layout.rootfs / REPLICA_DATA_DIR.lstrip("/")
    try:
        pid = read_postmaster_pid(data_dir)
        built = (data_dir / "PG_VERSION").exists()
    except PermissionError:
        running = _port_open(HOST, REPLICA_PORT)
        return ReplicaStatus(running=running, dsn=REPLICA_DSN, pid=None, built=True)
    running = pid is not None and is_our_postmaster(pid, layout.rootfs)
    return ReplicaStatus(running=running, dsn=REPLICA_DSN, pid=pid if running else None, built=built)


def replica_up(*, rebuild: bool = False) -> str:
    """Makes sure the replica runs: starts the primary if it is down (`database_up`, idempotent), takes a
    base backup the first time (or when ``rebuild``), starts the standby.

    Returns:
        The replica's DSN.

    Raises:
        EmbeddedDatabaseError: not root, the primary does not allow replication, backup or start failed.
    """
    require_root("start the embedded replica")
    database_up()
    layout = default_layout()
    with _locked(layout):
        status = replica_status()
        if status.running and not rebuild:
            log(f"replica already running (pid {status.pid}) on {HOST}:{REPLICA_PORT}")
            return REPLICA_DSN
        if status.running:
            _stop(layout)
        _prepare_runtime(layout)
        if _port_open(HOST, REPLICA_PORT):
            raise EmbeddedDatabaseError(f"port {HOST}:{REPLICA_PORT} is taken by another process")
        if rebuild or not replica_status().built:
            _check_primary(layout)
            _base_backup(layout)
        _start(layout)
    return REPLICA_DSN


def replica_down() -> None:
    """Stops the replica (``pg_ctl stop -m fast`` on its data directory only); nothing when it is down.

    Raises:
        EmbeddedDatabaseError: not root, or pg_ctl failed.
    """
    require_root("stop the embedded replica")
    layout = default_layout()
    with _locked(layout):
        if not replica_status().running:
            log("replica not running")
            return
        _stop(layout)


def _psql(layout: Layout, query: str) -> str:
    command = shlex.join(
        [f"{PG_BIN}/psql", "-h", SOCKET_DIR, "-p", str(PORT), "-U", "postgres", "-tAc", query]
    )
    result = as_postgres(layout.rootfs, command)
    if result.returncode != 0:
        raise EmbeddedDatabaseError(f"the primary did not answer {query!r}:\n{result.stdout.strip()}")
    return result.stdout.strip()


def _check_primary(layout: Layout) -> None:
    missing = []
    if _psql(layout, "SHOW wal_level") not in {"replica", "logical"}:
        missing.append("wal_level = replica (needs a restart of the primary)")
    if int(_psql(layout, "SHOW max_wal_senders") or 0) < 1:
        missing.append("max_wal_senders >= 1 (needs a restart of the primary)")
    rules = _psql(
        layout,
        "SELECT count(*) FROM pg_hba_file_rules WHERE 'replication' = ANY(database) "
        "AND type = 'host' AND address = '127.0.0.1'",
    )
    if rules in {"", "0"}:
        missing.append("a pg_hba.conf line `host replication all 127.0.0.1/32 trust` (then pg_reload_conf())")
    if missing:
        raise EmbeddedDatabaseError("the primary does not allow a streaming replica: " + "; ".join(missing))


def _base_backup(layout: Layout) -> None:
    in_chroot(layout.rootfs, ["rm", "-rf", REPLICA_DATA_DIR])
    log(f"pg_basebackup -R from {HOST}:{PORT} into {REPLICA_DATA_DIR} (inside the rootfs)")
    command = shlex.join(
        [
            f"{PG_BIN}/pg_basebackup",
            *("-h", HOST, "-p", str(PORT), "-U", "postgres"),
            *("-D", REPLICA_DATA_DIR, "-R", "-X", "stream", "-c", "fast"),
            "--no-password",
        ]
    )
    result = as_postgres(layout.rootfs, command)
    if result.returncode != 0:
        raise EmbeddedDatabaseError(f"pg_basebackup failed:\n{result.stdout.strip()}")


def _start(layout: Layout) -> None:
    in_chroot(layout.rootfs, ["rm", "-f", f"{REPLICA_DATA_DIR}/postmaster.pid"])
    options = (
        f"-p {REPLICA_PORT} -c listen_addresses={HOST} -c shared_preload_libraries=age "
        f"-c max_connections={MAX_CONNECTIONS} -c hot_standby=on"
    )
    command = shlex.join(
        [
            f"{PG_BIN}/pg_ctl",
            "-D",
            REPLICA_DATA_DIR,
            "-l",
            REPLICA_LOG_FILE,
            "-w",
            "-t",
            "120",
            "-o",
            options,
            "start",
        ]
    )
    log(f"starting the replica on {HOST}:{REPLICA_PORT}")
    result = as_postgres(layout.rootfs, command, new_session=True)
    if result.returncode != 0 or not _port_open(HOST, REPLICA_PORT, timeout=2.0):
        raise EmbeddedDatabaseError(
            f"the replica did not start:\n{result.stdout.strip()}\n"
            + tail(layout.rootfs / REPLICA_LOG_FILE.lstrip("/"), 20)
        )
    log(f"replica running (pid {replica_status().pid}), streaming from {HOST}:{PORT}")


def _stop(layout: Layout) -> None:
    command = shlex.join(
        [f"{PG_BIN}/pg_ctl", "-D", REPLICA_DATA_DIR, "-m", "fast", "-w", "-t", "120", "stop"]
    )
    result: subprocess.CompletedProcess[str] = as_postgres(layout.rootfs, command)
    if result.returncode != 0:
        raise EmbeddedDatabaseError(f"pg_ctl stop (replica) failed:\n{result.stdout.strip()}")
    log("replica stopped")

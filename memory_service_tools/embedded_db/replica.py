"""A streaming replica of the embedded database, for read-replica tests (stdlib only).

``up --replica`` copies the running primary with ``pg_basebackup -R -X stream`` into a second data
directory of the same rootfs (`REPLICA_DATA_DIR`) and starts it as a hot standby on `REPLICA_PORT`
(127.0.0.1 only, like the primary). ``down --replica`` stops only the replica; the primary is never
stopped, restarted or reconfigured here. ``--port N`` names another replica of the same primary, with a
data directory of its own (`replica_paths`), so a test can stop its own replica without disturbing
readers of the shared one.

What the primary needs is what ``initdb`` gives the embedded database anyway: ``wal_level`` ``replica``,
``max_wal_senders`` > 0 and the ``host replication all 127.0.0.1/32 trust`` line of its ``pg_hba.conf``;
``up --replica`` checks them and names what is missing. No permanent replication slot is kept (a stopped
replica must never make the shared primary keep WAL without bound; the WAL receiver's temporary slot
lives only while it streams), so a replica that was stopped for long may not catch up: ``up --replica
--rebuild`` copies the primary again.
"""

from __future__ import annotations

import dataclasses
import shlex
import subprocess

from memory_service_tools.embedded_db.chroot_commands import as_postgres
from memory_service_tools.embedded_db.chroot_commands import in_chroot
from memory_service_tools.embedded_db.chroot_commands import require_root
from memory_service_tools.embedded_db.cluster import _locked
from memory_service_tools.embedded_db.cluster import _port_open
from memory_service_tools.embedded_db.cluster import _prepare_runtime
from memory_service_tools.embedded_db.cluster import database_up
from memory_service_tools.embedded_db.cluster import is_our_postmaster
from memory_service_tools.embedded_db.cluster import read_postmaster_pid
from memory_service_tools.embedded_db.layout import HOST
from memory_service_tools.embedded_db.layout import MAX_CONNECTIONS
from memory_service_tools.embedded_db.layout import PG_BIN
from memory_service_tools.embedded_db.layout import PORT
from memory_service_tools.embedded_db.layout import SOCKET_DIR
from memory_service_tools.embedded_db.layout import EmbeddedDatabaseError
from memory_service_tools.embedded_db.layout import Layout
from memory_service_tools.embedded_db.layout import default_layout
from memory_service_tools.embedded_db.layout import log
from memory_service_tools.embedded_db.layout import tail

__all__ = [
    "REPLICA_DSN",
    "REPLICA_PORT",
    "ReplicaPaths",
    "ReplicaStatus",
    "replica_down",
    "replica_paths",
    "replica_status",
    "replica_up",
]

REPLICA_PORT = PORT + 1
REPLICA_DSN = f"postgresql://postgres@{HOST}:{REPLICA_PORT}/postgres"
REPLICA_DATA_DIR = "/var/lib/postgresql/replica"
REPLICA_LOG_FILE = "/var/lib/postgresql/replica.log"


@dataclasses.dataclass(frozen=True)
class ReplicaPaths:
    """Where the replica of one port lives (inside the rootfs) and its DSN."""

    port: int
    data_dir: str
    log_file: str
    dsn: str


def replica_paths(port: int = REPLICA_PORT) -> ReplicaPaths:
    """The paths of the replica on ``port``: `REPLICA_DATA_DIR` for `REPLICA_PORT`, else a directory
    named for the port."""
    if port == REPLICA_PORT:
        return ReplicaPaths(port, REPLICA_DATA_DIR, REPLICA_LOG_FILE, REPLICA_DSN)
    if port == PORT or not 1024 <= port <= 65535:
        raise EmbeddedDatabaseError(f"port {port}: not a port a replica can use")
    return ReplicaPaths(
        port,
        f"{REPLICA_DATA_DIR}-{port}",
        f"/var/lib/postgresql/replica-{port}.log",
        f"postgresql://postgres@{HOST}:{port}/postgres",
    )


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


def replica_status(port: int = REPLICA_PORT) -> ReplicaStatus:
    """Inspects the replica on ``port`` without changing anything."""
    paths = replica_paths(port)
    layout = default_layout()
    data_dir = layout.rootfs / paths.data_dir.lstrip("/")
    try:
        pid = read_postmaster_pid(data_dir)
        built = (data_dir / "PG_VERSION").exists()
    except PermissionError:
        running = _port_open(HOST, port)
        return ReplicaStatus(running=running, dsn=paths.dsn, pid=None, built=True)
    running = pid is not None and is_our_postmaster(pid, layout.rootfs)
    return ReplicaStatus(running=running, dsn=paths.dsn, pid=pid if running else None, built=built)


def replica_up(*, rebuild: bool = False, port: int = REPLICA_PORT) -> str:
    """Makes sure the replica runs: starts the primary if it is down (`database_up`, idempotent), takes a
    base backup the first time (or when ``rebuild``), starts the standby.

    Returns:
        The replica's DSN.

    Raises:
        EmbeddedDatabaseError: not root, the primary does not allow replication, backup or start failed.
    """
    require_root("start the embedded replica")
    paths = replica_paths(port)
    database_up()
    layout = default_layout()
    with _locked(layout):
        status = replica_status(port)
        if status.running and not rebuild:
            log(f"replica already running (pid {status.pid}) on {HOST}:{port}")
            return paths.dsn
        if status.running:
            _stop(layout, paths)
        _prepare_runtime(layout)
        if _port_open(HOST, port):
            raise EmbeddedDatabaseError(f"port {HOST}:{port} is taken by another process")
        if rebuild or not replica_status(port).built:
            _check_primary(layout)
            _base_backup(layout, paths)
        _start(layout, paths)
    return paths.dsn


def replica_down(port: int = REPLICA_PORT) -> None:
    """Stops the replica (``pg_ctl stop -m fast`` on its data directory only); nothing when it is down.

    Raises:
        EmbeddedDatabaseError: not root, or pg_ctl failed.
    """
    require_root("stop the embedded replica")
    paths = replica_paths(port)
    layout = default_layout()
    with _locked(layout):
        if not replica_status(port).running:
            log("replica not running")
            return
        _stop(layout, paths)


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


def _base_backup(layout: Layout, paths: ReplicaPaths) -> None:
    in_chroot(layout.rootfs, ["rm", "-rf", paths.data_dir])
    log(f"pg_basebackup -R from {HOST}:{PORT} into {paths.data_dir} (inside the rootfs)")
    command = shlex.join(
        [
            f"{PG_BIN}/pg_basebackup",
            *("-h", HOST, "-p", str(PORT), "-U", "postgres"),
            *("-D", paths.data_dir, "-R", "-X", "stream", "-c", "fast"),
            "--no-password",
        ]
    )
    result = as_postgres(layout.rootfs, command)
    if result.returncode != 0:
        raise EmbeddedDatabaseError(f"pg_basebackup failed:\n{result.stdout.strip()}")


def _start(layout: Layout, paths: ReplicaPaths) -> None:
    in_chroot(layout.rootfs, ["rm", "-f", f"{paths.data_dir}/postmaster.pid"])
    options = (
        f"-p {paths.port} -c listen_addresses={HOST} -c shared_preload_libraries=age "
        f"-c max_connections={MAX_CONNECTIONS} -c hot_standby=on"
        # A slot of the WAL receiver's connection only: the primary keeps WAL while the replica streams
        # (a busy primary recycles it within seconds) and never after it stopped.
        " -c wal_receiver_create_temp_slot=on"
    )
    command = shlex.join(
        [
            f"{PG_BIN}/pg_ctl",
            "-D",
            paths.data_dir,
            "-l",
            paths.log_file,
            "-w",
            "-t",
            "120",
            "-o",
            options,
            "start",
        ]
    )
    log(f"starting the replica on {HOST}:{paths.port}")
    result = as_postgres(layout.rootfs, command, new_session=True)
    if result.returncode != 0 or not _port_open(HOST, paths.port, timeout=2.0):
        raise EmbeddedDatabaseError(
            f"the replica did not start:\n{result.stdout.strip()}\n"
            + tail(layout.rootfs / paths.log_file.lstrip("/"), 20)
        )
    log(f"replica running (pid {replica_status(paths.port).pid}), streaming from {HOST}:{PORT}")


def _stop(layout: Layout, paths: ReplicaPaths) -> None:
    command = shlex.join([f"{PG_BIN}/pg_ctl", "-D", paths.data_dir, "-m", "fast", "-w", "-t", "120", "stop"])
    result: subprocess.CompletedProcess[str] = as_postgres(layout.rootfs, command)
    if result.returncode != 0:
        raise EmbeddedDatabaseError(f"pg_ctl stop (replica) failed:\n{result.stdout.strip()}")
    log("replica stopped")

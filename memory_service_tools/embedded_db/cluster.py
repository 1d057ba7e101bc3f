"""Cluster control of the embedded database: status, ``up`` (rootfs, initdb, start) and ``down``
(``pg_ctl stop -m fast``), serialised between processes by a file lock (stdlib only).

The server runs inside ``chroot ROOTFS`` as the rootfs's ``postgres`` user, listens on
``127.0.0.1:55432`` only, with ``shared_preload_libraries=age`` and trust authentication (loopback, for
development). See docs/explanation/architecture.md.
"""

from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import os
import shlex
import socket
from collections.abc import Iterator
from pathlib import Path

from memory_service_tools.embedded_db.chroot_commands import as_postgres
from memory_service_tools.embedded_db.chroot_commands import in_chroot
from memory_service_tools.embedded_db.chroot_commands import require_root
from memory_service_tools.embedded_db.layout import DATA_DIR
from memory_service_tools.embedded_db.layout import DSN
from memory_service_tools.embedded_db.layout import HOST
from memory_service_tools.embedded_db.layout import LOG_FILE
from memory_service_tools.embedded_db.layout import MAX_CONNECTIONS
from memory_service_tools.embedded_db.layout import PG_BIN
from memory_service_tools.embedded_db.layout import PORT
from memory_service_tools.embedded_db.layout import SHARED_BUFFERS
from memory_service_tools.embedded_db.layout import SOCKET_DIR
from memory_service_tools.embedded_db.layout import EmbeddedDatabaseError
from memory_service_tools.embedded_db.layout import Layout
from memory_service_tools.embedded_db.layout import default_layout
from memory_service_tools.embedded_db.layout import log
from memory_service_tools.embedded_db.layout import rootfs_ready
from memory_service_tools.embedded_db.layout import tail
from memory_service_tools.embedded_db.rootfs import ensure_rootfs


@dataclasses.dataclass(frozen=True)
class DatabaseStatus:
    """State of the embedded database.

    Attributes:
        running: Whether a postmaster of this rootfs is running (or, when the data directory is not
            readable by the caller, whether something accepts connections on the port).
        dsn: Connection string of the embedded database.
        rootfs: Host path of the cached Debian root filesystem.
        data_dir: Host path of the PostgreSQL data directory inside the rootfs.
        pid: Process id of the postmaster, or None when not running or not knowable.
        rootfs_ready: Whether the rootfs has been built completely.
        log_file: Host path of the server log.
    """

    running: bool
    dsn: str
    rootfs: Path
    data_dir: Path
    pid: int | None
    rootfs_ready: bool = False
    log_file: Path | None = None


# --------------------------------------------------------------------------------------------------
# Public API


def database_status() -> DatabaseStatus:
    """Inspects the embedded database without changing anything (works without root).

    Returns:
        The current status.
    """
    return _status(default_layout())


def database_up() -> str:
    """Makes sure the embedded database runs; builds the rootfs and the cluster the first time.

    Idempotent: when the server already runs, nothing changes. Concurrent calls are serialised with a
    file lock, so only one of them builds.

    Returns:
        The DSN of the running database.

    Raises:
        EmbeddedDatabaseError: Not root, debootstrap missing, build or start failed, port taken.
    """
    layout = default_layout()
    require_root("start the embedded database")
    with _locked(layout):
        if not rootfs_ready(layout.rootfs) and _port_open(HOST, PORT):
            raise EmbeddedDatabaseError(
                f"port {HOST}:{PORT} is taken by another process, so a database built at {layout.rootfs} "
                "could not start there; stop that process and run `up` again"
            )
        ensure_rootfs(layout)
        status = _status(layout)
        if status.running:
            log(f"already running (pid {status.pid}) from {layout.rootfs}")
            return DSN
        _prepare_runtime(layout)
        _clear_stale_pid(layout)
        if _port_open(HOST, PORT):
            raise EmbeddedDatabaseError(
                f"port {HOST}:{PORT} is taken by another process (not the postmaster of {layout.rootfs}); "
                "stop it and run `up` again"
            )
        _initdb_if_needed(layout)
        _start(layout)
    return DSN


def database_down() -> None:
    """Stops the embedded database (``pg_ctl stop -m fast``); does nothing when it is not running.

    Raises:
        EmbeddedDatabaseError: Not root, or pg_ctl failed.
    """
    layout = default_layout()
    require_root("stop the embedded database")
    with _locked(layout):
        if not rootfs_ready(layout.rootfs):
            log(f"no embedded database at {layout.rootfs}; nothing to stop")
            return
        status = _status(layout)
        if not status.running:
            _clear_stale_pid(layout)
            log("not running")
            return
        log(f"stopping (pid {status.pid})")
        command = shlex.join([f"{PG_BIN}/pg_ctl", "-D", DATA_DIR, "-m", "fast", "-w", "-t", "120", "stop"])
        result = as_postgres(layout.rootfs, command)
        if result.returncode != 0:
            raise EmbeddedDatabaseError(f"pg_ctl stop failed:\n{result.stdout.strip()}")
        log("stopped")


# --------------------------------------------------------------------------------------------------
# Status


def _status(layout: Layout) -> DatabaseStatus:
    ready = rootfs_ready(layout.rootfs)
    running, pid = False, None
    if ready:
        try:
            pid = read_postmaster_pid(layout.data_dir)
        except PermissionError:
            # Non-root callers cannot read the data directory (0700, postgres): probe the port instead.
            running, pid = _port_open(HOST, PORT), None
        else:
            running = pid is not None and is_our_postmaster(pid, layout.rootfs)
            if not running:
                pid = None
    return DatabaseStatus(
        running=running,
        dsn=DSN,
        rootfs=layout.rootfs,
        data_dir=layout.data_dir,
        pid=pid,
        rootfs_ready=ready,
        log_file=layout.log_file,
    )


def read_postmaster_pid(data_dir: Path) -> int | None:
    """The process id in ``data_dir/postmaster.pid`` (its first line), or None when absent or garbled.

    Raises:
        PermissionError: the data directory is not readable by the caller (it is 0700, postgres).
    """
    try:
        first = (data_dir / "postmaster.pid").read_text(encoding="ascii", errors="replace").split("\n", 1)[0]
    except FileNotFoundError:
        return None
    except NotADirectoryError:
        return None
    try:
        pid = int(first.strip())
    except ValueError:
        return None
    return pid if pid > 0 else None


def is_our_postmaster(pid: int, rootfs: Path) -> bool:
    """Tells whether ``pid`` is a live postgres process chrooted into ``rootfs``.

    After a machine restart ``postmaster.pid`` names a process id that may now belong to anything, so a
    live pid alone proves nothing.
    """
    proc = Path(f"/proc/{pid}")
    try:
        comm = (proc / "comm").read_text(encoding="utf-8", errors="replace").strip()
    except OSError:
        return False
    if comm != "postgres":
        return False
    try:
        root = os.readlink(proc / "root")
    except PermissionError:
        return True  # not ours to inspect; a postgres with that pid is the best evidence we have
    except OSError:
        return False
    return os.path.realpath(root) == os.path.realpath(rootfs)


def _port_open(host: str, port: int, timeout: float = 0.5) -> bool:
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False


@contextlib.contextmanager
def _locked(layout: Layout) -> Iterator[None]:
    layout.cache.mkdir(parents=True, exist_ok=True)
    with open(layout.lock_file, "a+", encoding="utf-8") as handle:
        try:
            fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            log(f"waiting for another `up`/`down` holding {layout.lock_file}")
            fcntl.flock(handle.fileno(), fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle.fileno(), fcntl.LOCK_UN)


# --------------------------------------------------------------------------------------------------
# Cluster


def _prepare_runtime(layout: Layout) -> None:
    result = in_chroot(
        layout.rootfs, ["install", "-d", "-o", "postgres", "-g", "postgres", "-m", "2775", SOCKET_DIR]
    )
    if result.returncode != 0:
        raise EmbeddedDatabaseError(f"could not create {SOCKET_DIR} in the rootfs:\n{result.stdout.strip()}")


def _clear_stale_pid(layout: Layout) -> None:
    """Removes lock files left by a postmaster that no longer runs (e.g. after a machine restart)."""
    pid_file = layout.data_dir / "postmaster.pid"
    pid = read_postmaster_pid(layout.data_dir)
    if pid_file.exists() and (pid is None or not is_our_postmaster(pid, layout.rootfs)):
        log(f"removing the stale {pid_file} (pid {pid} is not running)")
        pid_file.unlink(missing_ok=True)
        socket_path = f"{SOCKET_DIR}/.s.PGSQL.{PORT}"
        in_chroot(layout.rootfs, ["rm", "-f", f"{socket_path}.lock", socket_path])


def _initdb_if_needed(layout: Layout) -> None:
    if (layout.data_dir / "PG_VERSION").exists():
        return
    log(f"initdb {DATA_DIR} (inside the rootfs)")
    initdb = [f"{PG_BIN}/initdb", "-A", "trust", "-U", "postgres", "-E", "UTF8", "--locale=C.UTF-8"]
    command = shlex.join([*initdb, "-D", DATA_DIR])
    result = as_postgres(layout.rootfs, command)
    if result.returncode != 0:
        raise EmbeddedDatabaseError(f"initdb failed:\n{result.stdout.strip()}")


def _start(layout: Layout) -> None:
    options = (
        f"-p {PORT} -c listen_addresses={HOST} -c shared_preload_libraries=age "
        f"-c max_connections={MAX_CONNECTIONS} -c shared_buffers={SHARED_BUFFERS}"
    )
    command = shlex.join(
        [f"{PG_BIN}/pg_ctl", "-D", DATA_DIR, "-l", LOG_FILE, "-w", "-t", "120", "-o", options, "start"]
    )
    log(f"starting PostgreSQL 17 on {HOST}:{PORT}")
    # A new session, so that Ctrl-C in the terminal that ran `up` does not reach the postmaster.
    result = as_postgres(layout.rootfs, command, new_session=True)
    if result.returncode != 0:
        raise EmbeddedDatabaseError(
            f"pg_ctl start failed:\n{result.stdout.strip()}\nlast lines of {layout.log_file}:\n"
            + tail(layout.log_file, 20)
        )
    status = _status(layout)
    if not status.running or not _port_open(HOST, PORT, timeout=2.0):
        raise EmbeddedDatabaseError(
            f"PostgreSQL did not come up on {HOST}:{PORT}; last lines of {layout.log_file}:\n"
            + tail(layout.log_file, 20)
        )
    log(f"running (pid {status.pid})")

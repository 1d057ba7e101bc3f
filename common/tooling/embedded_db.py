"""Embedded development database: PostgreSQL 17 + Apache AGE + pgvector in a Debian trixie chroot.

The database runs from a minimal Debian trixie root filesystem built once with ``debootstrap`` and cached
outside the checkout (``${XDG_CACHE_HOME:-~/.cache}/memory-service/pg17-trixie``). ``initdb`` and
``pg_ctl`` run inside ``chroot ROOTFS`` as the rootfs's ``postgres`` user; the server listens on
``127.0.0.1:55432`` only, with ``shared_preload_libraries=age`` and trust authentication (loopback, for
development). See DESIGN.md section 5.

The Debian mirror is read from the host's apt sources at build time (deb822 ``*.sources`` files or
one-line ``sources.list`` entries), so no mirror is ever written into the repository.
``CB_DEBIAN_MIRROR`` overrides it.

Command line::

    python -m common.tooling.embedded_db up       # build (first time), initdb (first time), start; prints the DSN
    python -m common.tooling.embedded_db down     # stops the server (pg_ctl stop -m fast)
    python -m common.tooling.embedded_db status   # prints the state; exit code 0 when running, 1 otherwise

Only the standard library is used, so this module works before the project's dependencies are installed.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import fcntl
import os
import re
import shlex
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from pathlib import Path

HOST = "127.0.0.1"
PORT = 55432
DSN = f"postgresql://postgres@{HOST}:{PORT}/postgres"

SUITE = "trixie"
PACKAGES = ("postgresql-17", "postgresql-17-age", "postgresql-17-pgvector")
ROOTFS_NAME = "pg17-trixie"
MIRROR_ENV = "CB_DEBIAN_MIRROR"

# Paths inside the rootfs.
PG_BIN = "/usr/lib/postgresql/17/bin"
DATA_DIR = "/var/lib/postgresql/data"
LOG_FILE = "/var/lib/postgresql/pg.log"
SOCKET_DIR = "/var/run/postgresql"
MAX_CONNECTIONS = 200

# Files whose presence marks a complete rootfs (relative to the rootfs).
_ROOTFS_MARKERS = (
    "usr/lib/postgresql/17/bin/postgres",
    "usr/lib/postgresql/17/bin/pg_ctl",
    "usr/share/postgresql/17/extension/age.control",
    "usr/share/postgresql/17/extension/vector.control",
    "usr/share/postgresql/17/extension/pg_trgm.control",
)
_MIN_FREE_BYTES = 1_200_000_000
_BUILD_PREFIX = f".{ROOTFS_NAME}.build-"
_SBIN_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
_CHROOT_ENV = {"PATH": _SBIN_PATH, "LANG": "C.UTF-8", "LC_ALL": "C.UTF-8", "HOME": "/root", "TERM": "dumb"}

# Suite names of the Debian archive itself (release code names and aliases).
_DEBIAN_SUITES = frozenset(
    {
        "buster", "bullseye", "bookworm", "trixie", "forky", "duke", "sid",
        "oldoldstable", "oldstable", "stable", "testing", "unstable", "experimental",
    }
)  # fmt: skip
_SUITE_SUFFIXES = ("-updates", "-backports", "-proposed-updates", "-backports-sloppy")
_MIRROR_SCHEMES = ("http://", "https://", "file:/")


class EmbeddedDatabaseError(RuntimeError):
    """The embedded database could not be built, started, stopped or inspected."""


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


@dataclasses.dataclass(frozen=True)
class AptSource:
    """One ``deb`` entry of the host's apt configuration.

    Attributes:
        uri: Archive URI.
        suites: Suites (distributions) of the entry.
        components: Components (``main``, ``contrib``...).
        origin: File the entry came from.
    """

    uri: str
    suites: tuple[str, ...]
    components: tuple[str, ...]
    origin: Path


# --------------------------------------------------------------------------------------------------
# apt sources (pure parsing)


def parse_deb822_sources(text: str, origin: Path = Path("-")) -> list[AptSource]:
    """Parses a deb822 ``.sources`` file.

    Args:
        text: File content.
        origin: Path recorded in the results.

    Returns:
        One entry per URI of every enabled stanza whose ``Types`` include ``deb``, in file order.
    """
    sources: list[AptSource] = []
    for stanza in _deb822_stanzas(text):
        if stanza.get("enabled", "yes").strip().lower() in {"no", "false", "0"}:
            continue
        if "deb" not in stanza.get("types", "").split():
            continue
        suites = tuple(stanza.get("suites", "").split())
        components = tuple(stanza.get("components", "").split())
        for uri in stanza.get("uris", "").split():
            sources.append(AptSource(uri=uri, suites=suites, components=components, origin=origin))
    return sources


def _deb822_stanzas(text: str) -> Iterator[dict[str, str]]:
    fields: dict[str, str] = {}
    last: str | None = None
    for raw in text.splitlines():
        if raw.startswith("#"):
            continue
        if not raw.strip():
            if fields:
                yield fields
            fields, last = {}, None
            continue
        if raw[0] in " \t":
            if last is not None and raw.strip() != ".":
                fields[last] += " " + raw.strip()
            continue
        name, sep, value = raw.partition(":")
        if not sep:
            continue
        last = name.strip().lower()
        fields[last] = value.strip()
    if fields:
        yield fields


_ONE_LINE = re.compile(
    r"^deb\s+(?:\[(?P<options>[^\]]*)\]\s*)?(?P<uri>\S+)\s+(?P<suite>\S+)(?P<components>.*)$"
)


def parse_one_line_sources(text: str, origin: Path = Path("-")) -> list[AptSource]:
    """Parses a one-line-style ``sources.list`` file (``deb [options] URI suite [components]``).

    Args:
        text: File content.
        origin: Path recorded in the results.

    Returns:
        The ``deb`` entries (not ``deb-src``), in file order; entries with ``enabled=no`` are skipped.
    """
    sources: list[AptSource] = []
    for raw in text.splitlines():
        line = raw.split("#", 1)[0].strip()
        match = _ONE_LINE.match(line)
        if match is None:
            continue
        options = (match.group("options") or "").split()
        if any(option.lower() in {"enabled=no", "enabled=false"} for option in options):
            continue
        sources.append(
            AptSource(
                uri=match.group("uri"),
                suites=(match.group("suite"),),
                components=tuple(match.group("components").split()),
                origin=origin,
            )
        )
    return sources


def read_apt_sources(etc_apt: Path = Path("/etc/apt")) -> list[AptSource]:
    """Reads the host's apt sources in apt's order.

    Args:
        etc_apt: The apt configuration directory.

    Returns:
        Entries of ``sources.list`` first, then of ``sources.list.d/*.list`` and ``*.sources`` in
        alphabetical file order. Unreadable files are skipped.
    """
    files: list[Path] = []
    main_list = etc_apt / "sources.list"
    if main_list.is_file():
        files.append(main_list)
    parts = etc_apt / "sources.list.d"
    if parts.is_dir():
        files.extend(sorted(p for p in parts.iterdir() if p.suffix in {".list", ".sources"} and p.is_file()))
    sources: list[AptSource] = []
    for path in files:
        try:
            text = path.read_text(encoding="utf-8", errors="replace")
        except OSError:
            continue
        if path.suffix == ".sources":
            sources.extend(parse_deb822_sources(text, path))
        else:
            sources.extend(parse_one_line_sources(text, path))
    return sources


def is_debian_archive(source: AptSource) -> bool:
    """Tells whether an apt entry is the main Debian archive (not security, not a third-party repo).

    Args:
        source: An apt entry.

    Returns:
        True when the URI is usable by debootstrap, no suite is a security suite, the URI is not a
        ``debian-security`` archive, at least one suite is a Debian release (or its -updates /
        -backports) and the ``main`` component is enabled.
    """
    uri = source.uri.rstrip("/")
    if not uri.startswith(_MIRROR_SCHEMES):
        return False
    if "debian-security" in uri or any("security" in suite for suite in source.suites):
        return False
    if source.components and "main" not in source.components:
        return False
    return any(_suite_base(suite) in _DEBIAN_SUITES for suite in source.suites)


def _suite_base(suite: str) -> str:
    suite = suite.strip("/").lower()
    for suffix in _SUITE_SUFFIXES:
        if suite.endswith(suffix):
            return suite[: -len(suffix)]
    return suite


def find_debian_mirror(etc_apt: Path = Path("/etc/apt")) -> str | None:
    """Finds the Debian mirror the host's apt uses.

    Args:
        etc_apt: The apt configuration directory.

    Returns:
        The first URI of the main Debian archive among the host's apt sources, or None.
    """
    for source in read_apt_sources(etc_apt):
        if is_debian_archive(source):
            return source.uri
    return None


# --------------------------------------------------------------------------------------------------
# Layout


def cache_dir() -> Path:
    """Returns the cache directory of the project (``${XDG_CACHE_HOME:-~/.cache}/memory-service``)."""
    xdg = os.environ.get("XDG_CACHE_HOME", "")
    base = Path(xdg) if xdg and os.path.isabs(xdg) else Path.home() / ".cache"
    return base / "memory-service"


@dataclasses.dataclass(frozen=True)
class _Layout:
    cache: Path

    @property
    def rootfs(self) -> Path:
        return self.cache / ROOTFS_NAME

    @property
    def data_dir(self) -> Path:
        return self.rootfs / DATA_DIR.lstrip("/")

    @property
    def log_file(self) -> Path:
        return self.rootfs / LOG_FILE.lstrip("/")

    @property
    def lock_file(self) -> Path:
        return self.cache / ".embedded-db.lock"

    @property
    def build_log(self) -> Path:
        return self.cache / "debootstrap.log"


def _default_layout() -> _Layout:
    return _Layout(cache_dir())


def _log(message: str) -> None:
    print(f"[embedded-db] {message}", file=sys.stderr, flush=True)


# --------------------------------------------------------------------------------------------------
# Public API


def database_status() -> DatabaseStatus:
    """Inspects the embedded database without changing anything (works without root).

    Returns:
        The current status.
    """
    return _status(_default_layout())


def database_up() -> str:
    """Makes sure the embedded database runs; builds the rootfs and the cluster the first time.

    Idempotent: when the server already runs, nothing changes. Concurrent calls are serialised with a
    file lock, so only one of them builds.

    Returns:
        The DSN of the running database.

    Raises:
        EmbeddedDatabaseError: Not root, debootstrap missing, build or start failed, port taken.
    """
    layout = _default_layout()
    _require_root("start the embedded database")
    with _locked(layout):
        if not _rootfs_ready(layout.rootfs) and _port_open(HOST, PORT):
            raise EmbeddedDatabaseError(
                f"port {HOST}:{PORT} is taken by another process, so a database built at {layout.rootfs} "
                "could not start there; stop that process and run `up` again"
            )
        _ensure_rootfs(layout)
        status = _status(layout)
        if status.running:
            _log(f"already running (pid {status.pid}) from {layout.rootfs}")
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
    layout = _default_layout()
    _require_root("stop the embedded database")
    with _locked(layout):
        if not _rootfs_ready(layout.rootfs):
            _log(f"no embedded database at {layout.rootfs}; nothing to stop")
            return
        status = _status(layout)
        if not status.running:
            _clear_stale_pid(layout)
            _log("not running")
            return
        _log(f"stopping (pid {status.pid})")
        command = shlex.join([f"{PG_BIN}/pg_ctl", "-D", DATA_DIR, "-m", "fast", "-w", "-t", "120", "stop"])
        result = _as_postgres(layout.rootfs, command)
        if result.returncode != 0:
            raise EmbeddedDatabaseError(f"pg_ctl stop failed:\n{result.stdout.strip()}")
        _log("stopped")


# --------------------------------------------------------------------------------------------------
# Status


def _rootfs_ready(rootfs: Path) -> bool:
    return all((rootfs / marker).exists() for marker in _ROOTFS_MARKERS)


def _status(layout: _Layout) -> DatabaseStatus:
    ready = _rootfs_ready(layout.rootfs)
    running, pid = False, None
    if ready:
        try:
            pid = _read_postmaster_pid(layout.data_dir)
        except PermissionError:
            # Non-root callers cannot read the data directory (0700, postgres): probe the port instead.
            running, pid = _port_open(HOST, PORT), None
        else:
            running = pid is not None and _is_our_postmaster(pid, layout.rootfs)
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


def _read_postmaster_pid(data_dir: Path) -> int | None:
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


def _is_our_postmaster(pid: int, rootfs: Path) -> bool:
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


# --------------------------------------------------------------------------------------------------
# Process helpers


def _require_root(action: str) -> None:
    if os.geteuid() != 0:
        raise EmbeddedDatabaseError(
            f"only root can {action}: it runs PostgreSQL inside a chroot. Run as root (e.g. with sudo), "
            "or set CB_DATABASE_URL to any PostgreSQL >= 16 with the age, vector and pg_trgm extensions"
        )


def _which(program: str) -> str | None:
    path = os.environ.get("PATH", "")
    return shutil.which(program, path=f"{path}:{_SBIN_PATH}" if path else _SBIN_PATH)


def _chroot_binary() -> str:
    chroot = _which("chroot")
    if chroot is None:
        raise EmbeddedDatabaseError("`chroot` not found (Debian package coreutils)")
    return chroot


def _run(argv: Sequence[str], *, new_session: bool = False) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        list(argv),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=_CHROOT_ENV,
        start_new_session=new_session,
        check=False,
    )


def _in_chroot(rootfs: Path, argv: Sequence[str]) -> subprocess.CompletedProcess[str]:
    return _run([_chroot_binary(), str(rootfs), *argv])


def _as_postgres(rootfs: Path, script: str, *, new_session: bool = False) -> subprocess.CompletedProcess[str]:
    """Runs a shell command as the rootfs's postgres user: ``chroot ROOTFS su postgres -s /bin/bash -c``."""
    argv = [_chroot_binary(), str(rootfs), "su", "postgres", "-s", "/bin/bash", "-c", script]
    return _run(argv, new_session=new_session)


@contextlib.contextmanager
def _locked(layout: _Layout) -> Iterator[None]:
    layout.cache.mkdir(parents=True, exist_ok=True)
    with open(layout.lock_file, "a+", encoding="utf-8") as handle:
        try:
            fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            _log(f"waiting for another `up`/`down` holding {layout.lock_file}")
            fcntl.flock(handle.fileno(), fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle.fileno(), fcntl.LOCK_UN)


# --------------------------------------------------------------------------------------------------
# Rootfs


def _ensure_rootfs(layout: _Layout) -> None:
    rootfs = layout.rootfs
    if _rootfs_ready(rootfs):
        return
    if rootfs.exists():
        missing = [m for m in _ROOTFS_MARKERS if not (rootfs / m).exists()]
        raise EmbeddedDatabaseError(
            f"{rootfs} exists but is incomplete (missing {', '.join(missing)}); "
            f"remove it (rm -rf {shlex.quote(str(rootfs))}) and run `up` again to rebuild it"
        )
    debootstrap = _which("debootstrap")
    if debootstrap is None:
        raise EmbeddedDatabaseError(
            "debootstrap is needed to build the embedded database's rootfs: "
            "install the Debian package `debootstrap` (apt-get install debootstrap), "
            "or run `make system-deps`"
        )
    _remove_stale_builds(layout)
    free = shutil.disk_usage(layout.cache).free
    if free < _MIN_FREE_BYTES:
        raise EmbeddedDatabaseError(
            f"not enough disk space in {layout.cache}: {free // 2**20} MiB free, about "
            f"{_MIN_FREE_BYTES // 2**20} MiB needed (set XDG_CACHE_HOME to use another disk)"
        )
    mirror = os.environ.get(MIRROR_ENV, "").strip() or find_debian_mirror()
    build = Path(tempfile.mkdtemp(prefix=_BUILD_PREFIX, dir=layout.cache))
    build.chmod(0o755)  # becomes "/" of the chroot: must be traversable by postgres
    command = [debootstrap, "--variant=minbase", f"--include={','.join(PACKAGES)}", SUITE, str(build)]
    if mirror:
        command.append(mirror)
        _log(f"building the PostgreSQL 17 rootfs from {mirror} (one time: about 45 s and 700 MB)")
    else:
        _log("no Debian mirror found in the host's apt sources; using debootstrap's default mirror")
        _log("building the PostgreSQL 17 rootfs (one time: about 45 s and 700 MB)")
    _log(f"into {rootfs}; full log in {layout.build_log}")
    started = time.monotonic()
    try:
        returncode = _run_debootstrap(command, layout.build_log)
        if returncode != 0:
            raise EmbeddedDatabaseError(
                f"debootstrap failed with exit code {returncode}; last lines of {layout.build_log}:\n"
                + _tail(layout.build_log, 20)
            )
        if not _rootfs_ready(build):
            raise EmbeddedDatabaseError(
                "debootstrap finished but the rootfs lacks PostgreSQL 17, age or pgvector"
            )
        os.rename(build, rootfs)
    except BaseException:
        _remove_build_dir(build)
        raise
    _log(f"rootfs ready in {time.monotonic() - started:.0f} s")


_NOISY_STEP = re.compile(
    r"^I: (Retrieving|Validating|Extracting|Unpacking|Configuring) (?!the |required |base )"
)


def _run_debootstrap(command: Sequence[str], log_path: Path) -> int:
    """Runs debootstrap, logging everything to ``log_path`` and stage lines to stderr."""
    steps = 0
    with open(log_path, "w", encoding="utf-8") as log:
        log.write("$ " + shlex.join(command) + "\n")
        log.flush()
        process = subprocess.Popen(
            list(command),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            errors="replace",
            env={**_CHROOT_ENV, "DEBIAN_FRONTEND": "noninteractive"},
        )
        assert process.stdout is not None
        for line in process.stdout:
            log.write(line)
            text = line.rstrip()
            if _NOISY_STEP.match(text) or text.startswith("I: Found additional"):
                steps += 1
                if steps % 100 == 0:
                    _log(f"  ... {steps} package steps")
            elif text:
                _log("  " + text)
        return process.wait()


def _tail(path: Path, lines: int) -> str:
    try:
        return "\n".join(path.read_text(encoding="utf-8", errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


_MOUNTINFO_ESCAPE = re.compile(r"\\([0-7]{3})")


def _mounts_under(path: Path) -> list[str]:
    prefix = os.path.realpath(path).rstrip("/") + "/"
    found: list[str] = []
    try:
        with open("/proc/self/mountinfo", encoding="utf-8") as mountinfo:
            for line in mountinfo:
                fields = line.split()
                if len(fields) > 4:
                    point = _MOUNTINFO_ESCAPE.sub(lambda m: chr(int(m.group(1), 8)), fields[4])
                    if point.startswith(prefix):
                        found.append(point)
    except OSError:
        pass
    return found


def _remove_build_dir(build: Path) -> None:
    """Removes an unfinished build, first unmounting what debootstrap may have left mounted in it."""
    for point in sorted(_mounts_under(build), key=len, reverse=True):
        subprocess.run(["umount", "-l", point], check=False, stdin=subprocess.DEVNULL, capture_output=True)
    left = _mounts_under(build)
    if left:
        _log(f"not removing {build}: still mounted {', '.join(left)}")
        return
    shutil.rmtree(build, ignore_errors=True)


def _remove_stale_builds(layout: _Layout) -> None:
    # Called under the lock: no other process is building, so any build directory is a leftover.
    for stale in layout.cache.glob(_BUILD_PREFIX + "*"):
        if stale.is_dir():
            _log(f"removing the unfinished build {stale}")
            _remove_build_dir(stale)


# --------------------------------------------------------------------------------------------------
# Cluster


def _prepare_runtime(layout: _Layout) -> None:
    result = _in_chroot(
        layout.rootfs, ["install", "-d", "-o", "postgres", "-g", "postgres", "-m", "2775", SOCKET_DIR]
    )
    if result.returncode != 0:
        raise EmbeddedDatabaseError(f"could not create {SOCKET_DIR} in the rootfs:\n{result.stdout.strip()}")


def _clear_stale_pid(layout: _Layout) -> None:
    """Removes lock files left by a postmaster that no longer runs (e.g. after a machine restart)."""
    pid_file = layout.data_dir / "postmaster.pid"
    pid = _read_postmaster_pid(layout.data_dir)
    if pid_file.exists() and (pid is None or not _is_our_postmaster(pid, layout.rootfs)):
        _log(f"removing the stale {pid_file} (pid {pid} is not running)")
        pid_file.unlink(missing_ok=True)
        socket_path = f"{SOCKET_DIR}/.s.PGSQL.{PORT}"
        _in_chroot(layout.rootfs, ["rm", "-f", f"{socket_path}.lock", socket_path])


def _initdb_if_needed(layout: _Layout) -> None:
    if (layout.data_dir / "PG_VERSION").exists():
        return
    _log(f"initdb {DATA_DIR} (inside the rootfs)")
    initdb = [f"{PG_BIN}/initdb", "-A", "trust", "-U", "postgres", "-E", "UTF8", "--locale=C.UTF-8"]
    command = shlex.join([*initdb, "-D", DATA_DIR])
    result = _as_postgres(layout.rootfs, command)
    if result.returncode != 0:
        raise EmbeddedDatabaseError(f"initdb failed:\n{result.stdout.strip()}")


def _start(layout: _Layout) -> None:
    options = (
        f"-p {PORT} -c listen_addresses={HOST} -c shared_preload_libraries=age "
        f"-c max_connections={MAX_CONNECTIONS}"
    )
    command = shlex.join(
        [f"{PG_BIN}/pg_ctl", "-D", DATA_DIR, "-l", LOG_FILE, "-w", "-t", "120", "-o", options, "start"]
    )
    _log(f"starting PostgreSQL 17 on {HOST}:{PORT}")
    # A new session, so that Ctrl-C in the terminal that ran `up` does not reach the postmaster.
    result = _as_postgres(layout.rootfs, command, new_session=True)
    if result.returncode != 0:
        raise EmbeddedDatabaseError(
            f"pg_ctl start failed:\n{result.stdout.strip()}\nlast lines of {layout.log_file}:\n"
            + _tail(layout.log_file, 20)
        )
    status = _status(layout)
    if not status.running or not _port_open(HOST, PORT, timeout=2.0):
        raise EmbeddedDatabaseError(
            f"PostgreSQL did not come up on {HOST}:{PORT}; last lines of {layout.log_file}:\n"
            + _tail(layout.log_file, 20)
        )
    _log(f"running (pid {status.pid})")


# --------------------------------------------------------------------------------------------------
# Command line


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


def main(argv: Sequence[str] | None = None) -> int:
    """Command-line entry point: ``python -m common.tooling.embedded_db up|down|status``.

    Args:
        argv: Arguments without the program name; defaults to ``sys.argv[1:]``.

    Returns:
        The exit code: 0 on success (for ``status``: running), 1 on failure (for ``status``: stopped).
    """
    parser = argparse.ArgumentParser(
        prog="python -m common.tooling.embedded_db",
        description="Embedded development PostgreSQL 17 + AGE + pgvector (Debian trixie chroot, needs root).",
    )
    parser.add_argument(
        "command",
        choices=("up", "down", "status"),
        help="up: build/init/start, print the DSN; down: stop; status: print the state (exit 1 if stopped)",
    )
    try:
        args = parser.parse_args(list(argv) if argv is not None else None)
    except SystemExit as exit_request:  # usage errors exit 1 (not argparse's 2); --help exits 0
        return 0 if exit_request.code in (0, None) else 1
    try:
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


if __name__ == "__main__":
    sys.exit(main())

"""Where the embedded database lives: its address, the paths of the cached rootfs and of the cluster
inside it, and the error and log line every part of `memory_service_tools.embedded_db` uses (stdlib only).
"""

from __future__ import annotations

import dataclasses
import os
import sys
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
# The deployed database's setting (deploy/kubernetes/base/memory-db.yaml), so that benchmarks on the
# embedded server see the buffer cache a deployment has, not PostgreSQL's 128 MB default.
SHARED_BUFFERS = "1GB"

# Files whose presence marks a complete rootfs (relative to the rootfs).
ROOTFS_MARKERS = (
    "usr/lib/postgresql/17/bin/postgres",
    "usr/lib/postgresql/17/bin/pg_ctl",
    "usr/share/postgresql/17/extension/age.control",
    "usr/share/postgresql/17/extension/vector.control",
    "usr/share/postgresql/17/extension/pg_trgm.control",
    "usr/share/postgresql/17/extension/btree_gin.control",
)


class EmbeddedDatabaseError(RuntimeError):
    """The embedded database could not be built, started, stopped or inspected."""


def cache_dir() -> Path:
    """Returns the cache directory of the project (``${XDG_CACHE_HOME:-~/.cache}/memory-service``)."""
    xdg = os.environ.get("XDG_CACHE_HOME", "")
    base = Path(xdg) if xdg and os.path.isabs(xdg) else Path.home() / ".cache"
    return base / "memory-service"


@dataclasses.dataclass(frozen=True)
class Layout:
    """The host paths of one embedded database, all below ``cache`` (`cache_dir` by default)."""

    cache: Path

    @property
    def rootfs(self) -> Path:
        """The Debian root filesystem the server runs in (``chroot`` target)."""
        return self.cache / ROOTFS_NAME

    @property
    def data_dir(self) -> Path:
        """The PostgreSQL data directory (`DATA_DIR` inside the rootfs)."""
        return self.rootfs / DATA_DIR.lstrip("/")

    @property
    def log_file(self) -> Path:
        """The server log (`LOG_FILE` inside the rootfs)."""
        return self.rootfs / LOG_FILE.lstrip("/")

    @property
    def lock_file(self) -> Path:
        """The file lock that serialises ``up`` and ``down``."""
        return self.cache / ".embedded-db.lock"

    @property
    def build_log(self) -> Path:
        """The full output of the last debootstrap run."""
        return self.cache / "debootstrap.log"


def default_layout() -> Layout:
    """The layout under `cache_dir` (read from the environment at each call)."""
    return Layout(cache_dir())


def rootfs_ready(rootfs: Path) -> bool:
    """Whether ``rootfs`` has been built completely (every file of `ROOTFS_MARKERS` is there)."""
    return all((rootfs / marker).exists() for marker in ROOTFS_MARKERS)


def log(message: str) -> None:
    """Writes ``[embedded-db] message`` to stderr."""
    print(f"[embedded-db] {message}", file=sys.stderr, flush=True)


def tail(path: Path, lines: int) -> str:
    """The last ``lines`` lines of a log file, or ``(no log)`` when it cannot be read."""
    try:
        return "\n".join(path.read_text(encoding="utf-8", errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"

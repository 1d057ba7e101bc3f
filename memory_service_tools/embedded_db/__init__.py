"""Embedded development database: PostgreSQL 17 + Apache AGE + pgvector in a Debian trixie chroot.

The database runs from a minimal Debian trixie root filesystem built once with ``debootstrap`` and cached
outside the checkout (``${XDG_CACHE_HOME:-~/.cache}/memory-service/pg17-trixie``). ``initdb`` and
``pg_ctl`` run inside ``chroot ROOTFS`` as the rootfs's ``postgres`` user; the server listens on
``127.0.0.1:55432`` only, with ``shared_preload_libraries=age`` and trust authentication (loopback, for
development). See docs/explanation/architecture.md.

The Debian mirror is read from the host's apt sources at build time (deb822 ``*.sources`` files or
one-line ``sources.list`` entries), so no mirror is ever written into the repository.
``CB_DEBIAN_MIRROR`` overrides it.

Command line::

    python -m memory_service_tools.embedded_db up       # build (first time), initdb (first time), start; prints the DSN
    python -m memory_service_tools.embedded_db down     # stops the server (pg_ctl stop -m fast)
    python -m memory_service_tools.embedded_db status   # prints the state; exit code 0 when running, 1 otherwise

Only the standard library is used, so this package works before the project's dependencies are installed.

Modules: `layout` (address, paths, the error), `apt_sources` (the host's Debian mirror), `rootfs` (the
debootstrap build), `chroot_commands` (running programs inside the rootfs), `cluster` (status, up, down),
`command_line` (the ``python -m`` entry point). Code outside the package imports the names below from
the package itself.
"""

from memory_service_tools.embedded_db.cluster import DatabaseStatus
from memory_service_tools.embedded_db.cluster import database_down
from memory_service_tools.embedded_db.cluster import database_status
from memory_service_tools.embedded_db.cluster import database_up
from memory_service_tools.embedded_db.layout import DSN
from memory_service_tools.embedded_db.layout import HOST
from memory_service_tools.embedded_db.layout import PORT
from memory_service_tools.embedded_db.layout import SHARED_BUFFERS
from memory_service_tools.embedded_db.layout import EmbeddedDatabaseError

__all__ = [
    "DSN",
    "HOST",
    "PORT",
    "SHARED_BUFFERS",
    "DatabaseStatus",
    "EmbeddedDatabaseError",
    "database_down",
    "database_status",
    "database_up",
]

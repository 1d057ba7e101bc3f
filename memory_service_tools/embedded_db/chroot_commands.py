"""Running programs for the embedded database: on the host (debootstrap) and inside the rootfs
(``chroot ROOTFS ...``, as its ``postgres`` user for initdb and pg_ctl), with a fixed environment (stdlib
only).
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Sequence
from pathlib import Path

from memory_service_tools.embedded_db.layout import EmbeddedDatabaseError

SBIN_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
CHROOT_ENV = {"PATH": SBIN_PATH, "LANG": "C.UTF-8", "LC_ALL": "C.UTF-8", "HOME": "/root", "TERM": "dumb"}


def require_root(action: str) -> None:
    """Refuses ``action`` unless the process runs as root (chroot needs it).

    Raises:
        EmbeddedDatabaseError: not root; the message names the alternative (``CB_DATABASE_URL``).
    """
    if os.geteuid() != 0:
        raise EmbeddedDatabaseError(
            f"only root can {action}: it runs PostgreSQL inside a chroot. Run as root (e.g. with sudo), "
            "or set CB_DATABASE_URL to any PostgreSQL >= 16 with the age, vector, pg_trgm and btree_gin extensions"
        )


def which(program: str) -> str | None:
    """The path of ``program`` on ``PATH`` or in the sbin folders (debootstrap, chroot), or None."""
    path = os.environ.get("PATH", "")
    return shutil.which(program, path=f"{path}:{SBIN_PATH}" if path else SBIN_PATH)


def _chroot_binary() -> str:
    chroot = which("chroot")
    if chroot is None:
        raise EmbeddedDatabaseError("`chroot` not found (Debian package coreutils)")
    return chroot


def run(argv: Sequence[str], *, new_session: bool = False) -> subprocess.CompletedProcess[str]:
    """Runs ``argv`` with `CHROOT_ENV`, no stdin, stdout and stderr captured together as text."""
    return subprocess.run(
        list(argv),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=CHROOT_ENV,
        start_new_session=new_session,
        check=False,
    )


def in_chroot(rootfs: Path, argv: Sequence[str]) -> subprocess.CompletedProcess[str]:
    """Runs ``argv`` as root inside ``rootfs``: ``chroot ROOTFS argv...``."""
    return run([_chroot_binary(), str(rootfs), *argv])


def as_postgres(rootfs: Path, script: str, *, new_session: bool = False) -> subprocess.CompletedProcess[str]:
    """Runs a shell command as the rootfs's postgres user: ``chroot ROOTFS su postgres -s /bin/bash -c``."""
    argv = [_chroot_binary(), str(rootfs), "su", "postgres", "-s", "/bin/bash", "-c", script]
    return run(argv, new_session=new_session)

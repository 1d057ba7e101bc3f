"""The rootfs build: a minimal Debian trixie with PostgreSQL 17, AGE and pgvector, made once with
``debootstrap`` into a temporary folder of the cache and renamed into place when complete (stdlib only).

An unfinished build (interrupted, failed) is unmounted and removed, at once or by the next ``up``.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

from memory_service_tools.embedded_db.apt_sources import find_debian_mirror
from memory_service_tools.embedded_db.chroot_commands import CHROOT_ENV
from memory_service_tools.embedded_db.chroot_commands import which
from memory_service_tools.embedded_db.layout import MIRROR_ENV
from memory_service_tools.embedded_db.layout import PACKAGES
from memory_service_tools.embedded_db.layout import ROOTFS_MARKERS
from memory_service_tools.embedded_db.layout import ROOTFS_NAME
from memory_service_tools.embedded_db.layout import SUITE
from memory_service_tools.embedded_db.layout import EmbeddedDatabaseError
from memory_service_tools.embedded_db.layout import Layout
from memory_service_tools.embedded_db.layout import log
from memory_service_tools.embedded_db.layout import rootfs_ready
from memory_service_tools.embedded_db.layout import tail

_MIN_FREE_BYTES = 1_200_000_000
_BUILD_PREFIX = f".{ROOTFS_NAME}.build-"


def ensure_rootfs(layout: Layout) -> None:
    """Builds the rootfs of ``layout`` unless it is complete already (call it under the file lock).

    The mirror is ``CB_DEBIAN_MIRROR``, else the host's Debian mirror (`find_debian_mirror`), else
    debootstrap's default. Progress goes to stderr, the whole output to ``layout.build_log``.

    Raises:
        EmbeddedDatabaseError: an incomplete rootfs is in the way, debootstrap is missing, too little disk
            space, or the build failed (the message holds the last lines of the build log).
    """
    rootfs = layout.rootfs
    if rootfs_ready(rootfs):
        return
    if rootfs.exists():
        missing = [m for m in ROOTFS_MARKERS if not (rootfs / m).exists()]
        raise EmbeddedDatabaseError(
            f"{rootfs} exists but is incomplete (missing {', '.join(missing)}); "
            f"remove it (rm -rf {shlex.quote(str(rootfs))}) and run `up` again to rebuild it"
        )
    debootstrap = which("debootstrap")
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
        log(f"building the PostgreSQL 17 rootfs from {mirror} (one time: about 45 s and 700 MB)")
    else:
        log("no Debian mirror found in the host's apt sources; using debootstrap's default mirror")
        log("building the PostgreSQL 17 rootfs (one time: about 45 s and 700 MB)")
    log(f"into {rootfs}; full log in {layout.build_log}")
    started = time.monotonic()
    try:
        returncode = _run_debootstrap(command, layout.build_log)
        if returncode != 0:
            raise EmbeddedDatabaseError(
                f"debootstrap failed with exit code {returncode}; last lines of {layout.build_log}:\n"
                + tail(layout.build_log, 20)
            )
        if not rootfs_ready(build):
            raise EmbeddedDatabaseError(
                "debootstrap finished but the rootfs lacks PostgreSQL 17, age or pgvector"
            )
        os.rename(build, rootfs)
    except BaseException:
        _remove_build_dir(build)
        raise
    log(f"rootfs ready in {time.monotonic() - started:.0f} s")


_NOISY_STEP = re.compile(
    r"^I: (Retrieving|Validating|Extracting|Unpacking|Configuring) (?!the |required |base )"
)


def _run_debootstrap(command: Sequence[str], log_path: Path) -> int:
    """Runs debootstrap, logging everything to ``log_path`` and stage lines to stderr."""
    steps = 0
    with open(log_path, "w", encoding="utf-8") as build_log:
        build_log.write("$ " + shlex.join(command) + "\n")
        build_log.flush()
        process = subprocess.Popen(
            list(command),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            errors="replace",
            env={**CHROOT_ENV, "DEBIAN_FRONTEND": "noninteractive"},
        )
        assert process.stdout is not None
        for line in process.stdout:
            build_log.write(line)
            text = line.rstrip()
            if _NOISY_STEP.match(text) or text.startswith("I: Found additional"):
                steps += 1
                if steps % 100 == 0:
                    log(f"  ... {steps} package steps")
            elif text:
                log("  " + text)
        return process.wait()


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
        log(f"not removing {build}: still mounted {', '.join(left)}")
        return
    shutil.rmtree(build, ignore_errors=True)


def _remove_stale_builds(layout: Layout) -> None:
    # Called under the lock: no other process is building, so any build directory is a leftover.
    for stale in layout.cache.glob(_BUILD_PREFIX + "*"):
        if stale.is_dir():
            log(f"removing the unfinished build {stale}")
            _remove_build_dir(stale)

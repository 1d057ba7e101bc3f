"""A service run as its own process (`cb serve ingest|query`) on the tests' database, as the process tests
need it: the environment it starts with, the wait for SERVING, and the stop that leaves nothing running."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from common.kernel.config import Settings
from memory_service_grpc_client import wait_for_serving

ROOT = Path(__file__).resolve().parents[2]


def cb_serve(service: str, settings: Settings, stderr: Any = subprocess.PIPE, **environment: str) -> Any:
    """Starts `cb serve service` on ``settings``' database with the ``CB_*`` ``environment`` on top of
    this process's (stdout discarded, stderr to ``stderr``); the `subprocess.Popen`."""
    return subprocess.Popen(
        [sys.executable, "-m", "memory_service_tools.cli", "serve", service],
        cwd=ROOT,
        env={**os.environ, "CB_DATABASE_URL": settings.database_url, **environment},
        stdout=subprocess.DEVNULL,
        stderr=stderr,
    )


@contextmanager
def serving(
    service: str, settings: Settings, address: str, **environment: str
) -> Iterator[subprocess.Popen[bytes]]:
    """`cb_serve`, SERVING at ``address`` before it yields; killed (if still running) and reaped after."""
    process = cb_serve(service, settings, **environment)
    try:
        assert wait_for_serving(address, timeout=180), f"{service}_service did not become SERVING"
        yield process
    finally:
        if process.poll() is None:
            process.kill()
        process.wait(timeout=60)
        if process.stderr is not None:
            process.stderr.close()

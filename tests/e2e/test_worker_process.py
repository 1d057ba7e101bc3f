"""``cb worker`` as a process (issue 12 §4): it migrates a fresh database, registers with procrastinate,
and stops cleanly on SIGTERM and on Ctrl-C (SIGINT): exit code 0, its worker row removed."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psycopg
import pytest

from common.kernel.config import Settings
from tests.conftest import fresh_database

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(600)]
ROOT = Path(__file__).resolve().parents[2]


def _workers(url: str) -> int:
    with psycopg.connect(url) as conn:
        if conn.execute("SELECT to_regclass('procrastinate_workers')").fetchone() == (None,):
            return 0
        row = conn.execute("SELECT count(*) FROM procrastinate_workers").fetchone()
    return int(row[0]) if row else 0


@pytest.mark.parametrize("stop", [signal.SIGTERM, signal.SIGINT])
def test_cb_worker_starts_and_stops_cleanly(settings: Settings, stop: signal.Signals) -> None:
    with fresh_database(settings) as fresh:
        env = dict(os.environ, CB_DATABASE_URL=fresh.database_url, CB_LOG_FORMAT="text")
        worker = subprocess.Popen(
            [sys.executable, "-m", "common.tooling.cli", "worker", "--concurrency", "2"],
            cwd=ROOT,
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        try:
            deadline = time.monotonic() + 300
            while _workers(fresh.database_url) == 0:  # a bounded wait for start-up, not a timing assertion
                assert worker.poll() is None, worker.stderr.read().decode() if worker.stderr else ""
                assert time.monotonic() < deadline, "the worker did not register"
                time.sleep(0.3)
            worker.send_signal(stop)
            code = worker.wait(timeout=120)
            log = worker.stderr.read().decode() if worker.stderr else ""
            assert code == 0, log
            assert _workers(fresh.database_url) == 0, "the worker unregistered on its way out"
        finally:
            if worker.poll() is None:
                worker.kill()
                worker.wait()

"""``cb worker`` as a process: it migrates a fresh database, registers with procrastinate,
and stops cleanly on SIGTERM and on Ctrl-C (SIGINT): exit code 0, its worker row removed."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import psycopg
import pytest
from psycopg import sql

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


@contextmanager
def _registered_worker(url: str, concurrency: int) -> Iterator[subprocess.Popen[bytes]]:
    """``cb worker`` on the database ``url``, yielded once it registered with procrastinate (a bounded wait
    for start-up, not a timing assertion); killed at the end if it still runs."""
    env = dict(os.environ, CB_DATABASE_URL=url, CB_LOG_FORMAT="text")
    worker = subprocess.Popen(
        [sys.executable, "-m", "memory_service_tools.cli", "worker", "--concurrency", str(concurrency)],
        cwd=ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        deadline = time.monotonic() + 300
        while _workers(url) == 0:
            assert worker.poll() is None, worker.stderr.read().decode() if worker.stderr else ""
            assert time.monotonic() < deadline, "the worker did not register"
            time.sleep(0.3)
        yield worker
    finally:
        if worker.poll() is None:
            worker.kill()
            worker.wait()


@pytest.mark.parametrize("stop", [signal.SIGTERM, signal.SIGINT])
def test_cb_worker_starts_and_stops_cleanly(settings: Settings, stop: signal.Signals) -> None:
    with fresh_database(settings) as fresh, _registered_worker(fresh.database_url, 2) as worker:
        worker.send_signal(stop)
        code = worker.wait(timeout=120)
        log = worker.stderr.read().decode() if worker.stderr else ""
        assert code == 0, log
        assert _workers(fresh.database_url) == 0, "the worker unregistered on its way out"


def _database_outage(settings: Settings, fresh: Settings, seconds: float) -> None:
    """The worker's database refuses connections for ``seconds`` and drops those it had, as a database
    restart does (ALLOW_CONNECTIONS off, its backends terminated), then accepts them again."""
    name = psycopg.conninfo.conninfo_to_dict(fresh.database_url)["dbname"]
    with psycopg.connect(settings.database_url, autocommit=True) as admin:
        admin.execute(sql.SQL("ALTER DATABASE {} ALLOW_CONNECTIONS false").format(sql.Identifier(name)))
        admin.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = %s", (str(name),)
        )
        time.sleep(seconds)
        admin.execute(sql.SQL("ALTER DATABASE {} ALLOW_CONNECTIONS true").format(sql.Identifier(name)))


def test_cb_worker_outlives_a_database_outage(settings: Settings) -> None:
    """The trial's finding: a database restart made procrastinate stop the worker (its LISTEN side task
    failed) and the process exited 0, so `cb up` took the whole stack down. The worker must start again
    once the database is back, and still stop cleanly on SIGTERM."""
    with fresh_database(settings) as fresh, _registered_worker(fresh.database_url, 1) as worker:
        with psycopg.connect(fresh.database_url) as conn:
            first = conn.execute("SELECT max(id) FROM procrastinate_workers").fetchone()
        _database_outage(settings, fresh, seconds=6)
        deadline = time.monotonic() + 180
        while True:  # a new worker registration (a new row) shows the worker was started again
            assert worker.poll() is None, "the worker process ended after the outage"
            with psycopg.connect(fresh.database_url) as conn:
                newest = conn.execute("SELECT max(id) FROM procrastinate_workers").fetchone()
            if newest and first and newest[0] is not None and newest[0] != first[0]:
                break
            assert time.monotonic() < deadline, "the worker was not started again"
            time.sleep(0.5)
        worker.send_signal(signal.SIGTERM)
        code = worker.wait(timeout=120)
        log = worker.stderr.read().decode() if worker.stderr else ""
        assert code == 0, log
        assert "restarting" in log, log


def test_an_idle_worker_logs_nothing_about_its_routine_jobs(settings: Settings) -> None:
    """The sweep runs every second: before, an idle worker printed three procrastinate lines a second
    (deferred, started, succeeded). Once it is up, ten idle seconds add no line about routine jobs."""
    with fresh_database(settings) as fresh, _registered_worker(fresh.database_url, 1) as worker:
        time.sleep(10)
        with psycopg.connect(fresh.database_url) as conn:  # the sweep did run meanwhile
            runs = conn.execute(
                "SELECT count(*) FROM procrastinate_jobs WHERE task_name = 'memory.enqueue_due_enrichments'"
            ).fetchone()
        assert runs is not None and runs[0] >= 5
        worker.send_signal(signal.SIGTERM)
        assert worker.wait(timeout=120) == 0
        log = worker.stderr.read().decode() if worker.stderr else ""
        routine = [  # its registration at start-up is said once
            line for line in log.splitlines() if "enqueue_due_enrichments" in line and "Registering" not in line
        ]
        assert routine == [], "\n".join(routine[:6])

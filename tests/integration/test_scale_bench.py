"""The parts of bench/bench_scale.py that decide what its figures mean: the recorded plans are the plans
the arm ran (its SET statements replayed, nothing left behind) and the HNSW build memory."""

from __future__ import annotations

from typing import Any

import psycopg

from bench.scale_arms import RecordingCursor
from bench.scale_arms import explained
from bench.scale_tables import HNSW_BUILD_MEMORY_CAP_MB
from bench.scale_tables import hnsw_build_memory_mb
from common.kernel.config import Settings


def test_explained_replays_the_settings_of_the_recorded_statements(settings: Settings) -> None:
    with psycopg.connect(settings.database_url, autocommit=True) as conn:
        conn.cursor_factory = RecordingCursor
        RecordingCursor.log = []
        conn.execute("SET enable_sort = off")
        conn.execute("SELECT x FROM (VALUES (2), (1)) AS v(x) WHERE x > %(low)s ORDER BY x", {"low": 0})
        conn.execute("RESET enable_sort")
        recorded: list[tuple[Any, Any]] = RecordingCursor.log
        RecordingCursor.log = []
        conn.cursor_factory = psycopg.Cursor
        assert len(recorded) == 3
        plans = explained(conn, recorded)
        assert len(plans) == 1  # SET and RESET run, not explained
        # enable_sort off shows as the disabled cost (PostgreSQL 17) on the Sort node; ANALYZE ran it.
        assert "Sort  (cost=10000000000" in plans[0]
        assert "actual time=" in plans[0]
        assert "Buffers" in plans[0] or "Execution Time" in plans[0]
        # replayed inside a rolled-back transaction: the session's setting is untouched.
        assert conn.execute("SHOW enable_sort").fetchone()[0] == "on"  # type: ignore[index]


def test_explained_hides_the_query_vector(settings: Settings) -> None:
    with psycopg.connect(settings.database_url, autocommit=True) as conn:
        statement = "SELECT g FROM generate_series(1, %(two)s) AS g WHERE g::text <> '[0.5,-1.25e-05,3]'"
        plans = explained(conn, [(statement, {"two": 2})])
        assert "'[query vector]'" in plans[0]
        assert "1.25e-05" not in plans[0]


def test_hnsw_build_memory_holds_a_million_rows_and_is_bounded() -> None:
    assert hnsw_build_memory_mb(1_000) == 256
    assert 3_700 <= hnsw_build_memory_mb(1_000_000) <= 4_000
    assert hnsw_build_memory_mb(10_000_000) == HNSW_BUILD_MEMORY_CAP_MB

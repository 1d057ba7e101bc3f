"""The one way a store reads a count: the single value of a one-row, one-column answer."""

from __future__ import annotations

from typing import Any

import psycopg
from psycopg import sql


def fetch_count(conn: psycopg.Connection[Any], query: sql.Composable | str, params: Any = None) -> int:
    """The integer ``query`` (``SELECT count(*) ...``, or a statement ``RETURNING`` one) answers on
    ``conn`` with its bound ``params``; 0 when it answers no row."""
    row = conn.execute(query, params).fetchone()
    return int(row[0]) if row else 0

"""The rows of one query that a test reads straight from its database (through a `Database` or at a URL of
its own), to check what the services wrote."""

from __future__ import annotations

from typing import Any

import psycopg

from common.storage.database import Database


def fetch_rows(database: Database, query: str, *params: Any) -> list[tuple[Any, ...]]:
    """Every row of ``query`` with the bound ``params``, on a connection of its own."""
    with database.connection() as conn:
        return conn.execute(query, params).fetchall()


def fetch_rows_at(url: str, query: str, *params: Any) -> list[tuple[Any, ...]]:
    """Every row of ``query`` with the bound ``params``, on an autocommit connection to ``url``."""
    with psycopg.connect(url, autocommit=True) as conn:
        return conn.execute(query, params).fetchall()

"""The session set-up of every connection (pool, migrations, label creation): load AGE, ``search_path``.

Below both `common.storage.database` (the pool's configure hook) and `common.storage.graph.age`, so the
pool, the graph and the schema manager do not import each other in a circle.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import psycopg

from common.storage.named_queries import Queries

_SESSION_QUERIES = Queries("session.sql", {})


def prepare_age_session(conn: psycopg.Connection[Any]) -> None:
    """Loads AGE into the session of ``conn`` (when the role may) and sets its ``search_path``
    (``"$user", public, ag_catalog``); run on every new connection (pool, migrations, label creation)."""
    try:
        conn.execute(_SESSION_QUERIES["load_age"])
    except psycopg.Error:
        pass  # non-superusers cannot LOAD; the server then must have age in shared_preload_libraries
    conn.execute(_SESSION_QUERIES["set_age_search_path"])


def set_transaction_statement_timeout(conn: psycopg.Connection[Any], milliseconds: int) -> None:
    """Gives the rest of the current transaction of ``conn`` a statement timeout of ``milliseconds``
    (0: none); the session's own timeout returns at its end."""
    conn.execute(_SESSION_QUERIES["set_local_statement_timeout"], (str(milliseconds),))


@contextmanager
def autocommitting(conn: psycopg.Connection[Any]) -> Iterator[psycopg.Connection[Any]]:
    """``conn`` in autocommit until the block ends (each statement on its own snapshot, no BEGIN or
    COMMIT sent), then back in transaction mode; a connection broken meanwhile is left as it is (its
    pool discards it)."""
    conn.autocommit = True
    try:
        yield conn
    finally:
        try:
            conn.autocommit = False
        except psycopg.Error:
            pass  # a broken connection: the pool discards it

"""Every named query (common/storage/sql/queries/*.sql) is accepted by PostgreSQL against the migrated
schema: parsed, its tables, columns, functions and parameter types resolved, without running it.

The integration tests of the stores run the queries; this one also covers a query no test path reaches.
"""

from __future__ import annotations

import re
from types import SimpleNamespace

import psycopg
import pytest
from psycopg import pq

from common.kernel.config import Settings
from common.storage.database import Database
from common.storage.fact_store import FactStore
from common.storage.named_queries import Queries
from common.storage.named_queries import query_file_names
from common.storage.session import prepare_age_session

pytestmark = pytest.mark.integration

_PLACEHOLDER = re.compile(r"%%|%\((\w+)\)[sb]|%[sb]")


def _numbered(text: str) -> str:
    """``text`` with psycopg's placeholders (``%s``, ``%(name)s``, ``%b``) as PostgreSQL's ``$n``."""
    numbers: dict[str, int] = {}
    position = 0

    def number(match: re.Match[str]) -> str:
        nonlocal position
        if match.group(0) == "%%":
            return "%"
        name = match.group(1)
        if name is None:
            position += 1
            return f"${position}"
        if name not in numbers:
            numbers[name] = len(numbers) + 1
        return f"${numbers[name]}"

    return _PLACEHOLDER.sub(number, text)


def _all_queries(settings: Settings) -> list[tuple[str, str, Queries]]:
    facts = FactStore(SimpleNamespace(database=SimpleNamespace(settings=settings))).queries  # type: ignore[arg-type]
    files = {
        name: facts if name == "facts.sql" else Queries.for_settings(name, settings)
        for name in query_file_names()
    }
    return [(file_name, name, queries) for file_name, queries in files.items() for name in queries]


def test_every_named_query_prepares(database: Database, settings: Settings) -> None:
    database.ensure_ready()
    refused: list[str] = []
    with psycopg.connect(settings.database_url, autocommit=True) as conn:
        prepare_age_session(conn)
        # the change feed's staging table lives per session: a writer creates it first (stage_transaction)
        conn.execute(Queries.for_settings("change_feed.sql", settings)["stage_transaction"])
        for file_name, name, queries in _all_queries(settings):
            text = _numbered(queries[name].as_string(conn))
            result = conn.pgconn.prepare(b"", text.encode("utf-8"))
            if result.status != pq.ExecStatus.COMMAND_OK:
                refused.append(f"{file_name}: {name}: {(result.error_message or b'').decode()}")
    assert refused == []

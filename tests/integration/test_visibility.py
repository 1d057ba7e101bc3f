"""`common.storage.visibility`: who sees what, and the SQL predicates agree with the Python rule.

Every combination of item scopes (none, relevance only, workspace, principal, mixed, NULL) is evaluated
by PostgreSQL through `array_predicate` (text[] columns), `jsonb_predicate` (chunk meta) and compared
with `Visibility.allows` for several callers.
"""

from __future__ import annotations

import types
from typing import Any

import pytest
from psycopg import sql
from psycopg.types.json import Jsonb

from common.auth.principals import Principal
from common.auth.principals import Right
from common.auth.principals import development_principal
from common.storage.database import Database
from common.storage.visibility import EVERYTHING
from common.storage.visibility import Visibility
from common.storage.visibility import visibility_for

pytestmark = pytest.mark.integration

ITEMS: list[list[str] | None] = [
    None,
    [],
    ["task:PROJ-1"],
    ["task:PROJ-1", "project:x"],
    ["workspace:alpha"],
    ["workspace:beta"],
    ["workspace:alpha", "workspace:beta"],
    ["principal:bob"],
    ["task:PROJ-1", "workspace:alpha"],
    ["principal:bob", "workspace:beta"],
    ["workspace:50%_off", "task:x"],  # LIKE metacharacters are plain characters
]

CALLERS = [
    EVERYTHING,
    Visibility.of_scopes([]),
    Visibility.of_scopes(["workspace:alpha"]),
    Visibility.of_scopes(["workspace:beta", "principal:bob"]),
    Visibility.of_scopes(["workspace:50%_off"]),
    Visibility.of_scopes(["task:PROJ-1"]),  # relevance scopes grant nothing
]


def _evaluate(database: Database, visibility: Visibility, scopes: list[str] | None) -> tuple[bool, bool]:
    statement = sql.SQL(
        "SELECT {array}, {jsonb} FROM (SELECT %(scopes)s::text[] AS scopes, %(meta)s::jsonb AS meta) t"
    ).format(
        array=visibility.array_predicate(sql.SQL("t.scopes")),
        jsonb=visibility.jsonb_predicate(sql.SQL("(t.meta -> 'scopes')")),
    )
    meta: dict[str, Any] = {} if scopes is None else {"scopes": scopes}
    with database.connection() as conn:
        row = conn.execute(statement, {"scopes": scopes, "meta": Jsonb(meta), **visibility.params}).fetchone()
    assert row is not None
    return bool(row[0]), bool(row[1])


@pytest.mark.parametrize("visibility", CALLERS)
def test_sql_predicates_agree_with_the_python_rule(database: Database, visibility: Visibility) -> None:
    for scopes in ITEMS:
        expected = visibility.allows(scopes)
        assert _evaluate(database, visibility, scopes) == (expected, expected), (visibility, scopes)


def test_the_rule() -> None:
    outsider = Visibility.of_scopes([])
    assert outsider.allows(None) and outsider.allows([]) and outsider.allows(["task:PROJ-1", "project:x"])
    assert not outsider.allows(["workspace:alpha"]) and not outsider.allows(["principal:bob"])
    insider = Visibility.of_scopes(["workspace:alpha"])
    assert insider.allows(["workspace:alpha", "task:x"]) and insider.allows(
        ["workspace:alpha", "workspace:beta"]
    )
    assert not insider.allows(["workspace:beta"])
    assert EVERYTHING.allows(["workspace:anything"])


def test_visibility_of_callers() -> None:
    assert visibility_for(None) == EVERYTHING  # in-process callers
    assert visibility_for(development_principal()) == EVERYTHING  # auth off: local superuser
    token = Principal(
        name="bob",
        rights=types.MappingProxyType({"ns": Right.READ}),
        allowed_scopes=frozenset({"workspace:alpha"}),
    )
    seen = visibility_for(token)
    assert not seen.unrestricted
    assert seen.scopes == {"workspace:alpha", "principal:bob"}  # a principal sees what is scoped to itself
    assert seen.allows(["principal:bob"]) and not seen.allows(["principal:alice"])

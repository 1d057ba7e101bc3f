"""The named-query loader (common/storage/named_queries.py) and the query files of the stores.

The integration tests of the stores run the queries; these tests check the files' shape: every query is
parsed, formatted with the configured table names, described, looked up by some store, and every lookup
of a store names a query of its file.
"""

from __future__ import annotations

import re
from pathlib import Path
from types import SimpleNamespace

import pytest
from psycopg import sql

from common.kernel.config import Settings
from common.storage import named_queries
from common.storage.fact_store import FactStore
from common.storage.named_queries import Queries
from common.storage.named_queries import UnknownQueryError
from common.storage.named_queries import load_query_file
from common.storage.named_queries import parse_named_queries
from common.storage.named_queries import query_file_names

STORAGE = Path(named_queries.__file__).parent
# The modules that look up the queries of each file (a store and the bases it inherits from).
FILE_USERS = {
    "audit.sql": ["audit_store"],
    "change_feed.sql": ["change_feed/outbox"],
    "document_originals.sql": ["document_original_store"],
    "webhooks.sql": ["change_feed/webhook_store"],
    "chunks.sql": ["chunks/store", "chunks/rankings"],
    "context.sql": ["context_store"],
    "enrichment_jobs.sql": ["enrichment_jobs_store"],
    "facts.sql": ["fact_store"],
    "graph.sql": ["graph/age", "graph/node_registry", "graph/edges", "graph/store"],
    "key_locks.sql": ["key_locks"],
    "label_migration.sql": ["schema/label_migration"],
    "migrations.sql": ["schema/migrations", "schema/queue_migration"],
    "observations.sql": ["observation_store"],
    "packs.sql": ["pack_store"],
    "session.sql": ["session"],
    "replication.sql": ["replicas/wal_position", "replicas/read_routing", "change_feed/outbox"],
    "snapshots.sql": ["snapshot_store"],
    "tenant_indexes.sql": ["chunks/tenant_vector_indexes", "chunks/owner_vector_indexes"],
    "owner_indexes.sql": ["chunks/owner_vector_indexes"],
    "vault.sql": ["vault_store"],
}
_LOOKUP = re.compile(r"""queries\[\s*"([a-z0-9_]+)"\s*\]""", re.IGNORECASE)
_QUERY_FILE = re.compile(r"""Queries(?:\.for_settings)?\(\s*"([a-z0-9_]+\.sql)\"""")


def _lookups(module: str) -> set[str]:
    return set(_LOOKUP.findall((STORAGE / f"{module}.py").read_text("utf-8")))


def test_parse_reads_names_descriptions_and_bodies() -> None:
    text = (
        "-- A file comment, ignored.\n\n"
        "-- name: first_query\n"
        "-- Says what it does,\n"
        "-- over two lines.\n"
        "SELECT 1\nFROM t\n\n"
        "-- name: second_query\n"
        "SELECT 2 -- a trailing comment stays\n"
    )
    queries = parse_named_queries(text)
    assert list(queries) == ["first_query", "second_query"]
    assert queries["first_query"].description == "Says what it does, over two lines."
    assert queries["first_query"].text == "SELECT 1\nFROM t"
    assert queries["second_query"].description == ""
    assert queries["second_query"].text == "SELECT 2 -- a trailing comment stays"


def test_parse_refuses_duplicates_bad_names_and_empty_bodies() -> None:
    with pytest.raises(ValueError, match="defined twice"):
        parse_named_queries("-- name: q\nSELECT 1\n-- name: q\nSELECT 2\n", source="x.sql")
    with pytest.raises(ValueError, match="invalid query name"):
        parse_named_queries("-- name: Bad-Name\nSELECT 1\n")
    with pytest.raises(ValueError, match="invalid query name"):
        parse_named_queries("-- name:\nSELECT 1\n")
    with pytest.raises(ValueError, match="has no body"):
        parse_named_queries("-- name: empty\n-- only a description\n\n-- name: other\nSELECT 1\n")


def test_unknown_name_and_missing_placeholder_raise() -> None:
    queries = Queries(
        "packs.sql", {"domain_packs": sql.Identifier("p"), "namespace_settings": sql.Identifier("n")}
    )
    assert isinstance(queries["pack_version"], sql.Composed)
    with pytest.raises(UnknownQueryError, match="no_such_query"):
        queries["no_such_query"]
    with pytest.raises(KeyError):
        Queries("packs.sql", {"domain_packs": sql.Identifier("p")})  # namespace_settings not given
    with pytest.raises(FileNotFoundError):
        load_query_file("no_such_file.sql")


def test_placeholders_are_the_configured_table_names() -> None:
    settings = Settings(chunks_table="other_chunks")
    statement = Queries.for_settings("chunks.sql", settings)["delete_chunks_of_node"]
    assert statement.as_string(None) == 'DELETE FROM "other_chunks" WHERE namespace = %s AND node_key = %s'


def test_every_query_file_formats_and_every_query_is_described() -> None:
    settings = Settings()
    assert query_file_names() == sorted(FILE_USERS)
    for file_name in query_file_names():
        if file_name != "facts.sql":  # FactStore adds its column lists (test below)
            Queries.for_settings(file_name, settings)  # every placeholder is a configured name
        for query in load_query_file(file_name).values():
            assert query.description, f"{file_name}: {query.name} has no description"


def test_fact_queries_format_with_the_fact_columns() -> None:
    graph = SimpleNamespace(database=SimpleNamespace(settings=Settings()))
    statement = FactStore(graph).queries["fact_by_id"]  # type: ignore[arg-type]
    assert statement.as_string(None).startswith("SELECT fact_id, namespace, subject_key,")


def test_every_named_query_is_used_and_every_lookup_exists() -> None:
    names = {file_name: set(load_query_file(file_name)) for file_name in query_file_names()}
    for file_name, modules in FILE_USERS.items():
        used = set().union(*(_lookups(module) for module in modules))
        assert names[file_name] - used == set(), f"queries of {file_name} no module uses"
    modules = {module for users in FILE_USERS.values() for module in users}
    for module in modules:
        defined = set().union(*(names[f] for f, users in FILE_USERS.items() if module in users))
        assert _lookups(module) - defined == set(), f"lookups of {module}.py without a query in its files"


def test_only_the_listed_modules_load_query_files() -> None:
    users = {module for modules in FILE_USERS.values() for module in modules}
    for path in STORAGE.rglob("*.py"):
        module = path.relative_to(STORAGE).with_suffix("").as_posix()
        loaded = set(_QUERY_FILE.findall(path.read_text("utf-8")))
        if module == "named_queries":
            continue
        for file_name in loaded:
            assert module in FILE_USERS[file_name], f"{module}.py loads {file_name}"
        if _lookups(module):
            assert module in users, f"{module}.py looks up named queries but is not in FILE_USERS"

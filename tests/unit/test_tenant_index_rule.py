"""Which namespaces get a tenant vector index, and the index names (`common.storage.chunks.tenant_vector_indexes`)."""

from __future__ import annotations

from common.storage.chunks.tenant_vector_indexes import tenant_index_name
from common.storage.chunks.tenant_vector_indexes import wanted


def test_large_tenants_among_many_get_an_index() -> None:
    counts = {"big": 6000, "medium": 4999, "other": 9000, "rest": 8000}
    assert wanted(counts, 5000) == {"big", "other", "rest"}


def test_a_tenant_holding_half_the_table_or_more_uses_the_tables_index() -> None:
    assert wanted({"only": 50_000}, 5000) == set()
    assert wanted({"main": 10_000, "side": 10_000}, 5000) == set()
    assert wanted({"main": 10_000, "side": 10_001}, 5000) == {"main"}


def test_threshold_zero_builds_none() -> None:
    assert wanted({"big": 10**6, "other": 10**6, "third": 10**6}, 0) == set()


def test_names_are_stable_distinct_and_fit_an_identifier() -> None:
    name = tenant_index_name("chunks", "team-a")
    assert name == tenant_index_name("chunks", "team-a")
    assert name.startswith("chunks_tenant_") and len(name) == len("chunks_tenant_") + 16
    assert name != tenant_index_name("chunks", "team-b")
    long_table = "t" * 80
    assert len(tenant_index_name(long_table, "x").encode()) <= 63
    assert len(tenant_index_name("таблица" * 10, "x").encode()) <= 63


def test_the_namespace_holding_most_of_the_table_uses_the_tables_index() -> None:
    from common.storage.chunks.tenant_vector_indexes import majority

    assert majority({"only": 50_000}, 5000) == {"only"}
    assert majority({"main": 10_000, "side": 10_000}, 5000) == {"main", "side"}
    assert majority({"main": 10_000, "side": 10_001}, 5000) == {"side"}
    assert majority({"small": 100}, 5000) == set()
    assert majority({"only": 50_000}, 0) == set()

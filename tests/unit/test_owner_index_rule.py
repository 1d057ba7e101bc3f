"""Which owners of memories get a vector index of their own, and the index names
(`common.storage.chunks.owner_vector_indexes`)."""

from __future__ import annotations

from common.storage.chunks.owner_vector_indexes import Owner
from common.storage.chunks.owner_vector_indexes import owner_index_name
from common.storage.chunks.owner_vector_indexes import owner_index_predicate
from common.storage.chunks.owner_vector_indexes import wanted_owners


def _owner(namespace: str, user: str, rows: int) -> Owner:
    return Owner(namespace, user, f"principal:memory-user/{user}", rows)


def _keys(owners: list[Owner]) -> list[tuple[str, str]]:
    return [(owner.namespace, owner.user_id) for owner in owners]


def test_large_owners_with_a_small_share_get_an_index() -> None:
    owners = [_owner("ns", "big", 5000), _owner("ns", "small", 1999), _owner("ns", "bigger", 6000)]
    assert _keys(wanted_owners(owners, {"ns": 100_000}, set(), 2000, 100)) == [
        ("ns", "bigger"),
        ("ns", "big"),
    ]


def test_an_owner_holding_half_the_namespace_or_more_uses_the_namespaces_index() -> None:
    owners = [_owner("ns", "main", 5000), _owner("other", "side", 5000)]
    assert _keys(wanted_owners(owners, {"ns": 10_000, "other": 10_001}, set(), 2000, 100)) == [
        ("other", "side")
    ]


def test_the_number_is_bounded_largest_first() -> None:
    owners = [_owner("ns", f"u{rows}", rows) for rows in range(2000, 2010)]
    kept = wanted_owners(owners, {"ns": 10**6}, set(), 2000, 3)
    assert _keys(kept) == [("ns", "u2009"), ("ns", "u2008"), ("ns", "u2007")]


def test_a_registered_owner_keeps_its_index_down_to_half_the_threshold() -> None:
    owners = [_owner("ns", "shrunk", 1200), _owner("ns", "gone", 999)]
    registered = {("ns", "shrunk"), ("ns", "gone")}
    assert _keys(wanted_owners(owners, {"ns": 10**5}, registered, 2000, 100)) == [("ns", "shrunk")]
    assert wanted_owners(owners, {"ns": 10**5}, set(), 2000, 100) == []


def test_zero_builds_none() -> None:
    owners = [_owner("ns", "big", 10**5)]
    assert wanted_owners(owners, {"ns": 10**7}, set(), 0, 100) == []
    assert wanted_owners(owners, {"ns": 10**7}, set(), 2000, 0) == []


def test_names_are_stable_distinct_and_fit_an_identifier() -> None:
    name = owner_index_name("chunks", "team-a", "alice")
    assert name == owner_index_name("chunks", "team-a", "alice")
    assert name.startswith("chunks_owner_") and len(name) == len("chunks_owner_") + 16
    assert name not in {
        owner_index_name("chunks", "team-a", "bob"),
        owner_index_name("chunks", "team-b", "alice"),
    }
    assert len(owner_index_name("t" * 80, "x", "y").encode()) <= 63


def test_the_predicate_quotes_its_literals() -> None:
    text = owner_index_predicate("it's", "principal:memory-user/o'brien").as_string(None)
    assert "namespace = 'it''s'" in text and "= 'principal:memory-user/o''brien'" in text

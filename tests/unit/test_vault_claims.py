"""`ingest_service.vault.claims.KeyClaims`, which file of a run gets a natural key several
files name (the journaled file, else the smallest path), decided as the ascending stream goes."""

from __future__ import annotations

from datetime import UTC
from datetime import datetime

import pytest

from common.kernel.errors import InvalidArgument
from ingest_service.vault.claims import LOSE
from ingest_service.vault.claims import TAKE
from ingest_service.vault.claims import WAIT
from ingest_service.vault.claims import Claimant
from ingest_service.vault.claims import KeyClaims


def _claimant(index: int, path: str) -> Claimant:
    return Claimant(index, path, None, datetime(2026, 1, 1, tzinfo=UTC))


def test_the_journaled_file_keeps_its_key_against_a_smaller_path() -> None:
    claims = KeyClaims({"doc:k": "m.md"})
    assert claims.arrive("a.md", 0) == []
    assert claims.decide("doc:k", "a.md") == WAIT  # m.md is still to come
    claims.wait("doc:k", _claimant(0, "a.md"))
    assert claims.arrive("m.md", 1) == []
    assert claims.decide("doc:k", "m.md") == TAKE
    assert [c.path for c in claims.take("doc:k", "m.md")] == ["a.md"]  # the waiting claimant loses
    claims.arrive("z.md", 2)
    assert claims.decide("doc:k", "z.md") == LOSE and claims.owner("doc:k") == "m.md"


def test_a_passed_or_absent_journaled_file_gives_the_key_to_the_smallest_path() -> None:
    claims = KeyClaims({"doc:k": "m.md", "doc:j": "y.md"})
    claims.arrive("a.md", 0)
    claims.wait("doc:k", _claimant(0, "a.md"))
    claims.arrive("b.md", 1)
    claims.wait("doc:k", _claimant(1, "b.md"))
    claims.arrive("m.md", 2)  # m.md names another key now
    assert claims.decide("doc:other", "m.md") == TAKE
    claims.take("doc:other", "m.md")
    settled = claims.arrive("n.md", 3)  # the stream passed m.md: doc:k is decided
    assert [(key, [c.path for c in waiting]) for key, waiting in settled] == [("doc:k", ["a.md", "b.md"])]
    claims.wait("doc:j", _claimant(3, "n.md"))
    assert [(key, [c.path for c in waiting]) for key, waiting in claims.rest()] == [("doc:j", ["n.md"])]


def test_a_rejected_journaled_file_keeps_its_keys() -> None:
    claims = KeyClaims({"doc:k": "m.md"})
    claims.arrive("a.md", 0)
    claims.wait("doc:k", _claimant(0, "a.md"))
    claims.arrive("m.md", 1)
    assert [(key, [c.path for c in waiting]) for key, waiting in claims.reserve("m.md")] == [
        ("doc:k", ["a.md"])
    ]
    assert claims.owner("doc:k") == "m.md"


@pytest.mark.parametrize("second", ["a.md", "b.md"])
def test_documents_come_in_ascending_path_order(second: str) -> None:
    claims = KeyClaims({})
    claims.arrive("b.md", 0)
    with pytest.raises(InvalidArgument) as refused:
        claims.arrive(second, 1)
    assert refused.value.violations[0].field == "documents[1].path"

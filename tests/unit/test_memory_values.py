"""Pure parts of memory records: validation paths, the extractive summariser, page tokens."""

from __future__ import annotations

import socket
from datetime import UTC
from datetime import datetime
from datetime import timedelta

import pytest

from common.kernel.errors import InvalidArgument
from ingest_service.memories.summaries import extractive_summary
from ingest_service.memories.validation import NewMemoryInput
from ingest_service.memories.validation import check_new_memory
from ingest_service.validation.fields import FieldChecker
from query_service.readers.memory_recall import decode_page_token

NOW = datetime(2026, 12, 2, tzinfo=UTC)


def _violations(item: NewMemoryInput, **kwargs: object) -> list[str]:
    check = FieldChecker("memories[3]")
    check_new_memory(item, check, NOW, **kwargs)  # type: ignore[arg-type]
    return [str(v) for v in check.violations]


def test_every_bad_field_is_named_under_its_item() -> None:
    bad = NewMemoryInput(
        text="",
        importance=float("nan"),
        tags=("ok", ""),
        memory_type="gossip",
        tier="lukewarm",
        ttl_seconds=0.5,
        metadata={"k": "v\x00"},
        expire_time=NOW - timedelta(seconds=1),
    )
    fields = {v.split(":")[0] for v in _violations(bad)}
    assert fields == {
        "memories[3].text",
        "memories[3].importance",
        "memories[3].tags[1]",
        "memories[3].memory_type",
        "memories[3].tier",
        "memories[3].ttl",
        "memories[3].metadata.k",
        "memories[3].expire_time",
    }
    assert _violations(NewMemoryInput(text="fine", importance=1.0, ttl_seconds=60)) == []


def test_an_update_checks_only_its_paths() -> None:
    assert _violations(NewMemoryInput(importance=2.0), paths=frozenset({"tags"})) == []
    assert [
        v.split(":")[0] for v in _violations(NewMemoryInput(importance=2.0), paths=frozenset({"importance"}))
    ] == ["memories[3].importance"]


def test_the_extractive_summary_is_deterministic_and_needs_no_network(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def no_network(*_args: object, **_kwargs: object) -> None:
        raise AssertionError("the summariser tried to reach the network")

    monkeypatch.setattr(socket.socket, "connect", no_network)
    texts = [
        "The customer could not log in after the MFA reset. Support was called twice.",
        "Support re-enrolled the MFA device. The customer logged in again.",
        "The incident was closed on Monday. The MFA reset procedure was updated.",
    ]
    first = extractive_summary(texts, 2)
    assert first == extractive_summary(texts, 2)
    chosen = [part if part.endswith(".") else part + "." for part in first.split(". ")]
    assert len(chosen) == 2 and all(sentence in " ".join(texts) for sentence in chosen)  # extracted verbatim
    russian = extractive_summary(
        ["Клиент не смог войти. Поддержка сбросила MFA.", "Вход снова работает. Инцидент закрыт."], 1
    )
    assert russian and russian.count(".") == 1


def test_a_foreign_page_token_is_invalid_argument() -> None:
    with pytest.raises(InvalidArgument) as raised:
        decode_page_token("not-a-token")
    assert raised.value.violations[0].field == "page_token"
    assert decode_page_token("") is None

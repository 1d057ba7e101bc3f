"""Enrichment in batches: `RuleEnricher.enrich_many` gives each text what `RuleEnricher.enrich` gives it
alone (on the debian changelog texts the enrichment benchmark uses, a Russian text, empty and blank
texts), and `BatchingEnricher` hands every concurrent caller its own result, batching the callers that
wait while a batch runs, and failing only the callers of a failing batch."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Sequence

import pytest

from ingest_service.memories.enrichment.batching import BatchingEnricher
from ingest_service.memories.enrichment.model import Enrichment
from ingest_service.memories.enrichment.model import MemoryText
from ingest_service.memories.enrichment.rule_enricher import RuleEnricher
from tests.conftest import CORPORA
from tests.unit.test_enrichment_rules import RUSSIAN
from tests.unit.test_enrichment_rules import SEED_EVENT


def _debian_texts(limit: int) -> list[str]:
    seen: dict[str, None] = {}
    with (CORPORA / "debian-uploads" / "observations.jsonl").open(encoding="utf-8") as lines:
        for line in lines:
            text = str(json.loads(line).get("content") or "").strip()
            if text:
                seen.setdefault(text, None)
            if len(seen) >= limit:
                break
    return list(seen)


def test_a_batch_enriches_each_text_as_alone() -> None:
    enricher = RuleEnricher()
    texts = [*_debian_texts(150), RUSSIAN, "", "   ", SEED_EVENT]
    items = [MemoryText(text) for text in texts]
    alone = [enricher.enrich(item) for item in items]
    assert enricher.enrich_many(items) == alone
    assert sum(len(result.entities) for result in alone) > 50  # the texts name entities: a real comparison
    assert {result.language for result in alone} == {"en", "ru"}


class _Recording:
    """An enricher recording its batches; its first batch waits until ``hold`` callers queue behind it."""

    name = "recording"

    def __init__(self, batching: list[BatchingEnricher], hold: int) -> None:
        self.batches: list[list[str]] = []
        self.batching = batching
        self.hold = hold
        self.fail_next = False

    def enrich(self, item: MemoryText) -> Enrichment:
        return self.enrich_many([item])[0]

    def enrich_many(self, items: Sequence[MemoryText]) -> list[Enrichment]:
        if not self.batches:
            deadline = time.monotonic() + 30
            while len(self.batching[0]._waiting) < self.hold and time.monotonic() < deadline:
                time.sleep(0.01)
        self.batches.append([item.text for item in items])
        if self.fail_next:
            self.fail_next = False
            raise RuntimeError("model failed")
        return [Enrichment(topics=(item.text,)) for item in items]


def _call_all(batching: BatchingEnricher, texts: list[str]) -> dict[str, object]:
    results: dict[str, object] = {}

    def call(text: str) -> None:
        try:
            results[text] = batching.enrich(MemoryText(text)).topics
        except RuntimeError as error:
            results[text] = error

    first = threading.Thread(target=call, args=(texts[0],))
    first.start()
    while not batching._running:
        time.sleep(0.001)
    others = [threading.Thread(target=call, args=(text,)) for text in texts[1:]]
    for thread in others:
        thread.start()
    for thread in [first, *others]:
        thread.join(60)
    return results


def test_callers_waiting_during_a_batch_share_the_next_one() -> None:
    holder: list[BatchingEnricher] = []
    inner = _Recording(holder, hold=5)
    batching = BatchingEnricher(inner)
    holder.append(batching)
    texts = [f"text {i}" for i in range(6)]
    results = _call_all(batching, texts)
    assert results == {text: (text,) for text in texts}
    assert [len(batch) for batch in inner.batches] == [1, 5]
    assert sorted(inner.batches[1]) == texts[1:]


def test_max_batch_splits_the_waiting_callers() -> None:
    holder: list[BatchingEnricher] = []
    inner = _Recording(holder, hold=5)
    batching = BatchingEnricher(inner, max_batch=2)
    holder.append(batching)
    texts = [f"text {i}" for i in range(6)]
    assert _call_all(batching, texts) == {text: (text,) for text in texts}
    assert [len(batch) for batch in inner.batches] == [1, 2, 2, 1]


def test_a_failing_batch_fails_its_callers_only() -> None:
    holder: list[BatchingEnricher] = []
    inner = _Recording(holder, hold=3)
    batching = BatchingEnricher(inner)
    holder.append(batching)
    inner.fail_next = True  # the first batch (one caller) fails
    results = _call_all(batching, ["a", "b", "c", "d"])
    assert isinstance(results["a"], RuntimeError)
    assert {k: v for k, v in results.items() if k != "a"} == {"b": ("b",), "c": ("c",), "d": ("d",)}
    assert batching.enrich(MemoryText("e")).topics == ("e",)


@pytest.mark.parametrize("size", [1, 3])
def test_a_lone_caller_is_enriched_at_once(size: int) -> None:
    holder: list[BatchingEnricher] = []
    inner = _Recording(holder, hold=0)
    batching = BatchingEnricher(inner)
    holder.append(batching)
    for i in range(size):
        assert batching.enrich(MemoryText(f"t{i}")).topics == (f"t{i}",)
    assert inner.batches == [[f"t{i}"] for i in range(size)]

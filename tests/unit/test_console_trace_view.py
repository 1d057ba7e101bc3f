"""The trace page's reading of a journaled compilation (memory_service_tools/console/trace_view.py)."""

from __future__ import annotations

from memory_service_tools.console.trace_view import compilation_of
from memory_service_tools.console.trace_view import decision_of


def test_a_chunk_decision_names_its_node_and_order_and_keeps_the_other_fields_as_details() -> None:
    decision = decision_of(
        {
            "kind": "chunk",
            "key": "doc:ledger#3",
            "score": 0.0312,
            "decision": "kept",
            "reason": "fits the budget",
            "tokens": 41,
            "rule": "search",
            "components": {"vector": 0.5},
        }
    )
    assert (decision.node_key, decision.chunk_order) == ("doc:ledger", 3)
    assert (decision.kept, decision.tokens) == (True, 41)
    assert decision.details == {"rule": "search", "components": {"vector": 0.5}}


def test_a_fact_decision_names_no_node_and_a_key_with_a_hash_is_a_node_when_not_followed_by_digits() -> None:
    fact = decision_of({"kind": "fact", "key": "fact-ab12", "decision": "dropped", "reason": "over budget"})
    assert (fact.node_key, fact.chunk_order, fact.kept, fact.score) == ("", None, False, None)
    node = decision_of({"kind": "node", "key": "doc:a#intro", "decision": "kept"})
    assert (node.node_key, node.chunk_order) == ("doc:a#intro", None)


def test_a_compilation_splits_kept_from_dropped_and_keeps_unknown_request_fields() -> None:
    request = {
        "query": "who works on billing?",
        "anchors": ["person:alice"],
        "as_of": "2026-10-01T00:00:00Z",
        "token_budget": 60,
        "token_count": 45,
        "encoding": "cl100k_base",
        "search_depth": 40,
    }
    decisions = [
        {"kind": "chunk", "key": "doc:a#0", "decision": "kept", "score": 0.2},
        {"kind": "fact", "key": "fact-1", "decision": "dropped", "score": 0.1},
        {"kind": "chunk", "key": "doc:a#1", "decision": "dropped", "score": 0.05},
    ]
    compilation = compilation_of(None, 7, request, decisions, hidden=2)
    assert [d.key for d in compilation.kept] == ["doc:a#0"]
    assert [d.key for d in compilation.dropped] == ["fact-1", "doc:a#1"]
    assert compilation.other == {"search_depth": 40}
    assert (compilation.percent, compilation.anchors, compilation.hidden) == (75, ["person:alice"], 2)
    assert compilation.raw == {"request": request, "decisions": decisions}
    assert compilation_of(None, 8, {}, [], 0).percent == 0

"""CompileContext's value of a participant link (`query_service.context.pack.fact_candidates`): pure."""

from __future__ import annotations

from datetime import UTC
from datetime import datetime

from common.storage.fact_rows import FactRow
from query_service.context.pack.fact_candidates import is_participant_link
from query_service.context.pack.fact_candidates import participant_link_value

NOW = datetime(2026, 11, 3, tzinfo=UTC)


def _fact(subject: str, predicate: str, obj: str) -> FactRow:
    return FactRow("fact-1", "ns", subject, predicate, obj, NOW, None, NOW, "asserted", 1.0)


def test_only_episode_actor_and_subject_facts_are_participant_links() -> None:
    assert is_participant_link(_fact("episode:obs-1", "SUBJECT", "service:payments-api"))
    assert is_participant_link(_fact("episode:obs-1", "ACTOR", "person:oncall"))
    assert not is_participant_link(_fact("person:dana", "WORKS_ON", "service:payments-api"))
    assert not is_participant_link(_fact("person:dana", "SUBJECT", "service:payments-api"))


def test_a_link_adds_what_its_episode_adds() -> None:
    link = _fact("episode:obs-1", "SUBJECT", "service:payments-api")
    relevance, reason = participant_link_value(link, {"episode:obs-1"}, has_query=True)
    assert relevance == 1.0 and reason.startswith("adds nothing")  # the episode is a candidate itself
    assert participant_link_value(link, {"episode:obs-2"}, has_query=True) == (0.0, "")  # not retrieved
    assert participant_link_value(link, set(), has_query=False) == (1.0, "")  # no query: the anchor decides

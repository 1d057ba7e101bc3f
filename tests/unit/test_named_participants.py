"""Who a question names among the participants of the turns found for it, and the question without
their names (`query_service.context.pack.participants`)."""

from __future__ import annotations

from datetime import UTC
from datetime import datetime
from typing import Any

from common.storage.episode_store import EpisodeTurn
from query_service.context.pack.participants import named_participants
from query_service.context.pack.participants import names_participant
from query_service.context.pack.participants import without_names


def _turn(actor: dict[str, Any] | None, subject: dict[str, Any] | None = None) -> EpisodeTurn:
    return EpisodeTurn(
        observation_id="obs-1",
        source_system="chat",
        source_stream="s",
        kind="chat.message",
        occurred_at=datetime(2024, 5, 1, tzinfo=UTC),
        actor=actor,
        subject=subject,
        recorded_order=1,
    )


def test_a_participant_is_named_when_every_word_of_its_id_is_a_word_of_the_question() -> None:
    turns = [
        _turn({"type": "person", "id": "caroline"}),
        _turn({"type": "person", "id": "melanie"}, {"type": "person", "id": "mary-ann"}),
        _turn({"type": "person", "id": "caroline"}),
        _turn(None),
    ]
    assert named_participants("What book did Melanie read from Caroline's suggestion?", turns) == [
        "caroline",
        "melanie",
    ]
    assert named_participants("What did Mary say?", turns) == []  # "mary-ann" needs both words
    assert named_participants("What did Mary Ann say?", turns) == ["mary-ann"]
    assert not names_participant({"what", "did", "carol", "say"}, "caroline")
    assert not names_participant({"what"}, "")


def test_the_question_without_a_name_keeps_every_other_word() -> None:
    assert without_names("What did Caroline research?", ["caroline"]) == "What did research"
    assert without_names("Did Jon and Gina both dance?", ["jon"]) == "Did and Gina both dance"
    assert without_names("Caroline?", ["caroline"]) == ""

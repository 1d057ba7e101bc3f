"""The episode header line shared by the writer and CompileContext (common/domain/episode_header.py)."""

from __future__ import annotations

from datetime import UTC
from datetime import datetime
from datetime import timedelta
from datetime import timezone

from common.domain.episode_header import episode_header
from common.domain.episode_header import without_episode_header

AT = datetime(2023, 5, 8, 13, 56, 30, tzinfo=UTC)
ANN = {"type": "person", "id": "ann"}


def test_the_header_is_dropped_only_when_it_is_exactly_this_observations() -> None:
    text = f"{episode_header(AT, ANN, None)}\nI saw a heron."
    assert text.startswith("2023-05-08 13:56 · ann\n")
    assert without_episode_header(text, AT, ANN, None) == "I saw a heron."
    assert without_episode_header("2023-05-08 13:56 · ann", AT, ANN, None) == ""
    # Another speaker, another minute, or a masked header: the text is kept as it is.
    assert without_episode_header(text, AT, {"type": "person", "id": "bob"}, None) == text
    assert without_episode_header(text, AT + timedelta(minutes=1), ANN, None) == text
    masked = "2023-05-08 13:56 · [email]\nI saw a heron."
    assert without_episode_header(masked, AT, {"type": "person", "id": "a@example.com"}, None) == masked


def test_the_header_is_in_utc_whatever_the_offset_of_occurred_at() -> None:
    local = AT.astimezone(timezone(timedelta(hours=3)))
    assert episode_header(local, ANN, {"type": "conversation", "id": "c-1"}) == (
        "2023-05-08 13:56 · ann · conversation:c-1"
    )

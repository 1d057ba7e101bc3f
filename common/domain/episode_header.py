"""The header line of an episode's text, shared by the writer and the readers.

ingest_service writes every episode chunk as ``<header>\\n<body>`` (`ingest_service.observations.episode_text`), so
full text finds who spoke and when; CompileContext renders a turn as its own compact line
(``HH:MM speaker: text``, `query_service.context.pack.conversation`) and drops the header with
`without_episode_header` instead of repeating the date and the speaker. Transport and storage free.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC
from datetime import datetime
from typing import Any

HEADER_SEPARATOR = " · "
ACTOR = "ACTOR"
SUBJECT = "SUBJECT"
PARTICIPANT_PREDICATES = frozenset({ACTOR, SUBJECT})
"""Predicates of the facts linking an episode to who or what took part (``episode:<id> ACTOR <key>``)."""


def participant_key(participant: Mapping[str, Any] | None) -> str:
    """``type:id`` of an observation's actor or subject ({type, id}); "" when there is none."""
    if not participant or not participant.get("type") or not participant.get("id"):
        return ""
    return f"{participant['type']}:{participant['id']}"


def episode_header(
    occurred_at: datetime, actor: Mapping[str, Any] | None, subject: Mapping[str, Any] | None
) -> str:
    """The first line of an episode's text: ``YYYY-MM-DD HH:MM · <actor id> · <subject type:id>``
    (UTC; a part left out when the observation has no actor or subject)."""
    parts = [occurred_at.astimezone(UTC).strftime("%Y-%m-%d %H:%M")]
    if actor and actor.get("id"):
        parts.append(str(actor["id"]))
    if subject_key := participant_key(subject):
        parts.append(subject_key)
    return HEADER_SEPARATOR.join(parts)


def without_episode_header(
    text: str,
    occurred_at: datetime,
    actor: Mapping[str, Any] | None,
    subject: Mapping[str, Any] | None,
) -> str:
    """``text`` of an episode chunk without its header line, when it starts with exactly the header of
    this observation (a masked or otherwise changed first line is kept as it is)."""
    header = episode_header(occurred_at, actor, subject)
    if text == header:
        return ""
    if text.startswith(header + "\n"):
        return text[len(header) + 1 :]
    return text

"""Who a question names, among the people who took part in the turns found for it, and the question
without their names: what the named-participant round of CompileContext searches for among their turns
(docs/explanation/context-compilation.md, "Turns of a named participant"). Transport free."""

from __future__ import annotations

import re
from collections.abc import Iterable
from collections.abc import Sequence

from common.storage.episode_store import EpisodeTurn
from query_service.context.pack.conversation import normalised_words

_WORD = re.compile(r"\w+")


def participant_ids(turn: EpisodeTurn) -> tuple[str, ...]:
    """The actor and subject ids of a turn (those present)."""
    return tuple(str(p["id"]) for p in (turn.actor, turn.subject) if isinstance(p, dict) and p.get("id"))


def names_participant(query_words: Iterable[str], participant: str) -> bool:
    """Whether every word of ``participant`` (an id, ``caroline``) is among ``query_words``."""
    parts = normalised_words(participant)
    return bool(parts) and set(parts) <= set(query_words)


def named_participants(query: str, turns: Iterable[EpisodeTurn]) -> list[str]:
    """The actor and subject ids of ``turns`` that ``query`` names (`names_participant`), in the order
    first met."""
    words = set(normalised_words(query))
    named: dict[str, None] = {}
    for turn in turns:
        for participant in participant_ids(turn):
            if participant not in named and names_participant(words, participant):
                named[participant] = None
    return list(named)


def without_names(query: str, participants: Sequence[str]) -> str:
    """``query`` without the words of ``participants``' ids ("What did Caroline research?" ->
    "What did research?"): among one person's turns the name matches them all and says nothing."""
    names = {word for participant in participants for word in normalised_words(participant)}
    kept = [word for word in _WORD.findall(query) if word.lower() not in names]
    return " ".join(kept)

"""Compact rendering of conversation turns and redundancy checks for CompileContext.
Transport free.

A turn (an observation's episode chunk, `common.storage.episode_store.EpisodeTurn`) is one line,
``"HH:MM speaker: text"`` (the text verbatim), under the header of its block, ``"[YYYY-MM-DD system/stream]"``: the turns of
one stream on one day (a chat session) share one header, so the date and the stream are written once
instead of a ``[title — heading] node_key#chunk_order`` header per turn. The speaker is the observation's
actor id (its subject's when it has no actor, else its kind).

Redundancy: two candidates are duplicates when their `normalised_words` are equal (case, punctuation and
spacing aside), near duplicates when both have at least `NEAR_DUPLICATE_MIN_WORDS` words and the Jaccard
similarity of their word sets is at least ``threshold`` (Broder 1997, resemblance of documents). Only the
word sets that can reach the threshold are compared, found by prefix filtering (Chaudhuri, Ganti, Kaushik,
ICDE 2006; Bayardo, Ma, Srikant, WWW 2007): with the words of every set in one global order (longer
words first, as a stand-in for rarer words first), two sets
of Jaccard similarity >= t share a word among the first ``|x| - ceil(t * |x|) + 1`` words of each, so
an inverted index of those prefix words yields every candidate pair (instead of comparing each text with
all earlier ones: 114 texts per LoCoMo compile, ~6,500 comparisons).
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable
from collections.abc import Sequence
from dataclasses import dataclass
from dataclasses import field
from datetime import UTC

from common.domain.episode_header import without_episode_header
from common.storage.episode_store import EpisodeTurn

_WORD = re.compile(r"\w+")
NEAR_DUPLICATE_MIN_WORDS = 6


def speaker_of(turn: EpisodeTurn) -> str:
    """Who spoke: the actor's id, else the subject's id, else the observation kind."""
    for participant in (turn.actor, turn.subject):
        if isinstance(participant, dict) and participant.get("id"):
            return str(participant["id"])
    return turn.kind


def turn_header(turn: EpisodeTurn, stream: str) -> str:
    """``[YYYY-MM-DD stream]``: the header of the turns of ``stream`` (as shown) on the turn's day (UTC)."""
    return f"[{turn.occurred_at.astimezone(UTC):%Y-%m-%d} {stream}]"


def turn_line(turn: EpisodeTurn, speaker: str, text: str) -> str:
    """``HH:MM speaker: text`` (UTC); ``text`` verbatim (a message written on several lines keeps them)
    but without the episode's own header line (date, actor, subject: `without_episode_header`), which
    this line and its block header already say."""
    body = without_episode_header(text, turn.occurred_at, turn.actor, turn.subject)
    return f"{turn.occurred_at.astimezone(UTC):%H:%M} {speaker}: {body}"


def rarer_first(words: Iterable[str]) -> list[str]:
    """``words`` in the global word order of the prefix filter: longer words first (short ones, "a", "i",
    "the", are the common ones whose index entries would name almost every text), then alphabetical,
    i.e. sorted by ``(-len(word), word)``. Two sorts in C (alphabetical, then stable by length, longest
    first): a key function in Python was a third of the time of a CompileContext's redundancy checks
   ."""
    return sorted(sorted(words), key=len, reverse=True)


def normalised_words(text: str) -> tuple[str, ...]:
    """The lower-cased words of ``text`` (``\\w+``), in order."""
    return tuple(_WORD.findall(text.lower()))


@dataclass
class RedundancyFilter:
    """Finds duplicates and near duplicates among texts offered best first (see the module doc).

    Args:
        threshold: the word-set Jaccard similarity from which two texts are near duplicates, in (0, 1].
    """

    threshold: float = 0.85
    _exact: dict[tuple[str, ...], str] = field(default_factory=dict)
    _sets: list[tuple[frozenset[str], str]] = field(default_factory=list)
    _by_prefix_word: dict[str, list[int]] = field(default_factory=dict)  # word -> indexes into _sets
    redundant_with: str = ""  # the key of the better candidate the last redundant text repeats

    def _prefix(self, ordered: list[str]) -> list[str]:
        """The words of a set (in the global order) two sets of similarity >= threshold must share one of."""
        return ordered[: len(ordered) - math.ceil(self.threshold * len(ordered)) + 1]

    def offer(self, key: str, text: str) -> str:
        """``""`` when ``text`` is new (then remembered under ``key``), otherwise why it is redundant.
        The reason names no key: it is journaled in ``context_traces``, where another reader may not
        see the better candidate (`redundant_with` names it)."""
        words = normalised_words(text)
        if not words:
            return ""
        earlier = self._exact.get(words)
        if earlier is not None:
            self.redundant_with = earlier
            return "duplicate of a better chunk"
        self._exact[words] = key
        if len(words) < NEAR_DUPLICATE_MIN_WORDS:
            return ""
        bag = frozenset(words)
        prefix = self._prefix(rarer_first(bag))
        candidates: Sequence[int] = range(len(self._sets))  # threshold 0: every set reaches it
        if self.threshold > 0:
            candidates = sorted({index for word in prefix for index in self._by_prefix_word.get(word, ())})
        for index in candidates:  # in offer order: the best earlier text is named
            other, other_key = self._sets[index]
            smaller, larger = (len(bag), len(other)) if len(bag) <= len(other) else (len(other), len(bag))
            if smaller < self.threshold * larger:  # Jaccard <= smaller / larger: cannot reach it
                continue
            shared = len(bag & other)
            similarity = shared / (len(bag) + len(other) - shared)
            if similarity >= self.threshold:
                self.redundant_with = other_key
                return f"near duplicate of a better chunk (word overlap {similarity:.2f})"
        for word in prefix:
            self._by_prefix_word.setdefault(word, []).append(len(self._sets))
        self._sets.append((bag, key))
        return ""


def redundant(texts: Sequence[tuple[str, str]], threshold: float = 0.85) -> dict[str, str]:
    """For ``(key, text)`` pairs best first: the keys of the redundant ones, with why."""
    check = RedundancyFilter(threshold)
    out: dict[str, str] = {}
    for key, text in texts:
        reason = check.offer(key, text)
        if reason:
            out[key] = reason
    return out

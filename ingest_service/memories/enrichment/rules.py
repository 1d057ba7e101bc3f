"""The documented rules of enrichment: insights, memory_type and quality_score
(docs/how-to/memory-records.md "Semantic enrichment"), over the sentences, entities and key points
already found. Cues are whole words or phrases (a stem written ``word*`` matches at a word start),
case-insensitive, English and Russian; the lists below are the whole rule.

**insights**: the sentences that state a cause or a comparison, in text order, at most `MAX_INSIGHTS`:
``CAUSAL_CUES`` (because, due to, therefore, as a result, leads to, caused, so that; потому что, из-за,
поэтому, в результате, так как, привело) or ``COMPARATIVE_CUES`` (than, compared, better, worse,
faster, slower, instead of, rather than, more/less ... than; чем, лучше, хуже, быстрее, медленнее,
по сравнению, вместо).

**memory_type**: the first rule that holds, in this order:

1. ``reference``: the text has a URL, or a ``REFERENCE_CUES`` stem (see, documentation, docs, manual,
   link, guide, wiki, runbook; см., документаци, инструкци, ссылк) and at most two sentences;
2. ``decision``: a ``DECISION_CUES`` stem (decided, decision, agreed, approved, chose, we will, going
   forward, from now on; решил, решение, договорились, утвердил, выбрал);
3. ``analysis``: two or more insights, or an ``ANALYSIS_CUES`` stem (analysis, trend, correlat,
   indicates, suggests, root cause, percent, %; анализ, тренд, указывает, свидетельствует);
4. ``insight``: exactly one insight;
5. ``event``: the caller's event_type is set, or an ``EVENT_CUES`` stem (reported, happened, occurred,
   failed, crashed, deployed, released, incident, outage, meeting, yesterday, today, on Monday...;
   сообщил, произошл, случил, сбой, инцидент, вчера, сегодня);
6. ``narrative``: four or more sentences;
7. ``fact``: everything else (a statement of how things are: "User Alice prefers concise replies").

**quality_score** in [0, 1], the clamped sum of (the weights are the rule)::

    0.15
    + 0.30 * length       words: 0 below 3, rising to 1 at 8, 1 up to 150, falling to 0.6 at 400
    + 0.25 * specificity  min(1, (entities + numbers) / 3): names, ids, amounts make a memory usable
    + 0.20 * diversity    distinct words / words (repetition lowers it)
    + 0.10 * structure    1 when a sentence has at least 4 words (a statement, not a fragment)
    - 0.30 * filler       1 when the whole text is a greeting or acknowledgement (FILLER_WORDS)
    - 0.10 * hedging      share of sentences with a hedge (maybe, perhaps, I think, not sure; может быть,
                          кажется, наверное)
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from ingest_service.memories.enrichment.key_phrases import words

MAX_INSIGHTS = 3


def _cues(*cues: str) -> re.Pattern[str]:
    """One pattern for the cues: a cue ending in ``*`` is a stem (matches at a word start), the others
    whole words or phrases."""
    parts = [re.escape(cue[:-1]) if cue.endswith("*") else re.escape(cue) + r"(?!\w)" for cue in cues]
    return re.compile(r"(?<!\w)(?:" + "|".join(parts) + ")", re.IGNORECASE)


CAUSAL_CUES = _cues(
    "because", "due to", "therefore", "as a result", "leads to", "led to", "caused", "causes",
    "so that", "thanks to", "resulting in",
    "потому что", "из-за", "поэтому", "в результате", "так как", "привел*", "привёл*", "благодаря",
)  # fmt: skip
COMPARATIVE_CUES = _cues(
    "than", "compared", "better", "worse", "faster", "slower", "cheaper", "instead of", "rather than",
    "чем", "лучше", "хуже", "быстрее", "медленнее", "дешевле", "по сравнению", "вместо",
)  # fmt: skip
REFERENCE_CUES = _cues(
    "see", "documentation", "docs", "manual", "link", "guide", "wiki", "runbook", "reference",
    "см.", "документаци*", "инструкци*", "ссылк*", "руководств*",
)  # fmt: skip
URL = re.compile(r"https?://\S+|www\.\S+", re.IGNORECASE)
DECISION_CUES = _cues(
    "decided", "decision", "agreed", "approved", "chose", "we will", "we'll", "going forward",
    "from now on", "will switch", "signed off",
    "решил*", "решени*", "договорил*", "утвердил*", "выбрал*", "будем",
)  # fmt: skip
ANALYSIS_CUES = _cues(
    "analysis", "analyz*", "analys*", "trend*", "correlat*", "indicates", "suggests", "root cause",
    "percent*", "анализ*", "тренд*", "указывает", "свидетельству*", "коррел*",
)  # fmt: skip
PERCENT = re.compile(r"\d\s?%")
EVENT_CUES = _cues(
    "reported", "happened", "occurred", "failed", "crashed", "deployed", "released",
    "incident", "outage", "meeting", "met", "called", "visited", "purchased", "signed up",
    "yesterday", "today", "last week", "this morning", "on monday", "on tuesday", "on wednesday",
    "on thursday", "on friday", "on saturday", "on sunday",
    "сообщил*", "произош*", "случил*", "сбой*", "инцидент*", "вчера", "сегодня", "встреч*", "позвонил*",
)  # fmt: skip
HEDGE_CUES = _cues(
    "maybe", "perhaps", "i think", "not sure", "possibly", "might", "probably",
    "может быть", "кажется", "наверное", "возможно",
)  # fmt: skip
FILLER_WORDS = frozenset(
    [
        "hi",
        "hello",
        "hey",
        "thanks",
        "thank",
        "you",
        "ok",
        "okay",
        "yes",
        "no",
        "sure",
        "great",
        "cool",
        "bye",
        "good",
        "morning",
        "lol",
        "please",
        "привет",
        "здравствуйте",
        "спасибо",
        "ок",
        "хорошо",
        "да",
        "нет",
        "пока",
        "ладно",
        "понятно",
        "отлично",
    ]
)
NUMBER = re.compile(r"\d+")


def insights(sentences: Sequence[str]) -> tuple[str, ...]:
    """The sentences that state a cause or a comparison (see the module doc)."""
    found = [s for s in sentences if CAUSAL_CUES.search(s) or COMPARATIVE_CUES.search(s)]
    return tuple(found[:MAX_INSIGHTS])


def memory_type(text: str, sentences: Sequence[str], insight_count: int, event_type: str = "") -> str:
    """The memory type of ``text`` by the first rule of the module doc that holds."""
    if URL.search(text) or (REFERENCE_CUES.search(text) and len(sentences) <= 2):
        return "reference"
    if DECISION_CUES.search(text):
        return "decision"
    if insight_count >= 2 or ANALYSIS_CUES.search(text) or PERCENT.search(text):
        return "analysis"
    if insight_count == 1:
        return "insight"
    if event_type or EVENT_CUES.search(text):
        return "event"
    if len(sentences) >= 4:
        return "narrative"
    return "fact"


def _length_factor(count: int) -> float:
    if count < 3:
        return 0.0
    if count < 8:
        return (count - 2) / 6
    if count <= 150:
        return 1.0
    return max(0.6, 1.0 - 0.4 * (count - 150) / 250)


def quality_score(text: str, sentences: Sequence[str], entity_count: int) -> float:
    """The quality score of ``text`` by the formula of the module doc, rounded to 3 decimals."""
    tokens = [token.lower() for token in words(text)]
    if not tokens:
        return 0.0
    numbers = len(NUMBER.findall(text))
    specificity = min(1.0, (entity_count + numbers) / 3)
    diversity = len(set(tokens)) / len(tokens)
    structure = 1.0 if any(len(words(s)) >= 4 for s in sentences) else 0.0
    filler = 1.0 if all(token in FILLER_WORDS for token in tokens) else 0.0
    hedging = sum(1 for s in sentences if HEDGE_CUES.search(s)) / max(1, len(sentences))
    score = (
        0.15
        + 0.30 * _length_factor(len(tokens))
        + 0.25 * specificity
        + 0.20 * diversity
        + 0.10 * structure
        - 0.30 * filler
        - 0.10 * hedging
    )
    return round(min(1.0, max(0.0, score)), 3)

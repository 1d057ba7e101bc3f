"""SummarizeMemories: summary records and their lineage (docs/how-to/memory-records.md).

A group of the caller's memories (by ids, or by a filter) becomes one summary record: ``is_summary``,
``parent_id`` = the group id, ``summarized_ids`` = the originals (node props, and LINKS_TO edges from the
summary node to each original: its provenance in the graph). Lossy (default): the originals get
``summary_id`` and ``hidden``, so recall and lists show the summary instead (the originals stay readable
by id, for audit); lossless: the originals get ``summary_id`` only and stay recallable, and recall can
expand the summary into them.

The text is extractive and deterministic: sentences split by pysbd (rule-based, no downloaded data),
ranked by LexRank (Erkan & Radev 2004, the package sumy, with its Snowball stemmer and English stop
words; no NLTK data is needed because the sentences and words are given to it), the best
``max_sentences`` kept in document order. The summary's id derives from the group id
(`common.kernel.memory_names.memory_id` of ``"summary:" + group_id``), so summarising the same group again
returns the existing summary and writes nothing.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from collections.abc import Sequence
from dataclasses import dataclass
from dataclasses import field
from dataclasses import replace
from datetime import UTC
from datetime import datetime
from typing import Any

import numpy as np
import pysbd
from sumy.models.dom import ObjectDocumentModel
from sumy.models.dom import Paragraph
from sumy.models.dom import Sentence
from sumy.nlp.stemmers import Stemmer
from sumy.summarizers.lex_rank import LexRankSummarizer
from sumy.utils import get_stop_words

from common.domain.memory_records import MemoryRecord
from common.domain.memory_records import ensure_memory_label
from common.domain.memory_records import memory_node
from common.domain.memory_records import memory_props
from common.domain.memory_records import record_of
from common.domain.memory_scope import MemoryScope
from common.kernel.errors import FieldViolation
from common.kernel.errors import InvalidArgument
from common.kernel.memory_names import memory_id
from common.kernel.memory_names import summary_group_id
from common.storage.chunks.store import embedding_input
from common.storage.database import Database
from common.storage.graph.store import GraphStore
from common.storage.key_locks import lock_node_keys
from common.storage.memories.store import MemoryQuery
from common.storage.memories.store import MemoryStore
from ingest_service.memories.writer import MemoryWriter
from ingest_service.memories.writer import owned_row

MIN_GROUP, MAX_GROUP = 2, 1000
DEFAULT_SENTENCES, MAX_SENTENCES = 3, 20
SUMMARISER = "sumy.lexrank+pysbd"
_CYRILLIC = re.compile(r"[\u0400-\u04FF]")
_WORD = re.compile(r"\w+", re.UNICODE)


@dataclass(frozen=True)
class SummaryInput:
    """A SummarizeMemoriesRequest in domain form (exactly one of ``memory_ids`` and ``query``)."""

    memory_ids: tuple[str, ...] = ()
    query: MemoryQuery | None = None
    lossless: bool = False
    group_id: str = ""
    max_sentences: int = 0
    tags: tuple[str, ...] = ()
    metadata: Mapping[str, Any] = field(default_factory=dict)


class _Tokens:
    """The tokenizer interface sumy's models expect (words only: sentences come from pysbd)."""

    def __init__(self, language: str) -> None:
        self.language = language

    def to_words(self, sentence: str) -> tuple[str, ...]:
        return tuple(_WORD.findall(sentence))


def extractive_summary(texts: Sequence[str], max_sentences: int) -> str:
    """The best ``max_sentences`` sentences of ``texts`` by LexRank, in document order (deterministic).

    The language (English or Russian, for the segmenter and the stemmer) is Russian when at least a
    third of the letters are Cyrillic.
    """
    joined = " ".join(texts)
    letters = sum(ch.isalpha() for ch in joined) or 1
    russian = len(_CYRILLIC.findall(joined)) / letters >= 1 / 3
    language = "russian" if russian else "english"
    segmenter = pysbd.Segmenter(language="ru" if russian else "en", clean=False)
    tokens = _Tokens(language)
    sentences = [
        Sentence(text.strip(), tokens)
        for original in texts
        for text in segmenter.segment(original)
        if _WORD.search(text)
    ]
    if len(sentences) <= max_sentences:
        return " ".join(str(s) for s in sentences)
    summarizer = LexRankSummarizer(Stemmer(language))
    if not russian:  # sumy ships English stop words, not Russian ones
        summarizer.stop_words = get_stop_words("english")
    chosen = summarizer(ObjectDocumentModel([Paragraph(sentences)]), max_sentences)
    return " ".join(str(s) for s in chosen)


class MemorySummarizer:
    """Writes summary records (see the module doc).

    Args:
        database: the process's database.
        writer: the memory writer (its encoder embeds the summary, its hook hears of it).
    """

    def __init__(self, database: Database, writer: MemoryWriter) -> None:
        self.database = database
        self.writer = writer
        self.store = MemoryStore(database.settings)
        self.graph = GraphStore(database)

    def summarize(self, scope: MemoryScope, request: SummaryInput) -> tuple[MemoryRecord, bool]:
        """The summary record of the group, and whether it was written now.

        Raises:
            InvalidArgument: neither or both of ids and filter; fewer than 2 or more than 1000 members;
                unknown ids (``memory_ids[i]``); a member that is a summary or already summarised by
                another summary; ``max_sentences`` outside 0..20; a bad ``group_id``.
            Unavailable: the database cannot be reached (nothing written).
        """
        now = datetime.now(UTC)
        violations: list[FieldViolation] = []
        if bool(request.memory_ids) == (request.query is not None):
            violations.append(FieldViolation("memory_ids", "give memory_ids or filter (exactly one)"))
        if not 0 <= request.max_sentences <= MAX_SENTENCES:
            violations.append(FieldViolation("max_sentences", f"0..{MAX_SENTENCES}"))
        if len(request.group_id) > 200 or "\x00" in request.group_id:
            violations.append(FieldViolation("group_id", "at most 200 characters, no NUL"))
        if violations:
            raise InvalidArgument(violations)
        ensure_memory_label(self.database, self.graph)
        members = self._members(scope, request, now)
        ids = [m.memory_id for m in members]
        group = request.group_id or summary_group_id(ids)
        key = memory_id(scope.namespace, scope.user_id, "summary:" + group)
        with self.database.connection() as conn:
            existing = self.store.get(conn, scope.namespace, scope.user_id, [key])
        if key in existing:
            return record_of(existing[key], now), False
        for index, member in enumerate(members):
            if member.summary_id and member.summary_id != key:
                raise InvalidArgument.single(
                    f"memory_ids[{index}]", f"already summarised by {member.summary_id}"
                )
        text = extractive_summary([m.text for m in members], request.max_sentences or DEFAULT_SENTENCES)
        vector = self.writer.encoder.encode_passages([embedding_input("", "", text)])[0]
        shared = set(members[0].tags).intersection(*(m.tags for m in members[1:]))
        tags = tuple(dict.fromkeys(request.tags)) or tuple(t for t in members[0].tags if t in shared)
        importance = max(m.importance for m in members)

        def work(conn: Any) -> bool:
            lock_node_keys(conn, [(scope.namespace, k) for k in [key, *ids]])
            inserted = self.store.insert_rows(
                conn,
                [
                    owned_row(
                        scope,
                        key,
                        idempotency_key="summary:" + group,
                        source="summary",
                        event_type="",
                        tags=tags,
                        importance=importance,
                        memory_type="",
                        tier="hot",
                        expires_at=None,
                        created_at=now,
                        is_summary=True,
                        lossless=request.lossless,
                        parent_id=group,
                    )
                ],
            )
            if key not in inserted:
                return False
            props = memory_props(
                text=text,
                summary="",
                metadata=request.metadata,
                provenance={"summariser": SUMMARISER, "summarized_ids": ids, "lossless": request.lossless},
                scope_keys=scope.as_dict(),
                summarized_ids=ids,
            )
            result = self.graph.upsert_node(
                conn, memory_node(scope.namespace, key, props), now=now, overwrite=True
            )
            self.writer.write_chunk(conn, scope, key, text, tags, "summary", np.asarray(vector))
            targets = self.graph.node_labels(conn, scope.namespace, ids)
            self.graph.replace_links(conn, scope.namespace, key, result.label, targets)
            self.store.cover_by_summary(conn, scope.namespace, ids, key, hidden=not request.lossless, now=now)
            return True

        created = self.database.run_transaction(work)
        if created:
            self.writer.notify([(scope.namespace, key, 1)])
        with self.database.connection() as conn:
            stored = self.store.get(conn, scope.namespace, scope.user_id, [key])
        return record_of(stored[key], now), created

    def _members(self, scope: MemoryScope, request: SummaryInput, now: datetime) -> list[MemoryRecord]:
        if request.query is not None:
            query = replace(request.query, is_summary=False, include_expired=False, include_hidden=False)
            with self.database.connection() as conn:
                stored = self.store.list_page(conn, query, limit=MAX_GROUP + 1, oldest_first=True)
            members = [record_of(s, now) for s in stored if not s.row["summary_id"]]
            if not MIN_GROUP <= len(members) <= MAX_GROUP:
                raise InvalidArgument.single(
                    "filter", f"matches {len(members)} unsummarised memories; {MIN_GROUP}..{MAX_GROUP} needed"
                )
            return members
        ids = list(dict.fromkeys(request.memory_ids))
        if not MIN_GROUP <= len(ids) <= MAX_GROUP:
            raise InvalidArgument.single("memory_ids", f"{MIN_GROUP}..{MAX_GROUP} distinct ids")
        with self.database.connection() as conn:
            stored = self.store.get(conn, scope.namespace, scope.user_id, ids)
        violations = [
            FieldViolation(f"memory_ids[{index}]", "no such memory in the caller's scope")
            for index, key in enumerate(ids)
            if key not in stored
        ]
        violations += [
            FieldViolation(f"memory_ids[{index}]", "is a summary")
            for index, key in enumerate(ids)
            if key in stored and stored[key].row["is_summary"]
        ]
        if violations:
            raise InvalidArgument(violations)
        return [record_of(stored[key], now) for key in ids]


__all__ = ["SUMMARISER", "MemorySummarizer", "SummaryInput", "extractive_summary"]

"""Identifiers of domain-pack kinds found in text, and the MENTIONS links they make at write time
(docs/how-to/domain-packs.md: ``kinds[].idPatterns``).

Identifiers are found by `common.packs.identifier_patterns.find_identifiers` (also used by CompileTypedContext
to find anchors in the query text).

**Linking at write time** (`MentionLinker`). When a namespace has packs enabled, the identifiers in an
observation's content (and its text fragments) and in a document's chunks (Retain, PutChunks) link the
episode or document to the nodes of those keys that EXIST in the namespace (a placeholder counts; a
missing node is skipped, never created) with a fact edge ``source MENTIONS target`` of evidence
``extracted`` (a deterministic rule, docs/explanation/knowledge-model.md), confidence 1.0, in the transaction of the write:

* the fact's ``valid_from`` is the observation's ``occurred_at`` for an episode (so its fact_id,
  docs/explanation/knowledge-model.md, is the same on every replay) and the time the mention was first seen for a document;
* a target that the source already MENTIONS with an open interval is left alone, so writing the same
  input again creates nothing;
* Retain replaces the whole text, so its open MENTIONS facts whose target is no longer named are closed
  (``valid_to`` = the write time); PutChunks sends only some chunks and closes nothing;
* the fact carries the source's scopes (a hidden document's mentions are hidden with it), its
  ``source_path``, and for an episode the observation id (a redaction or purge of the observation takes
  the mention's evidence away like any other fact's).

MENTIONS is not a relation of any pack; CompileTypedContext follows it as a built-in relation.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from common.domain.write_access import WriteAccess
from common.packs.identifier_patterns import MENTIONS
from common.packs.identifier_patterns import find_identifiers
from common.packs.kind_validation import NamespaceKinds
from common.storage.graph.store import GraphStore
from ingest_service.facts.engine import FactEngine
from ingest_service.facts.engine import FactInput
from ingest_service.facts.engine import accepted

MENTION_EVIDENCE = "extracted"
MENTION_CONFIDENCE = 1.0


@dataclass(frozen=True)
class MentionSource:
    """The episode or document whose text is scanned.

    Attributes:
        namespace: its namespace.
        natural_key: the episode (``episode:<observation_id>``) or document key: the MENTIONS subject.
        texts: the text scanned (observation content and text fragments; document title and chunks).
        valid_from: the facts' valid_from (an episode's occurred_at); None means the write time.
        observation_id: the observation proving the facts (episodes), None for documents.
        scopes: visibility and relevance scopes the facts carry (the source's own).
        source_path: the citation target of the facts.
        complete: ``texts`` is the source's whole text, so open mentions of targets it no longer names
            are closed (Retain).
    """

    namespace: str
    natural_key: str
    texts: Sequence[str]
    valid_from: datetime | None = None
    observation_id: str | None = None
    scopes: Sequence[str] = ()
    source_path: str = ""
    complete: bool = False


@dataclass(frozen=True)
class MentionResult:
    """``linked``: targets newly linked; ``unchanged``: already linked; ``missing``: identifiers without a
    node (skipped); ``closed``: targets no longer named (Retain)."""

    linked: tuple[str, ...] = ()
    unchanged: tuple[str, ...] = ()
    missing: tuple[str, ...] = ()
    closed: tuple[str, ...] = ()


class MentionLinker:
    """Writes the MENTIONS facts of one source inside the caller's transaction (see the module doc)."""

    def __init__(self, graph: GraphStore) -> None:
        self.graph = graph
        self.engine = FactEngine(graph)

    def link(
        self, conn: Any, kinds: NamespaceKinds, source: MentionSource, *, now: datetime
    ) -> MentionResult:
        """Links ``source`` to the existing nodes its text names; a no-op without packs."""
        if not kinds.active:
            return MentionResult()
        keys = [
            match.natural_key
            for match in find_identifiers(kinds, source.texts)
            if match.natural_key != source.natural_key
        ]
        # Nodes hidden from the writer's scopes count as missing (`common.domain.write_access`).
        visible = WriteAccess.of_caller().visibility
        existing = self.graph.node_labels(conn, source.namespace, keys, visibility=visible) if keys else {}
        targets = [key for key in keys if key in existing]
        missing = tuple(key for key in keys if key not in existing)
        return self._write(conn, source, targets, missing, evidence=MENTION_EVIDENCE, now=now)

    def link_entities(
        self, conn: Any, source: MentionSource, keys: Sequence[str], *, evidence: str, now: datetime
    ) -> MentionResult:
        """Links ``source`` to the entities ``keys`` found in its text by an enricher
        (`ingest_service.memories.enrichment`), CREATING the missing ones: `FactEngine` makes them placeholders
        that carry the source's restricting scopes, so an entity of a user's memory is seen
        by that user's readers only. Same rules as `link` otherwise (open mentions kept, ``complete``
        closes the targets no longer named); ``evidence`` is the enricher's (``extracted``, ``inferred``).
        """
        targets = [key for key in dict.fromkeys(keys) if key != source.natural_key]
        return self._write(conn, source, targets, (), evidence=evidence, now=now)

    def _write(
        self,
        conn: Any,
        source: MentionSource,
        targets: list[str],
        missing: tuple[str, ...],
        *,
        evidence: str,
        now: datetime,
    ) -> MentionResult:
        if not targets and not source.complete:
            return MentionResult(missing=missing)
        open_facts = {
            row.object_key: row
            for row in self.engine.facts.open_facts(conn, source.namespace, source.natural_key, MENTIONS)
        }
        linked = [target for target in targets if target not in open_facts]
        accepted(
            self.engine.record(
                conn,
                [
                    FactInput(
                        field="mentions",
                        namespace=source.namespace,
                        subject=source.natural_key,
                        predicate=MENTIONS,
                        object=target,
                        valid_from=source.valid_from or now,
                        evidence=evidence,
                        confidence=MENTION_CONFIDENCE,
                        scopes=list(source.scopes),
                        observation_id=source.observation_id,
                        source_path=source.source_path,
                    )
                    for target in linked
                ],
                now=now,
            )
        )
        closed = []
        if source.complete:
            for target, row in open_facts.items():
                if target not in targets:
                    self.engine.close(conn, source.namespace, row.fact_id, now)
                    closed.append(target)
        unchanged = tuple(target for target in targets if target in open_facts)
        return MentionResult(tuple(linked), unchanged, missing, tuple(closed))

"""Projecting one stored observation into the graph (docs/explanation/knowledge-model.md).

`ObservationProjector.project` writes the projections of a batch of new observations, inside the batch
transaction of `ingest_service.observations.recorder.ObservationRecorder`, in this order:

1. the **episodes**: a node ``episode:<observation_id>`` per observation with provenance to it, and its
   searchable text (a header line with occurred_at, actor and subject, then content and scalar data:
   `ingest_service.observations.episode_text`) as chunks written with their embedding pending (the background
   embedder, `ingest_service.embedding.episodes`, fills it) or, when the recorder embedded them inline,
   with it; one node upsert and one chunk write for the whole batch (`ObservationProjector._episodes`);
2. the **entities** each observation asserts, merged into existing nodes (`_entities`);
3. the **facts**: the ACTOR and SUBJECT facts from each episode to its participants' nodes and the
   asserted facts, in one call of the fact engine (`_facts`, `FactEngine.record`);
4. the **text fragments** of each observation: a ``text:<observation_id>/<index>`` node with one
   embedded chunk each (`_text_fragments`);
5. the **identifier links**: MENTIONS facts from the episode to the existing nodes its text names
   (`_identifier_links`).

Personal data marks (docs/how-to/personal-data.md): the episode and its chunks carry the explicit
marks plus, with CB_PII_PROTECTION, what the detector finds in everything the episode stands for; each
text fragment carries the explicit marks and what is found in the fragment itself.

An assertion that cannot be applied (hidden entity, pack violation, fact the engine rejects) is skipped
and listed in `Projection.rejected` as ``(field, reason)``; the rest of the observation is still written.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from dataclasses import field
from datetime import datetime
from typing import Any

import numpy as np

from common.domain.scope_inheritance import inherited_scopes
from common.domain.scope_inheritance import reaches_beyond
from common.domain.scope_inheritance import restricting_scopes
from common.domain.write_access import WriteAccess
from common.kernel.config import Settings
from common.kernel.identifiers import canonical_instant
from common.kernel.pii import PiiMarks
from common.packs.kind_validation import KindValidator
from common.packs.kind_validation import NamespaceKinds
from common.storage.chunks.store import ChunkStore
from common.storage.chunks.store import ChunkWrite
from common.storage.chunks.store import NodeRef
from common.storage.chunks.store import embedding_input
from common.storage.graph.store import GraphStore
from common.storage.graph.store import NodeWrite
from ingest_service.facts.engine import AssertionRejected
from ingest_service.facts.engine import FactEngine
from ingest_service.facts.engine import FactInput
from ingest_service.facts.mentions import MentionLinker
from ingest_service.facts.mentions import MentionSource
from ingest_service.facts.validation import resolve_fact_kinds
from ingest_service.observations.episode_text import episode_pieces
from ingest_service.observations.episode_text import participant_facts
from ingest_service.observations.validation import ObservationInput


@dataclass
class Projection:
    """What the projection of one observation wrote, and the assertions it skipped as (field, reason)."""

    episode_key: str = ""
    entities_upserted: int = 0
    facts_created: int = 0
    facts_strengthened: int = 0
    text_fragments: int = 0
    rejected: list[tuple[str, str]] = field(default_factory=list)


@dataclass
class _Context:
    """What every part of one observation's projection refers to, and what it has written so far."""

    conn: Any
    item: ObservationInput
    kinds: NamespaceKinds
    now: datetime
    key: str  # the episode's natural key, episode:<observation_id>
    title: str  # "<kind> <subject key>"
    source_path: str  # the provenance uri, the citation target
    projection: Projection
    known: dict[str, str] = field(default_factory=dict)  # labels of the nodes written, by natural key

    @classmethod
    def of(cls, conn: Any, item: ObservationInput, kinds: NamespaceKinds, now: datetime) -> _Context:
        source_path = str(item.provenance.get("uri", "")) if isinstance(item.provenance, dict) else ""
        key = f"episode:{item.observation_id}"
        return cls(conn, item, kinds, now, key, cls.title_of(item), source_path, Projection(episode_key=key))

    @staticmethod
    def title_of(item: ObservationInput) -> str:
        """The episode's title: ``"<kind> <subject key>"``."""
        subject_key = f"{item.subject['type']}:{item.subject['id']}" if item.subject else ""
        return f"{item.kind} {subject_key}".strip()


class ObservationProjector:
    """Writes the projection of one observation (see the module doc).

    Args:
        graph: graph store (nodes).
        engine: the fact engine (facts and MENTIONS links).
        chunks: chunk store (episode text and text fragments).
        kinds: the domain packs of each namespace.
        settings: reads ``pii_protection`` (CB_PII_PROTECTION) and ``chunk_max_chars``.
    """

    def __init__(
        self,
        graph: GraphStore,
        engine: FactEngine,
        chunks: ChunkStore,
        kinds: KindValidator,
        settings: Settings,
    ) -> None:
        self.graph = graph
        self.engine = engine
        self.chunks = chunks
        self.kinds = kinds
        self.settings = settings
        self.mentions = MentionLinker(graph)

    def project(
        self,
        conn: Any,
        items: list[ObservationInput],
        pieces: dict[str, list[tuple[str, str]]],
        embeddings: dict[str, np.ndarray],
        now: datetime,
        episode_vectors: dict[str, np.ndarray] | None = None,
    ) -> list[Projection]:
        """Writes the episodes, entities, facts, text fragments and identifier links of ``items`` (new
        observations, no observation_id twice), set-based where it can be: one node upsert and one chunk
        write for every episode of the batch, one fact engine call (`FactEngine.record`) for the
        ACTOR/SUBJECT facts and the asserted facts of every item. Projections in the order of ``items``.

        Args:
            pieces: observation_id -> the episode's chunks as ``(heading, text)`` (`episode_chunks` of
                the item, computed by the caller before the transaction: pure, and the costliest part
                of a long episode's projection).
            embeddings: observation_id -> one vector per text assertion (``item.texts``), shape
                (len(texts), dimension); absent for an item without text assertions.
            episode_vectors: observation_id -> one vector per episode chunk (of ``pieces``) when
                embedded inline; None leaves the chunks pending for the background embedder.
        """
        contexts = [
            _Context.of(conn, item, self.kinds.for_namespace(item.namespace, conn), now) for item in items
        ]
        self._episodes(conn, contexts, pieces, episode_vectors, now)
        self._entities(conn, contexts, now)
        self._facts(conn, contexts, now)
        for context in contexts:
            self._text_fragments(context, embeddings.get(context.item.observation_id))
            self._identifier_links(context)
        return [context.projection for context in contexts]

    def _episodes(
        self,
        conn: Any,
        contexts: list[_Context],
        pieces: dict[str, list[tuple[str, str]]],
        vectors: dict[str, np.ndarray] | None,
        now: datetime,
    ) -> None:
        """The episode nodes (provenance, participants, time, personal data marks) and their chunks
        (``pieces``, see `project`): with ``vectors`` embedded, else pending. One node upsert, one chunk
        write."""
        nodes: list[NodeWrite] = []
        chunk_writes: list[tuple[NodeRef, list[ChunkWrite]]] = []
        for context in contexts:
            item = context.item
            marks = PiiMarks.of(
                pii=item.pii,
                categories=item.pii_categories,
                values=(item.content, item.data, item.assertions, item.provenance, item.actor, item.subject),
                protection=self.settings.pii_protection,
            )
            nodes.append(
                NodeWrite(
                    namespace=item.namespace,
                    natural_key=context.key,
                    node_type="episode",
                    title=context.title,
                    source_path=context.source_path,
                    source_id=item.observation_id,
                    props={
                        "observation_id": item.observation_id,
                        "kind": item.kind,
                        "occurred_at": canonical_instant(item.occurred_at),
                        "actor": item.actor,
                        "subject": item.subject,
                        "scopes": item.scopes,
                        "provenance": {"observation_id": item.observation_id, **item.provenance},
                        **(marks.as_props() if marks.marked else {}),
                    },
                    asserted_at=item.occurred_at,
                )
            )
            own_pieces = pieces[item.observation_id]
            if not own_pieces:
                continue
            meta = {"observation_id": item.observation_id, "scopes": item.scopes}
            if marks.marked:
                meta.update(marks.as_props())
            own = None if vectors is None else vectors[item.observation_id]
            chunk_writes.append(
                (
                    NodeRef(item.namespace, context.key, "episode", context.title, context.source_path),
                    [
                        ChunkWrite(
                            order,
                            heading,
                            text,
                            None if own is None else own[order],
                            meta,
                            embedding_pending=own is None,
                        )
                        for order, (heading, text) in enumerate(own_pieces)
                    ],
                )
            )
        self.graph.upsert_nodes(conn, nodes, now=now)
        self.chunks.replace_chunks_of_nodes(conn, chunk_writes)

    def episode_chunks(self, item: ObservationInput) -> list[tuple[str, str]]:
        """The episode's chunks as ``(heading, text)`` (`ingest_service.observations.episode_text.episode_pieces`)."""
        return episode_pieces(
            kind=item.kind,
            occurred_at=item.occurred_at,
            actor=item.actor,
            subject=item.subject,
            content=item.content,
            data=item.data,
            limit=self.settings.chunk_max_chars,
        )

    @staticmethod
    def episode_inputs(item: ObservationInput, pieces: list[tuple[str, str]]) -> list[str]:
        """The texts embedded for the episode's chunks ``pieces`` (`episode_chunks`): `embedding_input`
        of each."""
        title = _Context.title_of(item)
        return [embedding_input(title, heading, text) for heading, text in pieces]

    def _entities(self, conn: Any, contexts: list[_Context], now: datetime) -> None:
        """Upserts the asserted entities of every item (properties merged, an existing title kept);
        records their labels in ``context.known``. An entity whose node is hidden from the caller is not
        overwritten (it reads "not found"); one a domain pack refuses is skipped. A new node
        (or a placeholder) carries the observation's restricting scopes; a node more readers see than
        the observation is left unchanged (`entity_props`).

        Set-based in rounds: round r upserts the r-th assertion of each key in the batch (so one key's
        assertions still apply in item order) with one `GraphStore.upsert_nodes` call."""
        access = WriteAccess.of_caller()
        rounds: list[list[tuple[_Context, Any, str, str]]] = []
        seen: dict[tuple[str, str], int] = {}
        for context in contexts:
            item, rejected = context.item, context.projection.rejected
            hidden = access.hidden_nodes(conn, self.graph, item.namespace, [e.key for e in item.entities])
            for entity in item.entities:
                natural_key, node_type = entity.key, entity.node_type
                if natural_key in hidden:
                    rejected.append((f"assertions[{entity.index}].entity", f"node {natural_key!r} not found"))
                    continue
                if context.kinds.active:
                    natural_key, node_type, violations = context.kinds.check_entity(
                        entity.key, entity.node_type, entity.attributes, f"assertions[{entity.index}].entity"
                    )
                    if violations:
                        rejected.extend((violation.field, violation.description) for violation in violations)
                        continue
                position = seen.get((item.namespace, natural_key), 0)
                seen[(item.namespace, natural_key)] = position + 1
                if position == len(rounds):
                    rounds.append([])
                rounds[position].append((context, entity, natural_key, node_type))
        for round_ in rounds:
            # a public write needs no node state
            restricted_keys: dict[str, list[str]] = {}
            for context, _, natural_key, _ in round_:
                if restricting_scopes(context.item.scopes):
                    restricted_keys.setdefault(context.item.namespace, []).append(natural_key)
            stored = {
                (namespace, key): state
                for namespace, keys in restricted_keys.items()
                for key, state in self.graph.registry_scopes(conn, namespace, keys).items()
            }
            writes: list[tuple[_Context, NodeWrite]] = []
            for context, entity, natural_key, node_type in round_:
                item = context.item
                props = entity_props(
                    entity.attributes,
                    restricting_scopes(item.scopes),
                    stored.get((item.namespace, natural_key)),
                )
                if props is None:  # more readers see the node than the observation
                    continue
                writes.append(
                    (
                        context,
                        NodeWrite(
                            namespace=item.namespace,
                            natural_key=natural_key,
                            node_type=node_type,
                            title=entity.title,
                            source_path=context.source_path,
                            source_id=item.observation_id,
                            props=props,
                            asserted_at=item.occurred_at,
                        ),
                    )
                )
            results = self.graph.upsert_nodes(
                conn, [node for _, node in writes], now=now, overwrite=False, merge_props=True
            )
            for (context, node), result in zip(writes, results, strict=True):
                context.known[node.natural_key] = result.label
                context.projection.entities_upserted += 1

    def _facts(self, conn: Any, contexts: list[_Context], now: datetime) -> None:
        """The ACTOR and SUBJECT facts of every episode (`ingest_service.observations.episode_text.participant_facts`)
        and the asserted facts of every item, in one fact engine call, each proven by its observation; an
        asserted fact without scopes of its own carries the observation's, one with scopes adds the
        observation's restricting scopes to them. Pack violations and engine rejections
        skip the fact (a participant fact is never rejected for a valid item)."""
        writes: list[tuple[_Context, bool, FactInput]] = []  # (context, asserted by the item, fact)
        for context in contexts:
            item = context.item
            for fact in participant_facts(
                namespace=item.namespace,
                episode_key=context.key,
                observation_id=item.observation_id,
                occurred_at=item.occurred_at,
                actor=item.actor,
                subject=item.subject,
                scopes=item.scopes,
                source_path=context.source_path,
                kinds=context.kinds,
                pii_protection=self.settings.pii_protection,
            ):
                writes.append((context, False, fact))
            for fact in item.facts:
                fact, violations = resolve_fact_kinds(context.kinds, fact)
                if violations:
                    context.projection.rejected.extend((v.field, v.description) for v in violations)
                    continue
                write = dataclasses.replace(
                    fact,
                    namespace=item.namespace,
                    scopes=inherited_scopes(fact.scopes, item.scopes),
                    observation_id=item.observation_id,
                    source_path=context.source_path,
                )
                writes.append((context, True, write))
        outcomes = self.engine.record(conn, [fact for _, _, fact in writes], now=now)
        for (context, asserted, _), outcome in zip(writes, outcomes, strict=True):
            if not asserted:
                continue
            if isinstance(outcome, AssertionRejected):
                context.projection.rejected.append((outcome.field, outcome.reason))
            elif outcome.created:
                context.projection.facts_created += 1
            else:
                context.projection.facts_strengthened += 1

    def _text_fragments(self, context: _Context, embeddings: np.ndarray | None) -> None:
        """One ``text:<observation_id>/<assertion index>`` node per text assertion, with one chunk holding
        the text and its vector (``embeddings[i]`` for the i-th text assertion)."""
        conn, item, now = context.conn, context.item, context.now
        for position, text in enumerate(item.texts):
            node_key = f"text:{item.observation_id}/{text.index}"
            title = text.title or context.title
            fragment_marks = PiiMarks.of(
                pii=item.pii,
                categories=item.pii_categories,
                values=(text.text, title, text.heading),
                protection=self.settings.pii_protection,
            )
            fragment_meta: dict[str, Any] = {"observation_id": item.observation_id, "scopes": item.scopes}
            if fragment_marks.marked:
                fragment_meta.update(fragment_marks.as_props())
            self.graph.upsert_node(
                conn,
                NodeWrite(
                    namespace=item.namespace,
                    natural_key=node_key,
                    node_type="text",
                    title=title,
                    source_path=context.source_path,
                    source_id=item.observation_id,
                    props=dict(fragment_meta),
                ),
                now=now,
            )
            assert embeddings is not None
            self.chunks.replace_chunks(
                conn,
                NodeRef(item.namespace, node_key, "text", title, context.source_path),
                [ChunkWrite(0, text.heading, text.text, embeddings[position], fragment_meta)],
            )
            context.projection.text_fragments += 1

    def _identifier_links(self, context: _Context) -> None:
        """Identifiers of pack kinds in the content and text fragments link the episode to existing nodes
        (MENTIONS facts valid from the observation's occurred_at; 
        `ingest_service.facts.mentions`)."""
        conn, item, now = context.conn, context.item, context.now
        self.mentions.link(
            conn,
            context.kinds,
            MentionSource(
                namespace=item.namespace,
                natural_key=context.key,
                texts=[item.content, *(text.text for text in item.texts)],
                valid_from=item.occurred_at,
                observation_id=item.observation_id,
                scopes=item.scopes,
                source_path=context.source_path,
            ),
            now=now,
        )


def entity_props(
    attributes: dict[str, Any], scopes: list[str], stored: tuple[bool, list[str]] | None
) -> dict[str, Any] | None:
    """The ``props`` of an entity upsert by a write with restricting ``scopes`` (
    `common.domain.scope_inheritance`), given the node's registry state ``(placeholder, scopes)`` or None
    when it does not exist. None: leave the node unchanged (more readers see it than the write).

    A new node or a placeholder (its properties are replaced) carries ``scopes``; an existing node keeps
    its own (the upsert merges ``props``, so ``scopes`` is left out)."""
    if stored is not None and reaches_beyond(stored[1], scopes):
        return None
    props: dict[str, Any] = {"attributes": attributes}
    if scopes and (stored is None or stored[0]):
        props["scopes"] = list(scopes)
    return props

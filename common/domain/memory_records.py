"""Memory records as plain values, and the enrichment hook (docs/how-to/memory-records.md).

`MemoryRecord` is what both services hand to their transports: the row of the memories table
(`common.storage.memories.store`) joined with the props of the memory's node. `MemoryEnrichment` is the
API the asynchronous enrichment worker uses, so it never touches the tables itself:

* `MemoryEnrichment.due` lists ``(namespace, memory_id, version)`` of memories whose current version is
  not enriched yet: the add/update transaction leaves every new version due (``enriched_version <
  version``), so a job lost between commit and enqueue is found again;
* `MemoryEnrichment.read` returns the memory's text and scope for one version (None when that version is
  no longer current or the memory is gone: drop the job);
* `MemoryEnrichment.write` stores `EnrichmentFields` for one version in one transaction (with the job's
  entity links), only if that version is still current and not enriched yet (idempotent per version: a retried or stale job changes
  nothing and returns False). Entity nodes derived from a memory must carry its ``scopes`` (the owner
  scope) so other users never see them (`common.domain.scope_inheritance`).

A job is called with ``{"namespace": ..., "memory_id": ..., "version": ...}`` (its locks:
`ingest_service.memories.enrichment.queue`); `MemoryWriter` (ingest_service) calls its ``on_due`` hook with
those triples after each commit.
"""

from __future__ import annotations

from collections.abc import Callable
from collections.abc import Mapping
from collections.abc import Sequence
from dataclasses import dataclass
from dataclasses import field
from datetime import UTC
from datetime import datetime
from typing import Any

from common.domain.memory_scope import MemoryScope
from common.kernel.errors import InvalidArgument
from common.kernel.memory_names import owner_scope
from common.storage.database import Database
from common.storage.graph.store import GraphStore
from common.storage.graph.store import NodeWrite
from common.storage.memories.lifecycle import MemoryLifecycleStore
from common.storage.memories.store import MEMORY_LABEL
from common.storage.memories.store import MEMORY_NODE_TYPE
from common.storage.memories.store import MemoryQuery
from common.storage.memories.store import StoredMemory

ENRICHMENT_FIELDS = ("key_points", "insights", "entities", "topics")
"""Node props the enrichment fills (lists of strings)."""

MEMORY_TYPES = ("fact", "event", "decision", "insight", "narrative", "analysis", "reference")
"""docs/how-to/memory-records.md memory types (stored lower case; "" = not known yet)."""


@dataclass(frozen=True)
class MemoryRecord:
    """One memory (every field of `memory.v1.Memory`; instants are aware UTC datetimes)."""

    memory_id: str
    scope: Mapping[str, str]
    text: str
    summary: str
    source: str
    event_type: str
    tags: tuple[str, ...]
    importance: float
    quality_score: float | None
    tier: str
    metadata: Mapping[str, Any]
    parent_id: str
    is_summary: bool
    lossless: bool
    summarized_ids: tuple[str, ...]
    summary_id: str
    hidden: bool
    expires_at: datetime | None
    expired: bool
    created_at: datetime
    updated_at: datetime
    last_recalled_at: datetime | None
    recall_count: int
    version: int
    enriched_version: int
    key_points: tuple[str, ...]
    insights: tuple[str, ...]
    entities: tuple[str, ...]
    topics: tuple[str, ...]
    memory_type: str
    idempotency_key: str
    provenance: Mapping[str, Any]


def ensure_memory_label(database: Database, graph: GraphStore) -> None:
    """Creates the schema (first contact) and the ``memory`` vertex label before their first use; cached
    per process (`AgeGraph.ensure_label`), so cheap on every call."""
    if (database.settings.database_url, MEMORY_LABEL) in _READY:
        return
    with database.connection():
        pass
    graph.ensure_label(MEMORY_LABEL, "vertex")
    _READY.add((database.settings.database_url, MEMORY_LABEL))


_READY: set[tuple[str, str]] = set()


def _strings(value: Any) -> tuple[str, ...]:
    return tuple(str(v) for v in value) if isinstance(value, list) else ()


def record_of(stored: StoredMemory, now: datetime) -> MemoryRecord:
    """The record of a stored row + props; ``expired`` judged at ``now``."""
    row, props = stored.row, stored.props
    expires_at = row["expires_at"]
    return MemoryRecord(
        memory_id=row["memory_id"],
        scope={
            "organization_id": row["organization_id"],
            "environment": row["environment"],
            "project_id": row["project_id"],
            "user_id": row["user_id"],
        },
        text=str(props.get("text", "")),
        summary=str(props.get("summary", "")),
        source=row["source"],
        event_type=row["event_type"],
        tags=tuple(row["tags"] or ()),
        importance=float(row["importance"]),
        quality_score=None if row["quality_score"] is None else float(row["quality_score"]),
        tier=row["tier"],
        metadata=dict(props.get("metadata") or {}),
        parent_id=row["parent_id"],
        is_summary=bool(row["is_summary"]),
        lossless=bool(row["lossless"]),
        summarized_ids=_strings(props.get("summarized_ids")),
        summary_id=row["summary_id"],
        hidden=bool(row["hidden"]),
        expires_at=expires_at,
        expired=expires_at is not None and expires_at <= now,
        created_at=row["created_at"],
        updated_at=row["updated_at"],
        last_recalled_at=row["last_recalled_at"],
        recall_count=int(row["recall_count"]),
        version=int(row["version"]),
        enriched_version=int(row["enriched_version"]),
        key_points=_strings(props.get("key_points")),
        insights=_strings(props.get("insights")),
        entities=_strings(props.get("entities")),
        topics=_strings(props.get("topics")),
        memory_type=row["memory_type"],
        idempotency_key=row["idempotency_key"],
        provenance=dict(props.get("provenance") or {}),
    )


def memory_props(
    *,
    text: str,
    summary: str,
    metadata: Mapping[str, Any],
    provenance: Mapping[str, Any],
    scope_keys: Mapping[str, str],
    summarized_ids: Sequence[str] = (),
    enrichment: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """The props of a memory node: text, summary, metadata, provenance, the scope keys, the owner's
    visibility ``scopes``, the summary lineage and the enrichment fields (empty until enriched)."""
    props: dict[str, Any] = {
        "text": text,
        "summary": summary,
        "metadata": dict(metadata),
        "provenance": dict(provenance),
        "memory_scope": dict(scope_keys),
        "scopes": [
            owner_scope(scope_keys["organization_id"], scope_keys["environment"], scope_keys["user_id"])
        ],
        "summarized_ids": list(summarized_ids),
    }
    for name in ENRICHMENT_FIELDS:
        props[name] = list((enrichment or {}).get(name, []))
    return props


def memory_node(namespace: str, memory_id: str, props: dict[str, Any], source_path: str = "") -> NodeWrite:
    """The node of a memory (type ``memory``; title: the first 80 characters of its text)."""
    text = str(props.get("text", ""))
    return NodeWrite(
        namespace=namespace,
        natural_key=memory_id,
        node_type=MEMORY_NODE_TYPE,
        title=text[:80] or memory_id,
        source_path=source_path or f"memory:{memory_id}",
        origin="agent",
        props=props,
    )


@dataclass(frozen=True)
class EnrichmentFields:
    """What one enrichment job found for one version (docs/how-to/memory-records.md).

    Attributes:
        key_points: concrete, atomic facts extracted from the text.
        insights: higher-order observations.
        entities: named entities as written in the text ("Customer 8821").
        topics: labels for filtering and clustering.
        memory_type: one of `MEMORY_TYPES`, or None to keep the current value.
        quality_score: in [0, 1], or None to keep the current value.
        extra: further props to store on the node (e.g. the enricher's name and model), merged.
    """

    key_points: Sequence[str] = ()
    insights: Sequence[str] = ()
    entities: Sequence[str] = ()
    topics: Sequence[str] = ()
    memory_type: str | None = None
    quality_score: float | None = None
    extra: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class EnrichmentInput:
    """What a job enriches: one version of one memory."""

    namespace: str
    memory_id: str
    version: int
    text: str
    summary: str
    scopes: tuple[str, ...]
    memory_type: str
    scope_keys: Mapping[str, str]


class MemoryEnrichment:
    """The enrichment worker's access to memories (see the module doc).

    Args:
        database: the process's database.
    """

    def __init__(self, database: Database) -> None:
        self.database = database
        self.lifecycle = MemoryLifecycleStore(database.settings)
        self.graph = GraphStore(database)

    def due(self, *, limit: int = 100, updated_before: datetime | None = None) -> list[tuple[str, str, int]]:
        """``(namespace, memory_id, version)`` of memories whose current version awaits enrichment."""
        with self.database.connection() as conn:
            return self.lifecycle.due_enrichments(conn, limit=limit, updated_before=updated_before)

    def read(self, namespace: str, memory_id: str, version: int) -> EnrichmentInput | None:
        """The memory's text and scopes at ``version``; None when gone, changed since, or already enriched."""
        with self.database.connection() as conn:
            state = self.lifecycle.version_state(conn, namespace, memory_id)
            if state is None or state[0] != version or state[1] >= version:
                return None
            node = self.graph.get_node(conn, namespace, memory_id)
        props = dict((node or {}).get("props") or {})
        return EnrichmentInput(
            namespace=namespace,
            memory_id=memory_id,
            version=version,
            text=str(props.get("text", "")),
            summary=str(props.get("summary", "")),
            scopes=tuple(str(s) for s in props.get("scopes") or ()),
            memory_type=state[2],
            scope_keys=dict(props.get("memory_scope") or {}),
        )

    def write(
        self,
        namespace: str,
        memory_id: str,
        version: int,
        fields: EnrichmentFields,
        *,
        also: Callable[[Any], Any] | None = None,
    ) -> bool:
        """Stores ``fields`` for ``version`` in one transaction (node props + row); False, changing nothing,
        when ``version`` is not the current one or is enriched already.

        A caller-set memory_type is kept: ``fields.memory_type`` only fills an empty one. ``also(conn)``,
        when given, runs in the same transaction once the version is found current (the row locked), before
        the fields are stored: the job's entity links, written with the fields or not at all.

        Raises:
            ValueError: ``memory_type`` outside `MEMORY_TYPES` or ``quality_score`` outside [0, 1].
            Unavailable: the database cannot be reached (nothing written; the job may be retried).
        """
        if fields.memory_type is not None and fields.memory_type not in MEMORY_TYPES:
            raise ValueError(f"memory_type {fields.memory_type!r} is not one of {MEMORY_TYPES}")
        if fields.quality_score is not None and not 0.0 <= fields.quality_score <= 1.0:
            raise ValueError("quality_score must be in [0, 1]")
        now = datetime.now(UTC)

        def work(conn: Any) -> bool:
            state = self.lifecycle.version_state(conn, namespace, memory_id, lock=True)
            if state is None or state[0] != version or state[1] >= version:
                return False
            current_type = state[2]
            if also is not None:
                also(conn)
            node = self.graph.get_node(conn, namespace, memory_id)
            if node is None:
                return False
            props = dict(node.get("props") or {})
            props.update(fields.extra)
            for name in ENRICHMENT_FIELDS:
                props[name] = [str(v) for v in getattr(fields, name)]
            if fields.quality_score is not None:
                props["quality_score"] = fields.quality_score
            self.graph.upsert_node(
                conn,
                memory_node(namespace, memory_id, props, str(node.get("source_path") or "")),
                now=now,
                overwrite=True,
            )
            return self.lifecycle.mark_enriched(
                conn,
                namespace,
                memory_id,
                version,
                memory_type=None if current_type else fields.memory_type,
                quality_score=fields.quality_score,
                now=now,
            )

        return self.database.run_transaction(work)


def memory_query(
    scope: MemoryScope,
    *,
    tags: Sequence[str] = (),
    source: str = "",
    event_type: str = "",
    tiers: Sequence[str] = (),
    memory_types: Sequence[str] = (),
    created_from: datetime | None = None,
    created_to: datetime | None = None,
    min_importance: float = 0.0,
    is_summary: bool | None = None,
    include_expired: bool = False,
    include_hidden: bool = False,
) -> MemoryQuery:
    """The `MemoryQuery` of a scope and a MemoryFilter (judged now).

    Raises:
        InvalidArgument: ``filter.min_importance`` outside [0, 1].
    """
    if not 0.0 <= min_importance <= 1.0:
        raise InvalidArgument.single("filter.min_importance", "must be in [0, 1]")
    return MemoryQuery(
        namespace=scope.namespace,
        user_id=scope.user_id,
        now=datetime.now(UTC),
        tags=tuple(tags),
        source=source,
        event_type=event_type,
        tiers=tuple(tiers),
        memory_types=tuple(memory_types),
        created_from=created_from,
        created_to=created_to,
        min_importance=min_importance,
        is_summary=is_summary,
        include_expired=include_expired,
        include_hidden=include_hidden,
    )


__all__ = [
    "ENRICHMENT_FIELDS",
    "MEMORY_TYPES",
    "EnrichmentFields",
    "EnrichmentInput",
    "MemoryEnrichment",
    "MemoryRecord",
    "memory_node",
    "memory_props",
    "memory_query",
    "record_of",
]

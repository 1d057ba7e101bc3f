"""AddMemories, UpdateMemory, DeleteMemory (docs/how-to/memory-records.md). Transport free.

A memory is written as the knowledge model's parts, in ONE transaction per call:

* the node ``(namespace, memory_id)`` of type ``memory`` (`common.domain.memory_records.memory_node`):
  its props hold text, summary, metadata, provenance, the scope keys, the owner's visibility scope and
  the enrichment fields;
* its text as chunk 0 of the chunks table (embedded before the transaction through the service's
  embedding provider; meta: the owner scope, tags and source), so Search and CompileContext find it for
  its owner only;
* its row of the memories table (`common.storage.memories.store`): scope, importance, tier, expiry,
  lineage, and the enrichment state. A new row (or a changed version) has ``enriched_version <
  version``: it is due for enrichment from its commit on; `MemoryWriter.on_due` (the enrichment
  worker's enqueue) is then called with ``(namespace, memory_id, version)`` triples.

The texts are embedded in slices while the transaction runs on a writer thread (`EMBEDDING_SLICE`): the
rows and nodes are written during the first slice's embedding, each slice's chunks (one multi-row
upsert: their HNSW insertions are most of the write) during the next one's.

Ids are stable (`common.kernel.memory_names.memory_id`): a retry of an item (same idempotency key, or
same content without one) finds its row and writes nothing (status ``duplicate``). The batch takes the
advisory locks of its keys in one order (`common.storage.key_locks`), so concurrent retries never write
a memory twice.

The per-user quota (`ingest_service.memories.quota`) is checked inside that transaction, under the
user's quota lock taken with the key locks: the new items are admitted in request order while the
user's live count is below the limit; the rest fail with ``error_code`` RESOURCE_EXHAUSTED and the limit and the count, and
nothing of them is written. A retry of a stored item is a duplicate before the quota is looked at.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from collections.abc import Sequence
from concurrent.futures import Future
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from dataclasses import field
from datetime import UTC
from datetime import datetime
from typing import Any

import numpy as np

from common.domain.audit import AuditTrail
from common.domain.memory_records import MemoryRecord
from common.domain.memory_records import ensure_memory_label
from common.domain.memory_records import memory_node
from common.domain.memory_records import memory_props
from common.domain.memory_records import record_of
from common.domain.memory_scope import MemoryScope
from common.domain.write_access import WriteAccess
from common.kernel.errors import InvalidArgument
from common.kernel.errors import NotFound
from common.kernel.errors import ViolationCollector
from common.kernel.memory_names import content_identity
from common.kernel.memory_names import memory_id
from common.storage.chunks.store import ChunkStore
from common.storage.chunks.store import ChunkWrite
from common.storage.chunks.store import NodeRef
from common.storage.chunks.store import embedding_input
from common.storage.database import Database
from common.storage.graph.store import GraphStore
from common.storage.memories.store import MemoryRow
from common.storage.memories.store import MemoryStore
from common.text_models.embeddings.provider import PassageEncoder
from ingest_service.documents.node_deletion import DeleteNodeInput
from ingest_service.documents.node_deletion import NodeDeleter
from ingest_service.memories.quota import MemoryQuota
from ingest_service.memories.validation import DEFAULT_IMPORTANCE
from ingest_service.memories.validation import MAX_BATCH
from ingest_service.memories.validation import UPDATABLE_PATHS
from ingest_service.memories.validation import NewMemoryInput
from ingest_service.memories.validation import check_new_memory
from ingest_service.validation.fields import FieldChecker
from ingest_service.validation.limits import check_reason

log = logging.getLogger(__name__)

DueHook = Callable[[Sequence[tuple[str, str, int]]], None]
"""Called after a commit with the ``(namespace, memory_id, version)`` triples now due for enrichment."""


QUOTA_EXHAUSTED = "RESOURCE_EXHAUSTED"
"""``error_code`` of an item refused by the per-user quota (the google.rpc.Code name)."""
INVALID_INPUT = "INVALID_ARGUMENT"
"""``error_code`` of an item with field violations."""
EMBEDDING_SLICE = 25
"""Texts per embedding step of AddMemories: a slice's chunks are written while the next is embedded."""


@dataclass(frozen=True)
class AddResult:
    """One item of AddMemories: its id ("" when failed), created, status, field violations, and for a
    failed item its error code (`INVALID_INPUT` or `QUOTA_EXHAUSTED`); a quota refusal carries the quota
    (``quota_limit``) and the user's live memories when refused (``quota_count``)."""

    memory_id: str
    created: bool
    status: str
    field_violations: tuple[str, ...] = ()
    error_code: str = ""
    quota_limit: int = 0
    quota_count: int = 0


@dataclass
class _Prepared:
    index: int
    item: NewMemoryInput
    memory_id: str
    props: dict[str, Any] = field(default_factory=dict)


def chunk_of(
    scope: MemoryScope, memory: str, text: str, tags: Sequence[str], source: str
) -> tuple[NodeRef, dict[str, Any]]:
    """The chunk's owner and meta of a memory (recall-time payload of docs/how-to/memory-records.md)."""
    node = NodeRef(
        namespace=scope.namespace,
        node_key=memory,
        node_type="memory",
        title="",
        source_path=f"memory:{memory}",
    )
    meta = {"scopes": [scope.owner_scope], "tags": list(tags), "source": source}
    return node, meta


def owned_row(scope: MemoryScope, memory: str, **columns: Any) -> MemoryRow:
    """The new memories-table row of ``memory`` owned by ``scope`` (its namespace, its four keys and the
    owner's scope), with the other ``columns`` of `MemoryRow`."""
    return MemoryRow(
        namespace=scope.namespace,
        memory_id=memory,
        organization_id=scope.organization_id,
        environment=scope.environment,
        project_id=scope.project_id,
        user_id=scope.user_id,
        user_scope=scope.owner_scope,
        **columns,
    )


class MemoryWriter:
    """Writes memory records (see the module doc).

    Args:
        database: the process's database.
        encoder: the embedding provider.
        on_due: optional enrichment enqueue hook (`DueHook`), called after each commit; its failure is
            logged, never raised (the due rows stay due and are found again).
    """

    def __init__(self, database: Database, encoder: PassageEncoder, *, on_due: DueHook | None = None) -> None:
        self.database = database
        self.encoder = encoder
        self.on_due = on_due
        self.store = MemoryStore(database.settings)
        self.graph = GraphStore(database)
        self.chunks = ChunkStore(database.settings)
        self.deleter = NodeDeleter(database)
        self.quota = MemoryQuota(database.settings)
        self._writes = ThreadPoolExecutor(
            database.settings.pool_max_size, thread_name_prefix="memory-writes"
        )  # AddMemories' transactions, beside their embedding (`_embed_and_insert`)

    # -- AddMemories ---------------------------------------------------------------------------------

    def add(self, scope: MemoryScope, items: Sequence[NewMemoryInput]) -> list[AddResult]:
        """Adds a batch; one result per item, in order (see the module doc).

        Raises:
            InvalidArgument: an empty batch or more than 500 items (``memories``).
            Unavailable: the database cannot be reached (nothing written).
        """
        if not items or len(items) > MAX_BATCH:
            raise InvalidArgument.single("memories", f"1..{MAX_BATCH} memories")
        now = datetime.now(UTC)
        results: dict[int, AddResult] = {}
        prepared: list[_Prepared] = []
        seen: set[str] = set()
        for index, item in enumerate(items):
            check = FieldChecker(f"memories[{index}]")
            check_new_memory(item, check, now)
            if check.violations:
                violations = tuple(str(v) for v in check.violations)
                results[index] = AddResult("", False, "failed", violations, error_code=INVALID_INPUT)
                continue
            identity = item.idempotency_key or content_identity(
                item.text, item.source, item.event_type, item.unique_tags(), item.metadata
            )
            key = memory_id(scope.namespace, scope.user_id, identity)
            if key in seen:  # the same memory twice in one batch: the second is a retry of the first
                results[index] = AddResult(key, False, "duplicate")
                continue
            seen.add(key)
            prepared.append(_Prepared(index, item, key))
        if prepared:
            ensure_memory_label(self.database, self.graph)
            with self.database.connection() as conn:
                existing = self.store.existing_ids(conn, scope.namespace, [p.memory_id for p in prepared])
            fresh = [p for p in prepared if p.memory_id not in existing]
            for p in prepared:
                if p.memory_id in existing:
                    results[p.index] = AddResult(p.memory_id, False, "duplicate")
            inserted, refused = self._embed_and_insert(scope, fresh, now)
            for p in fresh:
                created = p.memory_id in inserted
                if p.memory_id in refused:
                    results[p.index] = AddResult(
                        "",
                        False,
                        "failed",
                        error_code=QUOTA_EXHAUSTED,
                        quota_limit=self.quota.limit,
                        quota_count=refused[p.memory_id],
                    )
                else:
                    results[p.index] = AddResult(p.memory_id, created, "created" if created else "duplicate")
            self.notify([(scope.namespace, key, 1) for key in sorted(inserted)])
        return [results[i] for i in range(len(items))]

    def _embed_and_insert(
        self, scope: MemoryScope, fresh: Sequence[_Prepared], now: datetime
    ) -> tuple[set[str], dict[str, int]]:
        """Embeds ``fresh`` in slices of `EMBEDDING_SLICE` on this thread while the batch's transaction
        runs on a writer thread (`_insert`): its rows and nodes are written during the first slice's
        embedding, and each slice's chunks (their HNSW insertions, the largest part of the write) while
        the next slice is embedded. One transaction as before; an embedding error rolls it back and is
        raised, a failed transaction stops the embedding."""
        parts = [list(fresh[i : i + EMBEDDING_SLICE]) for i in range(0, len(fresh), EMBEDDING_SLICE)]
        vectors: list[Future[Any]] = [Future() for _ in parts]
        writing = self._writes.submit(
            self.database.run_transaction,
            lambda conn: self._insert(conn, scope, fresh, list(zip(parts, vectors, strict=True)), now),
        )
        try:
            for part, future in zip(parts, vectors, strict=True):
                if writing.done():  # the transaction failed: its error is raised below
                    break
                try:
                    future.set_result(
                        self.encoder.encode_passages([embedding_input("", "", p.item.text) for p in part])
                    )
                except Exception as error:
                    future.set_exception(error)
                    break
        finally:
            for future in vectors:
                future.cancel()  # a slice never embedded: the transaction stops there (no-op on the others)
        return writing.result()

    def _insert(
        self,
        conn: Any,
        scope: MemoryScope,
        fresh: Sequence[_Prepared],
        slices: Sequence[tuple[Sequence[_Prepared], Future[Any]]],
        now: datetime,
    ) -> tuple[set[str], dict[str, int]]:
        self.quota.lock(conn, scope, [(scope.namespace, p.memory_id) for p in fresh])
        refused = self.quota.refused(conn, scope, [p.memory_id for p in fresh], now)
        admitted = [p for p in fresh if p.memory_id not in refused]
        rows = [
            owned_row(
                scope,
                p.memory_id,
                idempotency_key=p.item.idempotency_key,
                source=p.item.source,
                event_type=p.item.event_type,
                tags=p.item.unique_tags(),
                importance=DEFAULT_IMPORTANCE if p.item.importance is None else p.item.importance,
                memory_type=p.item.memory_type,
                tier=p.item.tier or "hot",
                expires_at=p.item.expiry(now),
                created_at=now,
            )
            for p in admitted
        ]
        inserted = self.store.insert_rows(conn, rows)
        chosen = [p for p in fresh if p.memory_id in inserted]
        nodes = [
            memory_node(
                scope.namespace,
                p.memory_id,
                memory_props(
                    text=p.item.text,
                    summary=p.item.summary,
                    metadata=p.item.metadata,
                    provenance=p.item.provenance,
                    scope_keys=scope.as_dict(),
                ),
            )
            for p in chosen
        ]
        if nodes:
            self.graph.upsert_nodes(conn, nodes, now=now, overwrite=True)
        # One multi-row upsert per slice (the chunks' statement-level triggers run once per slice).
        for part, vectors in slices:
            writes = [
                self.chunk_write(scope, p.memory_id, p.item.text, p.item.unique_tags(), p.item.source, vector)
                for p, vector in zip(part, vectors.result(), strict=True)
                if p.memory_id in inserted
            ]
            if writes:
                self.chunks.replace_chunks_of_nodes(conn, writes)
        return inserted, refused

    @staticmethod
    def chunk_write(
        scope: MemoryScope, key: str, text: str, tags: Sequence[str], source: str, vector: Any
    ) -> tuple[NodeRef, list[ChunkWrite]]:
        """The memory's node and its one chunk (chunk 0: the text and its vector)."""
        node, meta = chunk_of(scope, key, text, tags, source)
        return node, [ChunkWrite(0, "", text, np.asarray(vector, dtype=np.float32), meta)]

    def write_chunk(
        self,
        conn: Any,
        scope: MemoryScope,
        key: str,
        text: str,
        tags: Sequence[str],
        source: str,
        vector: Any,
    ) -> None:
        node, chunks = self.chunk_write(scope, key, text, tags, source, vector)
        self.chunks.replace_chunks(conn, node, chunks, delete_beyond=True)

    # -- UpdateMemory --------------------------------------------------------------------------------

    def update(
        self, scope: MemoryScope, key: str, item: NewMemoryInput, paths: Sequence[str]
    ) -> MemoryRecord:
        """Changes the fields ``paths`` of one memory (see UpdateMemory in the contract).

        Raises:
            InvalidArgument: empty ``memory_id``, no or unknown ``update_mask`` paths, bad values
                (paths ``memory.<field>``); nothing changed.
            NotFound: no such memory in the caller's scope.
            Unavailable: the database cannot be reached (nothing changed).
        """
        now = datetime.now(UTC)
        check = FieldChecker("memory")
        if not key.strip():
            raise InvalidArgument.single("memory_id", "required")
        unknown = [p for p in paths if p not in UPDATABLE_PATHS]
        if not paths or unknown:
            raise InvalidArgument.single(
                "update_mask",
                f"list paths among {', '.join(sorted(UPDATABLE_PATHS))}"
                + (f"; unknown: {unknown}" if unknown else ""),
            )
        wanted = frozenset(paths)
        check_new_memory(item, check, now, paths=wanted)
        if check.violations:
            raise InvalidArgument(check.violations)
        vector = (
            self.encoder.encode_passages([embedding_input("", "", item.text)])[0]
            if "text" in wanted
            else None
        )

        def work(conn: Any) -> list[tuple[str, str, int]]:
            self.quota.lock(conn, scope, [(scope.namespace, key)])
            rows = self.store.lock_rows(conn, scope.namespace, scope.user_id, [key])
            if key not in rows:
                raise NotFound(f"memory {key!r} not found")
            row = rows[key]
            if "expire_time" in wanted or "ttl" in wanted:
                self.quota.check_revival(conn, scope, row, item.expiry(now), now)
            node = self.graph.get_node(conn, scope.namespace, key) or {}
            props = dict(node.get("props") or {})
            changes: dict[str, Any] = {"updated_at": now}
            semantic = False
            for name in ("text", "summary"):
                if name in wanted:
                    props[name] = getattr(item, name)
                    semantic = True
            for name in ("metadata", "provenance"):
                if name in wanted:
                    props[name] = dict(getattr(item, name))
            for name in ("source", "event_type", "memory_type"):
                if name in wanted:
                    changes[name] = getattr(item, name)
            if "tags" in wanted:
                changes["tags"] = list(item.unique_tags())
            if "importance" in wanted:
                changes["importance"] = DEFAULT_IMPORTANCE if item.importance is None else item.importance
            if "tier" in wanted:
                changes["tier"] = item.tier or "hot"
            if "expire_time" in wanted or "ttl" in wanted:
                changes["expires_at"] = item.expiry(now)
            if semantic or "tags" in wanted or "source" in wanted:
                semantic = True
            if semantic:
                changes["version"] = int(row["version"]) + 1
            self.store.update_row(conn, scope.namespace, key, changes)
            self.graph.upsert_node(conn, memory_node(scope.namespace, key, props), now=now, overwrite=True)
            if "text" in wanted or "tags" in wanted or "source" in wanted:
                text = str(props.get("text", ""))
                if vector is None:
                    stored = self.chunks.existing_embeddings(conn, scope.namespace, key)
                    current = stored.get(embedding_input("", "", text))
                else:
                    current = vector
                tags = changes.get("tags", row["tags"])
                source = changes.get("source", row["source"])
                self.write_chunk(conn, scope, key, text, tags, source, current)
            return [(scope.namespace, key, int(changes["version"]))] if semantic else []

        self.notify(self.database.run_transaction(work))
        with self.database.connection() as conn:
            stored = self.store.get(conn, scope.namespace, scope.user_id, [key])
        return record_of(stored[key], now)

    # -- DeleteMemory --------------------------------------------------------------------------------

    def delete(self, scope: MemoryScope, key: str, reason: str) -> str:
        """Deletes one memory with its node, chunk and row; audited. Returns the audit event id.

        Raises:
            InvalidArgument: empty ``memory_id`` or a reason over 500 characters.
            NotFound: no such memory in the caller's scope.
            Unavailable: the database cannot be reached (nothing deleted).
        """
        check = ViolationCollector()
        if not key.strip():
            check.add("memory_id", "required")
        check_reason(check, reason)
        check.raise_if_any()
        AuditTrail(self.database).prepare()
        return self.database.run_transaction(
            lambda conn: self.delete_in(conn, scope.namespace, scope.user_id, key, reason)
        )

    def delete_in(self, conn: Any, namespace: str, user_id: str, key: str, reason: str) -> str:
        """`delete` inside the caller's transaction (the expiry sweep deletes like this); returns the audit
        event id.

        Raises:
            NotFound: no such memory of ``user_id`` in ``namespace``.
        """
        rows = self.store.lock_rows(conn, namespace, user_id, [key])
        if key not in rows:
            raise NotFound(f"memory {key!r} not found")
        if rows[key]["is_summary"]:
            self.store.release_summary(conn, namespace, key, datetime.now(UTC))
        result = self.deleter.delete_in(
            conn,
            DeleteNodeInput(namespace=namespace, natural_key=key, reason=reason or "memory deleted"),
            access=WriteAccess.of_caller(),
        )
        self.store.delete_row(conn, namespace, key)
        return result.audit_event_id

    def notify(self, due: list[tuple[str, str, int]]) -> None:
        if not due or self.on_due is None:
            return
        try:
            self.on_due(due)
        except Exception:  # the rows stay due; the worker's sweep finds them again
            log.exception("enrichment enqueue failed for %d memories (they stay due)", len(due))


__all__ = ["INVALID_INPUT", "QUOTA_EXHAUSTED", "AddResult", "DueHook", "MemoryWriter", "chunk_of", "owned_row"]

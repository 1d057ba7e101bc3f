"""DocumentService.DeleteNode: a node and everything of it, audited (docs/explanation/knowledge-model.md;
docs/explanation/architecture.md). Transport free.

What goes, in ONE transaction (retried as a whole on deadlock):

* the node's chunks (so Search and CompileContext's chunk candidates no longer find it);
* every fact whose subject or object is the node, history included: rows of ``facts`` and their edges
  (`FactEngine.delete_touching`);
* the vertex in its AGE label table, every edge touching it (LINKS_TO in and out, IN_TRACE, domain
  relations) and its ``graph_nodes`` row (so GetSource is NOT_FOUND and no traversal reaches it);
* the node's entity item and the fact items naming it in every snapshot journal of the namespace, so
  a source that still states the node creates it again on its next Reconcile;
* and one audit event (action ``"delete"``) with a snapshot of what was deleted, linked to the trace
  (`common.domain.audit.AuditTrail.record_in`): the removal and its record commit or roll back together.

Facts: removed, not closed. docs/explanation/knowledge-model.md says history is never deleted *while the
knowledge stands* ("больше не работает над X" closes an interval) and that a fact whose evidence was lost
stays in the graph for audit. A deleted node is different: it is the request to forget the entity itself. A
closed fact would still be listed by ListFacts with ``include_history`` (and its subject/object keys and the
node's title through them), and in AGE an edge cannot outlive its end vertex. So the facts go with the node;
their ids, predicates and the other ends are kept in the audit snapshot (first `SNAPSHOT_FACT_LIMIT`), which
is where docs/explanation/knowledge-model.md keeps the trail of a deletion. A fact of another subject that
``supersedes`` a removed fact keeps that id as history; it names nothing else.

What stays: observations that mentioned the node (immutable evidence; their episodes' text is theirs,
not the node's — purge or redact them to remove it), other nodes' own text, and context_traces entries
(readable through GetTrace only as long as the caller can see the item; a deleted item is left out).

Refusals: ``audit_event`` and ``pc_trace`` nodes are protected (FAILED_PRECONDITION, reason
``PROTECTED_NODE``), so the trail of a deletion cannot be erased by the same mechanism; a key that does
not exist, or whose node is hidden from the caller's scopes (`common.domain.write_access`), is NOT_FOUND.
Deleting an already deleted key is NOT_FOUND: a retry after a lost response finds the first call's
audit event with GetTrace under the same trace id.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from common.domain.audit import AuditTrail
from common.domain.audit import default_trace_id
from common.domain.write_access import WriteAccess
from common.kernel.errors import FailedPrecondition
from common.kernel.errors import NotFound
from common.kernel.errors import ViolationCollector
from common.kernel.field_checks import check_namespace
from common.kernel.identifiers import MAX_KEY_LENGTH
from common.storage.chunks.store import ChunkStore
from common.storage.database import Database
from common.storage.document_original_store import DocumentOriginalStore
from common.storage.graph.store import GraphStore
from common.storage.snapshot_store import SnapshotStore
from ingest_service.facts.engine import FactEngine
from ingest_service.validation.legal_holds import ensure_not_held
from ingest_service.validation.limits import PROTECTED_TYPES
from ingest_service.validation.limits import check_reason
from ingest_service.validation.limits import check_trace_id

log = logging.getLogger(__name__)

SNAPSHOT_FACT_LIMIT = 200  # facts listed by id in the audit snapshot


@dataclass(frozen=True)
class DeleteNodeInput:
    """A DeleteNodeRequest in domain form."""

    namespace: str
    natural_key: str
    reason: str = ""
    trace_id: str = ""


@dataclass(frozen=True)
class DeleteNodeResult:
    """What DeleteNode removed and the audit event that records it."""

    natural_key: str
    node_type: str
    chunks_deleted: int
    facts_deleted: int
    edges_deleted: int
    audit_event_id: str
    trace_id: str


def validate_delete(request: DeleteNodeInput) -> None:
    """Raises `InvalidArgument` with the field violations of a DeleteNodeRequest."""
    check = ViolationCollector()
    check_namespace(check, request.namespace)
    if not request.natural_key.strip():
        check.add("natural_key", "required")
    elif len(request.natural_key) > MAX_KEY_LENGTH or "\x00" in request.natural_key:
        check.add("natural_key", f"at most {MAX_KEY_LENGTH} characters, no NUL")
    check_reason(check, request.reason)
    check_trace_id(check, request.trace_id)
    check.raise_if_any()


class NodeDeleter:
    """Deletes nodes with everything of them (see the module doc)."""

    def __init__(self, database: Database, audit: AuditTrail | None = None) -> None:
        self.database = database
        self.graph = GraphStore(database)
        self.engine = FactEngine(self.graph)
        self.chunks = ChunkStore(database.settings)
        self.snapshots = SnapshotStore(database.settings)
        self.originals = DocumentOriginalStore(database.settings)
        self.audit = audit or AuditTrail(database)

    def delete(self, request: DeleteNodeInput, *, access: WriteAccess | None = None) -> DeleteNodeResult:
        """Deletes ``request.natural_key`` and everything of it; see the module doc.

        Args:
            access: the caller's write access (default: the RPC's caller, `WriteAccess.of_caller`).

        Raises:
            InvalidArgument: field violations (names of DeleteNodeRequest).
            NotFound: no such node in the namespace, or it is hidden from the caller.
            FailedPrecondition: the node is an audit_event or pc_trace (reason PROTECTED_NODE).
            Unavailable: the database cannot be reached (nothing was deleted).
        """
        validate_delete(request)
        access = access or WriteAccess.of_caller()
        self.audit.prepare()  # labels before the transaction (graph DDL must not wait behind it)
        result = self.database.run_transaction(lambda conn: self.delete_in(conn, request, access=access))
        log.info(
            "deleted node %s (%s) in %s: %d chunks, %d facts, %d other edges; audit %s trace %s (reason %r)",
            result.natural_key,
            result.node_type,
            request.namespace,
            result.chunks_deleted,
            result.facts_deleted,
            result.edges_deleted,
            result.audit_event_id,
            result.trace_id,
            request.reason,
        )
        return result

    def delete_in(
        self, conn: Any, request: DeleteNodeInput, *, access: WriteAccess, audited: bool = True
    ) -> DeleteNodeResult:
        """`delete` inside the caller's transaction (a vault sweep deletes each node like this); the
        caller validated ``request`` and ran `AuditTrail.prepare` before its transaction.

        Args:
            audited: False only for an erasure, whose own event records the deletion without the
                values (`ingest_service.data_protection.erasure`).

        Raises:
            NotFound, FailedPrecondition: as `delete`; FailedPrecondition (reason LEGAL_HOLD) when a
                legal hold covers the namespace or the key.
        """
        trace_id = request.trace_id or default_trace_id()
        namespace, key = request.namespace, request.natural_key
        node = self.graph.lock_node(conn, namespace, key, visibility=access.visibility)
        if node is None:
            raise NotFound(f"node {key!r} not found in namespace {namespace}")
        ensure_not_held(conn, self.database.settings, namespace, [key])
        if node["node_type"] in PROTECTED_TYPES:
            raise FailedPrecondition(
                f"{key!r} is a protected {node['node_type']} node: the audit trail cannot be deleted",
                reason="PROTECTED_NODE",
            )
        vertex = self.graph.get_node(conn, namespace, key) or {}
        edges = self.graph.edge_counts(conn, namespace, key, str(node["label"]))
        chunk_count = self.chunks.delete_chunks(conn, namespace, key)
        facts = self.engine.delete_touching(conn, namespace, key)  # removed, not closed: see above
        self.graph.delete_nodes(conn, namespace, [key])
        journal_items = self.snapshots.forget_node(conn, namespace, key)
        original_removed = self.originals.forget(conn, namespace, key)
        fact_ids = {row.fact_id for row in facts}
        # An edge is a fact edge when its row was just removed; the rest are links and relations.
        edges_deleted = max(0, sum(edges.values()) - len(fact_ids))
        scopes = [str(s) for s in node["scopes"] or []]
        snapshot = {
            "natural_key": key,
            "type": str(node["node_type"]),
            "title": str(vertex.get("title") or key),
            "source_path": str(vertex.get("source_path") or ""),
            "origin": str(node["origin"]),
            "placeholder": bool(node["placeholder"]),
            "scopes": scopes,
            "chunk_count": chunk_count,
            "facts_removed": len(facts),
            "facts": [
                {
                    "fact_id": row.fact_id,
                    "subject": row.subject_key,
                    "predicate": row.predicate,
                    "object": row.object_key,
                }
                for row in facts[:SNAPSHOT_FACT_LIMIT]
            ],
            "edges_removed": edges,
            "snapshot_items_forgotten": journal_items,
            "original_file_removed": original_removed,
            "reason": request.reason,
        }
        if not audited:
            return DeleteNodeResult(key, str(node["node_type"]), chunk_count, len(facts), edges_deleted, "", trace_id)
        # The event is as visible as the node was: its snapshot holds the title.
        event = self.audit.record_deletion_in(conn, namespace, key, snapshot, trace_id=trace_id, scopes=scopes)
        return DeleteNodeResult(
            natural_key=key,
            node_type=str(node["node_type"]),
            chunks_deleted=chunk_count,
            facts_deleted=len(facts),
            edges_deleted=edges_deleted,
            audit_event_id=event.event_id,
            trace_id=event.trace_id,
        )


__all__ = ["DeleteNodeInput", "DeleteNodeResult", "NodeDeleter", "validate_delete"]

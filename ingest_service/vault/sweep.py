"""The sweep of a complete vault run (mark-and-sweep, docs/explanation/knowledge-model.md): every
vault document of the namespace that the run did not see goes, each deletion audited like DeleteNode.

One transaction per document, so a sweep cut short leaves every document either swept (node gone, its
journal row gone, its audit event written) or untouched; the next complete run sweeps the rest.

What goes for a document not seen:

* its node is deleted exactly as DeleteNode deletes it (`NodeDeleter.delete_in`: vertex, chunks, every
  edge and fact touching it, one audit event of action ``delete``), when nothing on it is agent data;
* when agent data hangs on it (facts of another origin than the vault with it as subject or object,
  or chunks written through the API), only the vault's part goes: the vault chunks, its LINKS_TO edges,
  its text, title and provenance; its vault relations are closed; the node stays as a placeholder
  carrying the agent's facts and chunks (the sweep never removes agent data), audited the same way
  (``kept_for_agent_data`` in the event's details);
* a node that is not the vault's any more (an agent recreated the key) or is gone is only forgotten by
  the vault's journal; a node hidden from the caller's scopes is left alone (and stays journaled, so a
  run by a caller who sees it sweeps it).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import UTC
from datetime import datetime
from typing import Any

from common.domain.audit import AuditTrail
from common.domain.write_access import WriteAccess
from common.storage.chunks.store import ChunkStore
from common.storage.database import Database
from common.storage.graph.store import GraphStore
from common.storage.vault_store import StoredVaultDocument
from common.storage.vault_store import VaultStore
from ingest_service.documents.node_deletion import DeleteNodeInput
from ingest_service.documents.node_deletion import NodeDeleter
from ingest_service.facts.engine import FactEngine

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class SweepOutcome:
    """What the sweep did to one document: ``swept`` (deleted or reduced), and the audit event."""

    natural_key: str
    swept: bool
    audit_event_id: str = ""


class VaultSweeper:
    """Sweeps the documents a complete run did not see (see the module doc)."""

    def __init__(self, database: Database, deleter: NodeDeleter, audit: AuditTrail) -> None:
        self.database = database
        self.deleter = deleter
        self.audit = audit
        self.graph = GraphStore(database)
        self.chunks = ChunkStore(database.settings)
        self.engine = FactEngine(self.graph)
        self.vault = VaultStore(database.settings)

    def sweep(
        self, namespace: str, stored: StoredVaultDocument, *, run_id: str, trace_id: str, access: WriteAccess
    ) -> SweepOutcome:
        """Sweeps one document in its own transaction (retried as a whole on deadlock).

        Raises:
            Unavailable: the database cannot be reached (this document was not swept).
        """
        self.audit.prepare()
        reason = f"vault sweep of run {run_id}: {stored.source_path} is no longer in the vault"
        return self.database.run_transaction(
            lambda conn: self._sweep_in(conn, namespace, stored, reason, trace_id, access)
        )

    def _sweep_in(
        self,
        conn: Any,
        namespace: str,
        stored: StoredVaultDocument,
        reason: str,
        trace_id: str,
        access: WriteAccess,
    ) -> SweepOutcome:
        key = stored.natural_key
        node = self.graph.lock_node(conn, namespace, key)
        if node is None or node["origin"] != "vault":
            self.vault.forget_document(conn, namespace, key)
            return SweepOutcome(key, swept=False)
        if not access.can_see(node["scopes"]):
            log.info("vault sweep of %s: %s is hidden from the caller, left alone", namespace, key)
            return SweepOutcome(key, swept=False)
        agent_facts = self.vault.agent_facts_touching(conn, namespace, key)
        api_chunks = self.chunks.count_api_chunks(conn, namespace, key)
        if not agent_facts and not api_chunks:
            result = self.deleter.delete_in(
                conn, DeleteNodeInput(namespace, key, reason=reason, trace_id=trace_id), access=access
            )
            self.vault.forget_document(conn, namespace, key)
            return SweepOutcome(key, swept=True, audit_event_id=result.audit_event_id)
        now = datetime.now(UTC)
        chunks_deleted = self.chunks.delete_vault_chunks(conn, namespace, key)
        self.graph.replace_links(conn, namespace, key, str(node["label"]), {})
        relations = [str(r["fact_id"]) for r in stored.resolved.get("relations") or () if r.get("fact_id")]
        closed = self.engine.close_many(conn, namespace, relations, now)
        scopes = [str(s) for s in node["scopes"] or []]
        self.vault.reduce_to_placeholder(
            conn,
            self.graph,
            namespace=namespace,
            natural_key=key,
            node_type=str(node["node_type"]),
            label=str(node["label"]),
            scopes=scopes,
            now=now,
        )
        self.vault.forget_document(conn, namespace, key)
        self.deleter.originals.forget(conn, namespace, key)  # the file went with the vault's text
        details = {
            "natural_key": key,
            "type": str(node["node_type"]),
            "source_path": stored.source_path,
            "origin": "vault",
            "scopes": scopes,
            "chunk_count": chunks_deleted,
            "relations_closed": [row.fact_id for row in closed],
            "kept_for_agent_data": {"facts": agent_facts, "chunks": api_chunks},
            "reason": reason,
        }
        event = self.audit.record_deletion_in(conn, namespace, key, details, trace_id=trace_id, scopes=scopes)
        return SweepOutcome(key, swept=True, audit_event_id=event.event_id)


__all__ = ["SweepOutcome", "VaultSweeper"]

"""DataProtectionService.EraseSubject: erase one data subject from a namespace, with a receipt.

A subject is named by ONE of: a node key (``person:alice``), a memory user (the ``user_id`` of memory
records), or an exact personal-data value (an e-mail address, a phone number; at least
`MIN_VALUE_LENGTH` characters). The values searched for are, for a node key: the key, its id part and
the node's title (each of at least `MIN_VALUE_LENGTH` characters); for a memory user: the owner scope of
its memories; for a value: the value. A row "holds the subject" when its text form contains one of the
values, case-insensitively.

What happens to what holds it, ALL IN ONE TRANSACTION (all or nothing: a crash or a kill before the
commit leaves the namespace as it was, a retry erases everything; see docs/how-to/data-protection.md):

* observations: redacted exactly as RedactObservation does (`ObservationRemover.redact_in`: content,
  data and assertions cleared, their episode chunk and text fragments deleted, the facts they proved
  struck, ``evidence_lost`` where no evidence remains); the values left in their actor, subject,
  source id, provenance are replaced by ``erased:<hash>``;
* nodes whose key, vertex or chunks hold a value (the subject's node, documents and memories naming it,
  episodes whose participants are the subject, entities extracted from the text): deleted as DeleteNode
  deletes them (`NodeDeleter.delete_in`: chunks and embeddings, every fact whose subject or object it
  is, edges, snapshot journal items);
* memory records of the user or naming the value: deleted with their node, chunk and enrichment; the
  summaries that covered them are removed and their other originals become plain memories again;
* context traces (compilation journals), vault journal rows, snapshot journal items and queue jobs
  (``procrastinate_jobs``) holding a value or a deleted key: deleted; the lexeme statistics of the
  namespace are folded so no term of the erased text is left;
* audit events holding a value: the value is replaced by ``erased:<hash>`` (events stay, values go);
* one new audit event (action ``erase``) and the receipt: counts and salted hashes, never a value.

A legal hold on the namespace or on the subject refuses the erasure (FAILED_PRECONDITION,
``LEGAL_HOLD``). ``validate_only`` runs everything and rolls back: the receipt then says what an erasure
would remove, and under a hold names the hold (``blocked_by_hold``) instead of refusing. A second
erasure of the same subject finds nothing and returns a receipt with zero counts.
"""

from __future__ import annotations

import hashlib
import logging
import re
import secrets
import uuid
from collections import Counter
from contextlib import nullcontext
from dataclasses import dataclass
from dataclasses import field
from dataclasses import replace
from datetime import UTC
from datetime import datetime
from typing import Any

from common.domain.audit import AuditEventInput
from common.domain.audit import AuditTrail
from common.domain.audit import default_trace_id
from common.domain.write_access import WriteAccess
from common.kernel.errors import NotFound
from common.kernel.errors import ViolationCollector
from common.kernel.field_checks import check_namespace
from common.kernel.field_checks import check_text
from common.kernel.identifiers import MAX_KEY_LENGTH
from common.storage.chunks.store import ChunkStore
from common.storage.data_protection.erasure_store import AUDIT_TYPES
from common.storage.data_protection.erasure_store import ErasureStore
from common.storage.data_protection.erasure_store import like_patterns
from common.storage.database import Database
from common.storage.graph.store import GraphStore
from common.storage.key_locks import lock_node_keys
from common.storage.memories.store import MemoryStore
from common.storage.session import set_transaction_statement_timeout
from common.storage.visibility import EVERYTHING
from ingest_service.documents.node_deletion import DeleteNodeInput
from ingest_service.documents.node_deletion import NodeDeleter
from ingest_service.observations.removal import ObservationRemover
from ingest_service.observations.removal import episode_key
from ingest_service.validation.legal_holds import caller_name
from ingest_service.validation.legal_holds import ensure_not_held
from ingest_service.validation.legal_holds import holds_noted_for_a_preview
from ingest_service.validation.limits import check_reason

log = logging.getLogger(__name__)

MIN_VALUE_LENGTH = 4
ERASE_ACTION = "erase"
SELECTOR_NODE_KEY = "node_key"
SELECTOR_MEMORY_USER = "memory_user"
SELECTOR_VALUE = "value"


class _RollBack(Exception):
    """Raised at the end of a ``validate_only`` erasure so its transaction rolls back."""

    def __init__(self, receipt: ErasureReceipt) -> None:
        super().__init__("validate_only")
        self.receipt = receipt


@dataclass(frozen=True)
class EraseInput:
    """An EraseSubjectRequest in domain form: exactly one of node_key, memory_user, value."""

    namespace: str
    node_key: str = ""
    memory_user: str = ""
    value: str = ""
    reason: str = ""
    confirm: bool = False
    validate_only: bool = False


@dataclass(frozen=True)
class ErasureReceipt:
    """What an erasure matched (salted hashes) and removed (counts per kind of row)."""

    receipt_id: str
    namespace: str
    erase_time: datetime
    principal: str
    selector_kind: str
    salt: str
    match_hashes: list[str]
    counts: dict[str, int]
    audit_event_id: str = ""
    validate_only: bool = False
    # validate_only: the legal hold that refuses this erasure until it is lifted ("" when none)
    blocked_by_hold: str = ""
    extra: dict[str, Any] = field(default_factory=dict)


def value_hash(salt: str, value: str) -> str:
    """The receipt's hash of a matched value: sha256 hex of ``salt`` + the value in lower case (a holder
    of the value can check it against a receipt; the receipt alone does not reveal it)."""
    return hashlib.sha256((salt + value.lower()).encode()).hexdigest()


def validate_erase(request: EraseInput) -> None:
    """Raises `InvalidArgument` with the field violations of an EraseSubjectRequest."""
    check = ViolationCollector()
    check_namespace(check, request.namespace)
    check_subject(check, request, required=True)
    if not request.confirm and not request.validate_only:
        check.add("confirm", "must be true to erase (or set validate_only to preview)")
    check_reason(check, request.reason)
    check.raise_if_any()


def check_subject(check: ViolationCollector, request: EraseInput, *, required: bool) -> None:
    """Adds the violations of a subject selector (node_key, memory_user, value): exactly one when
    ``required``, else at most one (none: the whole namespace)."""
    given = [name for name in ("node_key", "memory_user", "value") if getattr(request, name).strip()]
    if len(given) > 1 or (required and not given):
        wanted = (
            "exactly one of node_key, memory_user, value is required"
            if required
            else "at most one of node_key, memory_user, value"
        )
        check.add("subject", wanted)
    for name in ("node_key", "memory_user", "value"):
        check_text(check, name, getattr(request, name), MAX_KEY_LENGTH)
    if request.node_key.strip() and ":" not in request.node_key.strip(":"):
        check.add("node_key", "must be a natural key type:id")
    if request.value.strip() and len(request.value.strip()) < MIN_VALUE_LENGTH:
        check.add("value", f"at least {MIN_VALUE_LENGTH} characters (a shorter value would match too much)")


def subject_values(
    conn: Any, graph: GraphStore, store: ErasureStore, request: EraseInput
) -> tuple[str, list[str], list[str]]:
    """(selector kind, the values searched for, the subject keys holds are checked against) of the
    subject ``request`` names: a node's key, id and title; a memory user's owner scopes; a value."""
    namespace = request.namespace
    if request.node_key.strip():
        key = request.node_key.strip()
        values = [key, key.split(":", 1)[1]]
        node = graph.get_node(conn, namespace, key)
        if node and isinstance(node.get("title"), str):
            values.append(node["title"])
        values = [v for v in dict.fromkeys(values) if len(v) >= MIN_VALUE_LENGTH or v == key]
        return SELECTOR_NODE_KEY, values, [key, *values]
    if request.memory_user.strip():
        user = request.memory_user.strip()
        rows = store.memories_of(conn, namespace, user_id=user)
        scopes = store.owner_scopes(conn, namespace, [str(r["memory_id"]) for r in rows])
        return SELECTOR_MEMORY_USER, scopes, [f"memory-user:{user}", *scopes]
    value = request.value.strip()
    return SELECTOR_VALUE, [value], [value]


def scrub(value: Any, pattern: re.Pattern[str], marker: str) -> Any:
    """``value`` (JSON) with every match of ``pattern`` in its strings (keys too) replaced by ``marker``."""
    if isinstance(value, str):
        return pattern.sub(marker, value)
    if isinstance(value, list):
        return [scrub(item, pattern, marker) for item in value]
    if isinstance(value, dict):
        return {scrub(k, pattern, marker): scrub(v, pattern, marker) for k, v in value.items()}
    return value


class SubjectEraser:
    """Erases subjects (see the module doc)."""

    def __init__(
        self,
        database: Database,
        remover: ObservationRemover,
        deleter: NodeDeleter,
        audit: AuditTrail | None = None,
    ) -> None:
        self.database = database
        self.remover = remover
        self.deleter = deleter
        self.audit = audit or AuditTrail(database)
        self.store = ErasureStore(database.settings)
        self.graph = GraphStore(database)
        self.memories = MemoryStore(database.settings)
        self.chunks = ChunkStore(database.settings)

    def erase(self, request: EraseInput) -> ErasureReceipt:
        """Erases the subject of ``request`` (see the module doc) and stores its receipt.

        Raises:
            InvalidArgument: field violations (names of EraseSubjectRequest).
            FailedPrecondition: a legal hold covers the namespace or the subject (reason LEGAL_HOLD).
            Unavailable: the database cannot be reached (nothing was erased).
        """
        validate_erase(request)
        self.audit.prepare()
        receipt_id = "era-" + uuid.uuid4().hex[:24]
        salt = secrets.token_hex(8)
        trace_id = default_trace_id()
        principal = caller_name()
        # a preview is answered under a legal hold (its transaction always rolls back) and names the hold
        with holds_noted_for_a_preview() if request.validate_only else nullcontext([]) as held:
            try:
                receipt = self.database.run_transaction(
                    lambda conn: self._erase_in(conn, request, receipt_id, salt, trace_id, principal)
                )
            except _RollBack as preview:
                return replace(preview.receipt, blocked_by_hold=held[0].hold_id if held else "")
        log.info("erasure %s in %s: %s", receipt.receipt_id, request.namespace, receipt.counts)
        return receipt

    def get_receipt(self, namespace: str, receipt_id: str) -> ErasureReceipt:
        """A stored receipt.

        Raises:
            InvalidArgument: empty namespace or receipt id.
            NotFound: no such receipt in ``namespace``.
        """
        check = ViolationCollector()
        if not namespace:
            check.add("namespace", "required")
        if not receipt_id.strip():
            check.add("receipt_id", "required")
        check.raise_if_any()
        with self.database.connection() as conn:
            row = self.store.get_receipt(conn, namespace, receipt_id)
        if row is None:
            raise NotFound(f"erasure receipt {receipt_id!r} not found in namespace {namespace}")
        return ErasureReceipt(
            receipt_id=row["receipt_id"],
            namespace=row["namespace"],
            erase_time=row["erase_time"],
            principal=row["principal"],
            selector_kind=row["selector_kind"],
            salt=row["salt"],
            match_hashes=list(row["match_hashes"]),
            counts={str(k): int(v) for k, v in dict(row["counts"]).items()},
            audit_event_id=row["audit_event_id"],
        )

    # -- the transaction -------------------------------------------------------------------------------

    def _erase_in(
        self, conn: Any, request: EraseInput, receipt_id: str, salt: str, trace_id: str, principal: str
    ) -> ErasureReceipt:
        namespace = request.namespace
        # the matching scans read every row of the namespace: at 100k observations one takes longer than
        # the services' statement timeout
        set_transaction_statement_timeout(conn, self.database.settings.erasure_statement_timeout_ms)
        if request.node_key.strip():
            lock_node_keys(conn, [(namespace, request.node_key.strip())])
        selector, values, hold_keys = subject_values(conn, self.graph, self.store, request)
        ensure_not_held(conn, self.database.settings, namespace, hold_keys)
        patterns = like_patterns(values)
        marker = "erased:" + value_hash(salt, values[0])[:12] if values else "erased"
        matcher = re.compile("|".join(re.escape(v) for v in values), re.IGNORECASE) if values else None
        counts: Counter[str] = Counter()
        access = WriteAccess(EVERYTHING)
        reason = f"erasure {receipt_id}"

        # 1. Observations: redacted like RedactObservation, then their identity scrubbed.
        observation_ids = self.store.observations_matching(conn, namespace, patterns)
        episode_keys = [episode_key(o) for o in observation_ids]
        counts["chunks_deleted"] += self.store.count_chunks_of_nodes(
            conn, namespace, episode_keys, [f"text:{o}/" for o in observation_ids]
        )
        for observation_id in observation_ids:
            outcome = self.remover.redact_in(
                conn, namespace, observation_id, reason, trace_id=trace_id, access=access, audited=False
            )
            counts["facts_evidence_struck"] += outcome.facts_affected
            counts["facts_evidence_lost"] += outcome.facts_evidence_lost
        counts["observations_redacted"] = len(observation_ids)
        if matcher is not None:
            for row in self.store.observation_rows(conn, namespace, observation_ids):
                scrubbed = {k: scrub(v, matcher, marker) for k, v in row.items()}
                scrubbed["observation_id"] = row["observation_id"]
                self.store.rewrite_observation_identity(conn, namespace, scrubbed)

        # 2. Memory records of the user or naming a value, and the summaries that covered them.
        matched = self.store.nodes_matching(conn, namespace, patterns)
        memory_keys = [k for k, t in matched.items() if t == "memory"]
        memory_rows = self.store.memories_of(
            conn, namespace, user_id=request.memory_user.strip(), keys=memory_keys
        )
        deleted_keys: list[str] = []
        summaries = {str(r["summary_id"]) for r in memory_rows if r["summary_id"]}
        erased_memories = {str(r["memory_id"]) for r in memory_rows}
        for row in memory_rows:
            key = str(row["memory_id"])
            if row["is_summary"]:
                self.memories.release_summary(conn, namespace, key, datetime.now(UTC))
            counts["chunks_deleted"] += self._delete_node(conn, namespace, key, reason)
            self.memories.delete_row(conn, namespace, key)
            deleted_keys.append(key)
        counts["memories_deleted"] = len(erased_memories)
        for summary in sorted(summaries - erased_memories):
            self.memories.release_summary(conn, namespace, summary, datetime.now(UTC))
            counts["chunks_deleted"] += self._delete_node(conn, namespace, summary, reason)
            self.memories.delete_row(conn, namespace, summary)
            deleted_keys.append(summary)
            counts["summaries_removed"] += 1

        # 3. Every other node holding a value: the subject's own node, documents, episodes, entities.
        facts_before = self.store.count_facts(conn, namespace)
        for key, node_type in sorted(matched.items()):
            if node_type in AUDIT_TYPES or key in erased_memories or key in summaries:
                continue
            chunks = self._delete_node(conn, namespace, key, reason)
            if chunks >= 0:
                counts["chunks_deleted"] += chunks
                counts["nodes_deleted"] += 1
                deleted_keys.append(key)
        counts["facts_deleted"] = facts_before - self.store.count_facts(conn, namespace)

        # 4. Journals, traces and queue jobs holding a value or a deleted key.
        key_patterns = patterns + like_patterns([*deleted_keys, *episode_keys])
        counts["context_traces_deleted"] = self.store.delete_rows_matching(
            conn, "context_traces", namespace, key_patterns
        )
        counts["vault_journal_rows_deleted"] = self.store.delete_vault_rows_of_nodes(
            conn, namespace, deleted_keys
        ) + self.store.delete_rows_matching(conn, "vault_documents", namespace, patterns)
        counts["vault_runs_deleted"] = self.store.delete_rows_matching(
            conn, "vault_runs", namespace, patterns
        )
        counts["snapshot_items_deleted"] = self.store.delete_snapshot_items_matching(
            conn, namespace, patterns
        )
        # The change feed's outbox and pending webhook bodies, this transaction's own events included
        # (staged by the statement triggers until the commit numbers them): a subscriber never receives
        # an erased value.
        counts["change_events_deleted"] = self.store.delete_rows_matching(
            conn, "change_events", namespace, key_patterns
        ) + self.store.delete_staged_changes_matching(conn, namespace, key_patterns)
        counts["webhook_deliveries_deleted"] = self.store.delete_rows_matching(
            conn, "webhook_deliveries", namespace, key_patterns
        )
        counts["queue_jobs_deleted"] = self.store.delete_jobs_matching(
            conn, patterns + like_patterns(sorted(erased_memories | summaries))
        )
        self.store.fold_lexeme_statistics(conn, namespace)

        # 5. The audit trail: values replaced in the events that hold them.
        if matcher is not None:
            for label, props in self.store.audit_vertices_matching(conn, namespace, patterns):
                key = str(props["natural_key"])
                self.store.replace_vertex_properties(
                    conn, label, namespace, key, scrub(props, matcher, marker)
                )
                counts["audit_events_scrubbed"] += 1
            # The same events in the audit list (the rows ListAuditEvents reads), scrubbed alike.
            for row in self.store.audit_rows_matching(conn, namespace, patterns):
                self.store.replace_audit_row(conn, namespace, scrub(row, matcher, marker))

        hashes = sorted({value_hash(salt, v) for v in values})
        receipt = ErasureReceipt(
            receipt_id=receipt_id,
            namespace=namespace,
            erase_time=datetime.now(UTC),
            principal=principal,
            selector_kind=selector,
            salt=salt,
            match_hashes=hashes,
            counts=dict(sorted(counts.items())),
            validate_only=request.validate_only,
        )
        if request.validate_only:
            raise _RollBack(receipt)
        event = self.audit.record_in(
            conn,
            AuditEventInput(
                namespace=namespace,
                action=ERASE_ACTION,
                trace_id=trace_id,
                target_key=receipt_id,
                details={
                    "receipt_id": receipt_id,
                    "selector_kind": selector,
                    "salt": salt,
                    "match_hashes": hashes,
                    "counts": receipt.counts,
                    "reason_chars": len(request.reason),
                },
            ),
        )
        receipt = ErasureReceipt(**{**receipt.__dict__, "audit_event_id": event.event_id})
        self.store.insert_receipt(
            conn,
            {
                "receipt_id": receipt_id,
                "namespace": namespace,
                "erase_time": receipt.erase_time,
                "principal": principal,
                "selector_kind": selector,
                "salt": salt,
                "match_hashes": hashes,
                "counts": receipt.counts,
                "audit_event_id": event.event_id,
            },
        )
        return receipt

    def _delete_node(self, conn: Any, namespace: str, key: str, reason: str) -> int:
        """Deletes one node as DeleteNode does, unaudited; returns its chunk count (-1: already gone)."""
        try:
            result = self.deleter.delete_in(
                conn,
                DeleteNodeInput(namespace=namespace, natural_key=key, reason=reason),
                access=WriteAccess(EVERYTHING),
                audited=False,
            )
        except NotFound:
            return -1
        return result.chunks_deleted


__all__ = [
    "ERASE_ACTION",
    "EraseInput",
    "ErasureReceipt",
    "SubjectEraser",
    "check_subject",
    "subject_values",
    "validate_erase",
    "value_hash",
]

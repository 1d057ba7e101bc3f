"""VaultService.IngestVault: one vault run, mark-and-sweep (issue 11; seed 000 "Происхождение: vault и
agent", "Рёбра и связи"). Transport free; the contract's comment (protos/memory/v1/vault_service.proto)
is the specification, this is how it is met.

1. **Serialised**: the run holds the namespace's vault lock (`VaultStore.namespace_lock`, a session lock
   on a connection of its own) from start to end; a second run of the namespace waits.
2. **Documents as they arrive**: each file is parsed (`ingest_service.vault_documents`) and projected by
   the Retain projection (`DocumentWriter.retain` with a `VaultProjection`: origin ``vault``, chunks
   marked with the run, the journal row in the same transaction). A file whose path, text and
   provenance give the fingerprint journaled for its path, with its node as the vault left it, is
   *unchanged*: not parsed, chunked or embedded, only marked seen at the end.
3. **Links at the end**: the run's documents form a `VaultIndex`; each document's references resolve
   against it, then against the namespace's existing nodes the caller can see (by natural key). Only
   documents whose resolution differs from the journaled one (or whose node was rewritten) get their
   LINKS_TO edges and relation facts rewritten, so an unchanged vault writes nothing here either.
   Relation facts have origin ``vault``, evidence ``asserted``, the document's scopes, and valid_from =
   when the relation was first seen; a relation that disappears is closed (facts keep their history).
4. **Sweep** (`ingest_service.vault_sweep`) only after the end message when no document was rejected.

A run that breaks (the stream, the database) is journaled ``interrupted`` (when the database can still
be reached) and sweeps nothing; what it projected stays, and the next run finds it unchanged.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from common.domain.audit import AuditTrail
from common.domain.write_access import WriteAccess
from common.kernel.errors import InvalidArgument, NotFound, PermissionDenied, ViolationCollector
from common.kernel.identifiers import NAMESPACE_PATTERN, canonical_instant
from common.storage.database import Database
from common.storage.fact_store import FactStore
from common.storage.graph_store import GraphStore
from common.storage.vault_store import StoredVaultDocument, VaultStore
from ingest_service.documents import AgentOwnedKey, DocumentWriter, VaultProjection
from ingest_service.fact_engine import FactEngine, FactInput
from ingest_service.node_deletion import NodeDeleter
from ingest_service.vault_documents import (
    ParsedDocument,
    VaultFile,
    entry_of_journal,
    file_fingerprint,
    parse_file,
    references_of_journal,
)
from ingest_service.vault_links import LINKS_TO, LinkReference, VaultEntry, VaultIndex
from ingest_service.vault_sweep import VaultSweeper
from ingest_service.write_limits import check_trace_id

log = logging.getLogger(__name__)

NEW, CHANGED, UNCHANGED, CONFLICT, REJECTED = "new", "changed", "unchanged", "conflict", "rejected"


@dataclass(frozen=True)
class VaultHeader:
    """The header of a run (IngestVaultHeader)."""

    namespace: str
    dry_run: bool = False
    source: str = ""
    branch: str = ""
    commit_sha: str = ""
    trace_id: str = ""


@dataclass
class DocumentOutcome:
    """What the run did with one document (VaultDocumentResult)."""

    path: str
    natural_key: str
    status: str
    chunk_count: int = 0
    detail: str = ""


@dataclass
class VaultRunReport:
    """The response of a run (IngestVaultResponse); ``counts`` are the VaultRunCounts fields."""

    run_id: str
    namespace: str
    dry_run: bool
    trace_id: str
    swept: bool = False
    counts: dict[str, int] = field(default_factory=dict)
    documents: list[DocumentOutcome] = field(default_factory=list)
    swept_keys: list[str] = field(default_factory=list)
    unresolved_links: list[tuple[str, str, str]] = field(default_factory=list)
    audit_event_ids: list[str] = field(default_factory=list)

    def count(self, name: str, amount: int = 1) -> None:
        """Adds ``amount`` to the counter ``name``."""
        self.counts[name] = self.counts.get(name, 0) + amount


@dataclass
class _Seen:
    """A document of the run that resolves links: its entry, references, scopes, and whether its node
    is the vault's to write (not a conflict) and must get its links rewritten regardless of the journal."""

    entry: VaultEntry
    references: tuple[LinkReference, ...]
    scopes: tuple[str, ...]
    owned: bool
    rewrite: bool


def validate_header(header: VaultHeader) -> None:
    """Raises `InvalidArgument` with the violations of an IngestVaultHeader (fields ``header.*``)."""
    check = ViolationCollector()
    if not header.namespace:
        check.add("header.namespace", "required")
    elif not NAMESPACE_PATTERN.match(header.namespace):
        check.add("header.namespace", f"must match {NAMESPACE_PATTERN.pattern}")
    for name in ("source", "branch", "commit_sha"):
        if len(getattr(header, name)) > 4096 or "\x00" in getattr(header, name):
            check.add(f"header.{name}", "at most 4096 characters, no NUL")
    check_trace_id(check, header.trace_id, path="header.trace_id")
    check.raise_if_any()


class VaultIngestor:
    """Runs vault projections (see the module doc)."""

    def __init__(self, database: Database, writer: DocumentWriter, deleter: NodeDeleter, audit: AuditTrail):
        self.database = database
        self.writer = writer
        self.graph = GraphStore(database)
        self.engine = FactEngine(self.graph, FactStore(self.graph))
        self.vault = VaultStore(database.settings)
        self.sweeper = VaultSweeper(database, deleter, audit)

    def run(
        self,
        header: VaultHeader,
        batches: Iterable[list[VaultFile]],
        *,
        still_wanted: Callable[[], bool] = lambda: True,
    ) -> VaultRunReport:
        """Runs one vault projection of ``header.namespace`` from ``batches`` (the documents in stream
        order; the iterator raises when the stream breaks or ends without its end message).

        Raises:
            InvalidArgument: header violations; the stream's own errors (raised by ``batches``).
            Unavailable: the stream broke or the database cannot be reached (nothing swept).
        """
        validate_header(header)
        run_id = f"vault-{datetime.now(UTC):%Y%m%dT%H%M%SZ}-{uuid.uuid4().hex[:12]}"
        report = VaultRunReport(run_id, header.namespace, header.dry_run, header.trace_id or run_id)
        access = WriteAccess.of_caller()
        with self.vault.namespace_lock(header.namespace, still_wanted=still_wanted):
            if not header.dry_run:
                with self.database.connection() as conn:
                    self.vault.start_run(
                        conn,
                        run_id=run_id,
                        namespace=header.namespace,
                        source=header.source,
                        branch=header.branch,
                        commit_sha=header.commit_sha,
                        now=datetime.now(UTC),
                    )
            try:
                self._run(header, batches, report, access)
            except BaseException:
                if not header.dry_run:
                    self._finish(report, "interrupted")
                raise
            if not header.dry_run:
                self._finish(report, "completed")
        return report

    def _finish(self, report: VaultRunReport, status: str) -> None:
        try:
            with self.database.connection() as conn:
                self.vault.finish_run(conn, report.run_id, status, dict(report.counts), datetime.now(UTC))
        except Exception:  # the run's own error is what the caller needs to see
            log.warning("vault run %s: could not journal its end (%s)", report.run_id, status, exc_info=True)

    def _run(
        self,
        header: VaultHeader,
        batches: Iterable[list[VaultFile]],
        report: VaultRunReport,
        access: WriteAccess,
    ) -> None:
        namespace = header.namespace
        with self.database.connection() as conn:
            stored = self.vault.documents(conn, namespace)
        by_path = {doc.source_path: doc for doc in stored.values()}
        seen: dict[str, _Seen] = {}
        unchanged: list[str] = []
        rejected = 0
        index = 0
        for batch in batches:
            for file in batch:
                outcome = self._take(header, file, index, stored, by_path, seen, unchanged, report)
                report.documents.append(outcome)
                rejected += outcome.status == REJECTED
                report.count(f"documents_{_COUNTER[outcome.status]}")
                index += 1
        if not header.dry_run:
            with self.database.connection() as conn:
                self.vault.mark_seen(conn, namespace, report.run_id, unchanged)
        self._links(namespace, seen, stored, report, access, write=not header.dry_run)
        unseen = sorted(key for key in stored if key not in seen)
        if rejected:
            log.info("vault run %s: %d document(s) rejected, nothing swept", report.run_id, rejected)
            return
        if header.dry_run:
            report.swept_keys = unseen
            report.count("documents_swept", len(unseen))
            return
        for key in unseen:
            outcome = self.sweeper.sweep(
                namespace, stored[key], run_id=report.run_id, trace_id=report.trace_id, access=access
            )
            if outcome.swept:
                report.swept_keys.append(key)
                report.audit_event_ids.append(outcome.audit_event_id)
                report.count("documents_swept")
        report.swept = True

    def _take(
        self,
        header: VaultHeader,
        file: VaultFile,
        index: int,
        stored: dict[str, StoredVaultDocument],
        by_path: dict[str, StoredVaultDocument],
        seen: dict[str, _Seen],
        unchanged: list[str],
        report: VaultRunReport,
    ) -> DocumentOutcome:
        """Projects (or marks) one document; rejects what cannot be projected."""
        namespace = header.namespace
        previous = by_path.get(file.path)
        if (
            previous is not None
            and previous.natural_key not in seen
            and previous.node_intact
            and file_fingerprint(file) == previous.fingerprint
        ):
            journal = previous.links
            seen[previous.natural_key] = _Seen(
                entry_of_journal(previous.natural_key, file.path, journal),
                references_of_journal(journal),
                tuple(journal.get("scopes") or ()),
                owned=True,
                rewrite=False,
            )
            unchanged.append(previous.natural_key)
            return DocumentOutcome(file.path, previous.natural_key, UNCHANGED)
        indexed_at = datetime.now(UTC)
        try:
            parsed = parse_file(namespace, file, index, indexed_at=canonical_instant(indexed_at))
        except InvalidArgument as error:
            return DocumentOutcome(file.path, "", REJECTED, detail=_violations(error))
        key = parsed.retain.natural_key
        if key in seen:
            return DocumentOutcome(
                file.path, key, REJECTED, detail=f"natural key {key!r} of another document"
            )
        earlier = stored.get(key)
        status = CHANGED if earlier is not None else NEW
        if header.dry_run:
            seen[key] = _Seen(parsed.entry, parsed.references, parsed.retain.scopes, owned=True, rewrite=True)
            return DocumentOutcome(file.path, key, status)
        try:
            result = self.writer.retain(
                parsed.retain,
                vault=VaultProjection(report.run_id, self._journal(parsed, report.run_id, indexed_at)),
            )
        except AgentOwnedKey as error:
            seen[key] = _Seen(parsed.entry, (), parsed.retain.scopes, owned=False, rewrite=False)
            return DocumentOutcome(file.path, key, CONFLICT, detail=error.message)
        except (InvalidArgument, PermissionDenied, NotFound) as error:
            detail = _violations(error) if isinstance(error, InvalidArgument) else error.message
            return DocumentOutcome(file.path, key, REJECTED, detail=detail)
        seen[key] = _Seen(parsed.entry, parsed.references, parsed.retain.scopes, owned=True, rewrite=True)
        report.count("chunks_embedded", result.chunks_embedded)
        report.count("chunks_written", result.chunks_written)
        return DocumentOutcome(file.path, key, status, chunk_count=result.chunk_count)

    # -- links and relations -------------------------------------------------------------------------

    def _links(
        self,
        namespace: str,
        seen: dict[str, _Seen],
        stored: dict[str, StoredVaultDocument],
        report: VaultRunReport,
        access: WriteAccess,
        *,
        write: bool,
    ) -> None:
        """Resolves every document's references and rewrites the links and relations that changed."""
        index = VaultIndex(doc.entry for doc in seen.values())
        resolution: dict[str, tuple[list[str], list[tuple[str, str]]]] = {}
        pending: dict[str, list[LinkReference]] = {}
        for key, doc in seen.items():
            links, relations = [], []
            for reference in doc.references:
                target = index.resolve(doc.entry, reference)
                if target is None:
                    if not index.is_external(reference):
                        pending.setdefault(key, []).append(reference)
                    continue
                if target == key:
                    continue
                _add(links, relations, reference, target)
            resolution[key] = (links, relations)
        with self.database.connection() as conn:
            candidates = sorted({r.target.strip() for refs in pending.values() for r in refs})
            existing = self.graph.node_labels(conn, namespace, candidates, visibility=access.visibility)
        for key, references in pending.items():
            links, relations = resolution[key]
            for reference in references:
                target = reference.target.strip()
                if target in existing and target != key:
                    _add(links, relations, reference, target)
                else:
                    report.unresolved_links.append(
                        (seen[key].entry.path, reference.target, reference.relation)
                    )
        report.count("links_unresolved", len(report.unresolved_links))
        for key, doc in seen.items():
            links, relations = resolution[key]
            wanted_links = sorted(set(links))
            wanted_relations = sorted(set(relations))
            report.count("links_resolved", len(wanted_links) + len(wanted_relations))
            if not write or not doc.owned:
                continue
            old = stored[key].resolved if key in stored else {}
            old_relations = {(r["predicate"], r["object"]): r["fact_id"] for r in old.get("relations") or ()}
            if (
                not doc.rewrite
                and old.get(LINKS_TO, []) == wanted_links
                and sorted(old_relations) == wanted_relations
            ):
                continue
            self._rewrite(namespace, key, doc, wanted_links, wanted_relations, old_relations, report)

    def _rewrite(
        self,
        namespace: str,
        key: str,
        doc: _Seen,
        links: list[str],
        relations: list[tuple[str, str]],
        old_relations: dict[tuple[str, str], str],
        report: VaultRunReport,
    ) -> None:
        """`_write_links` in its own transaction; the counters only once it committed."""
        counts = VaultRunReport(report.run_id, namespace, False, report.trace_id)

        def work(conn: Any) -> None:
            counts.counts.clear()
            self._write_links(conn, namespace, key, doc, links, relations, old_relations, counts)

        self.database.run_transaction(work)
        for name, amount in counts.counts.items():
            report.count(name, amount)

    def _write_links(
        self,
        conn: Any,
        namespace: str,
        key: str,
        doc: _Seen,
        links: list[str],
        relations: list[tuple[str, str]],
        old_relations: dict[tuple[str, str], str],
        report: VaultRunReport,
    ) -> None:
        now = datetime.now(UTC)
        labels = self.graph.node_labels(conn, namespace, [key, *links])
        if key not in labels:
            return
        self.graph.replace_links(
            conn, namespace, key, labels[key], {t: labels[t] for t in links if t in labels}
        )
        kept: list[dict[str, str]] = []
        for predicate, target in relations:
            fact_id = old_relations.get((predicate, target))
            if fact_id is None:
                outcome = self.engine.record(
                    conn,
                    FactInput(
                        field=f"{doc.entry.path}: {predicate}",
                        subject=key,
                        predicate=predicate,
                        object=target,
                        valid_from=now,
                        scopes=list(doc.scopes),
                        namespace=namespace,
                        origin="vault",
                        source_path=doc.entry.path,
                        agent_asserted=True,
                    ),
                    now=now,
                )
                fact_id = outcome.fact_id
                report.count("relations_written")
            kept.append({"predicate": predicate, "object": target, "fact_id": fact_id})
        gone = [fact_id for pair, fact_id in old_relations.items() if pair not in set(relations)]
        report.count("relations_closed", len(self.engine.close_many(conn, namespace, gone, now)))
        self.vault.set_resolved(conn, namespace, key, {LINKS_TO: links, "relations": kept})

    def _journal(self, parsed: ParsedDocument, run_id: str, indexed_at: datetime) -> Callable[[Any], None]:
        """The journal write of a projected document, run inside its Retain transaction."""

        def record(conn: Any) -> None:
            self.vault.record_document(
                conn,
                namespace=parsed.retain.namespace,
                natural_key=parsed.retain.natural_key,
                source_path=parsed.entry.path,
                fingerprint=parsed.fingerprint,
                indexed_at=indexed_at,
                run_id=run_id,
                links=parsed.journal(),
            )

        return record


_COUNTER = {
    NEW: "new",
    CHANGED: "changed",
    UNCHANGED: "unchanged",
    CONFLICT: "conflicting",
    REJECTED: "rejected",
}


def _add(links: list[str], relations: list[tuple[str, str]], reference: LinkReference, target: str) -> None:
    if reference.relation == LINKS_TO:
        links.append(target)
    else:
        relations.append((reference.relation, target))


def _violations(error: InvalidArgument) -> str:
    return "; ".join(f"{v.field}: {v.description}" for v in error.violations) or error.message


__all__ = ["DocumentOutcome", "VaultHeader", "VaultIngestor", "VaultRunReport", "validate_header"]

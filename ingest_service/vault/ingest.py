"""VaultService.IngestVault: one vault run, mark-and-sweep (docs/explanation/knowledge-model.md:
vault and agent provenance, edges). Transport free; the contract's comment
(protos/memory/v1/vault_service.proto) is the specification, this is how it is met.

1. **Serialised**: the run holds the namespace's vault lock (`VaultStore.namespace_lock`, a session lock
   on a connection of its own) from start to end; a second run of the namespace waits.
2. **Documents as they arrive** (in ascending path order, or the stream is refused): each file is parsed
   (`ingest_service.vault.documents`); a key several files name goes to one of them whatever the order
   of the files (`ingest_service.vault.claims`: the journaled file, else the smallest path; the others
   are conflicts, never written); the file that gets its key is projected by the Retain projection
   (`DocumentWriter.prepare_retain`, `embed`, `write_prepared` with a `VaultProjection`: origin
   ``vault``, chunks marked with the run, the journal row in the same transaction). The projected
   documents are embedded in batches across documents while the batch before them is written
   (`ingest_service.documents.pipeline`), each still in a transaction of its own, in arrival order. A
   file whose path, text and provenance give the fingerprint journaled for its path, with its node as
   the vault left it, is *unchanged*: not parsed, chunked or embedded, only marked seen at the end.
3. **Links at the end**: the run's documents form a `VaultIndex`; each document's references resolve
   against it, then against the namespace's existing nodes the caller can see (by natural key). Only
   documents whose resolution differs from the journaled one (or whose node was rewritten) get their
   LINKS_TO edges and relation facts rewritten, so an unchanged vault writes nothing here either.
   Relation facts have origin ``vault``, evidence ``asserted``, the document's scopes, and valid_from =
   when the relation was first seen; a relation that disappears is closed (facts keep their history).
4. **Sweep** (`ingest_service.vault.sweep`) only after the end message when no document was rejected
   and the client did not leave out files it could not read (``source_incomplete``), and only when it is not a mass sweep (`ingest_service.validation.mass_deletion`: every document of the
   namespace, or more than ``CB_MASS_SWEEP_SHARE`` of them, counting only documents the vault still owns
   and the caller sees, so a hidden one is neither counted nor named) or the header allows one
   (``allow_mass_sweep``). A refused run raises FAILED_PRECONDITION ``MASS_SWEEP_REFUSED`` before it
   marks documents seen, rewrites links or sweeps: what the stream carried new or changed is projected
   as in any run, nothing is removed. A dry run reports the count and ``sweep_refused``.

A dry run goes through the same steps and writes nothing: `DocumentWriter.plan_retain` counts the chunks
each document would get and the texts that would be embedded.

A run that breaks (the stream, the database) is journaled ``interrupted`` (when the database can still
be reached) and sweeps nothing; what it projected stays, and the next run finds it unchanged. A run whose
process died before it could journal its end is journaled ``interrupted`` by the next run of the
namespace (`VaultStore.close_abandoned_runs`, in the transaction that journals the new run).
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable
from collections.abc import Iterable
from dataclasses import dataclass
from dataclasses import field
from datetime import UTC
from datetime import datetime
from functools import partial
from typing import Any

from common.domain.audit import AuditTrail
from common.domain.write_access import WriteAccess
from common.kernel.errors import InvalidArgument
from common.kernel.errors import NotFound
from common.kernel.errors import PermissionDenied
from common.kernel.errors import Unavailable
from common.kernel.identifiers import canonical_instant
from common.storage.database import Database
from common.storage.vault_store import StoredVaultDocument
from common.storage.vault_store import VaultStore
from ingest_service.documents.model import AgentOwnedKey
from ingest_service.documents.model import DocumentResult
from ingest_service.documents.model import PreparedDocument
from ingest_service.documents.model import VaultProjection
from ingest_service.documents.node_deletion import NodeDeleter
from ingest_service.documents.pipeline import EmbeddingPipeline
from ingest_service.documents.writer import DocumentWriter
from ingest_service.validation.mass_deletion import MASS_SWEEP_REFUSED
from ingest_service.validation.mass_deletion import MassDeletionGuard
from ingest_service.vault.claims import LOSE
from ingest_service.vault.claims import WAIT
from ingest_service.vault.claims import Claimant
from ingest_service.vault.claims import KeyClaims
from ingest_service.vault.claims import conflict_detail
from ingest_service.vault.documents import ParsedDocument
from ingest_service.vault.documents import VaultFile
from ingest_service.vault.documents import entry_of_journal
from ingest_service.vault.documents import file_fingerprint
from ingest_service.vault.documents import parse_file
from ingest_service.vault.documents import references_of_journal
from ingest_service.vault.link_writer import VaultLinkWriter
from ingest_service.vault.run_model import CHANGED
from ingest_service.vault.run_model import CONFLICT
from ingest_service.vault.run_model import NEW
from ingest_service.vault.run_model import REJECTED
from ingest_service.vault.run_model import UNCHANGED
from ingest_service.vault.run_model import DocumentOutcome
from ingest_service.vault.run_model import SeenDocument
from ingest_service.vault.run_model import VaultHeader
from ingest_service.vault.run_model import VaultRunReport
from ingest_service.vault.run_model import validate_header
from ingest_service.vault.sweep import VaultSweeper

log = logging.getLogger(__name__)


class VaultIngestor:
    """Runs vault projections (see the module doc)."""

    def __init__(self, database: Database, writer: DocumentWriter, deleter: NodeDeleter, audit: AuditTrail):
        self.database = database
        self.writer = writer
        self.vault = VaultStore(database.settings)
        self.sweeper = VaultSweeper(database, deleter, audit)
        self.links = VaultLinkWriter(database)
        self.guard = MassDeletionGuard(database.settings.mass_sweep_share)

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
                    abandoned = self.vault.close_abandoned_runs(
                        conn, header.namespace, run_id, datetime.now(UTC)
                    )
                    if abandoned:
                        log.warning(
                            "vault runs %s of %s ended without journaling their end: journaled interrupted",
                            ", ".join(abandoned),
                            header.namespace,
                        )
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
                self._run(header, batches, report, access, still_wanted)
            except BaseException as error:
                refused = getattr(error, "reason", "") == MASS_SWEEP_REFUSED
                log.info(
                    "vault run %s of %s %s (%s): nothing swept",
                    run_id,
                    header.namespace,
                    "refused" if refused else "interrupted",
                    error,
                )
                if not header.dry_run:
                    self._finish(report, "refused" if refused else "interrupted")
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
        still_wanted: Callable[[], bool],
    ) -> None:
        namespace = header.namespace
        with self.database.connection() as conn:
            stored = self.vault.documents(conn, namespace)
        run = _RunState(
            header, report, stored, KeyClaims({key: doc.source_path for key, doc in stored.items()})
        )
        index = 0
        with EmbeddingPipeline(self.writer, partial(self._write_projection, run)) as run.projections:
            for batch in batches:
                for file in batch:
                    if not still_wanted():  # the client went away: stop after the document in hand
                        raise Unavailable(
                            f"the client went away after {index} documents; nothing was swept",
                            reason="STREAM_BROKEN",
                        )
                    for key, claimants in run.claims.arrive(file.path, index):
                        self._award(run, key, claimants)
                    self._take(run, file, index)
                    index += 1
                run.projections.ship()  # what this message brought is written without waiting for the next
            for key, claimants in run.claims.rest():
                self._award(run, key, claimants)
            run.projections.finish()
        report.documents = [run.outcomes[i] for i in sorted(run.outcomes)]
        rejected = 0
        for outcome in report.documents:
            rejected += outcome.status == REJECTED
            report.count(f"documents_{_COUNTER[outcome.status]}")
        unseen = sorted(key for key in stored if key not in run.seen)
        # What the sweep would remove, of the documents it could: those the vault still owns and the
        # caller sees (`VaultSweeper` leaves a hidden one alone and forgets a gone one), so a document
        # hidden from the caller is neither counted nor named, exactly like a missing one.
        sweepable = [key for key in stored if _sweepable(stored[key], access)]
        doomed = [key for key in unseen if _sweepable(stored[key], access)]
        sweeps = not rejected and not header.source_incomplete
        if sweeps and not header.dry_run:
            self.guard.check(
                len(doomed),
                len(sweepable),
                allowed=header.allow_mass_sweep,
                what=f"the vault sweep of namespace {namespace}",
                flag="allow_mass_sweep (cb ingest --allow-mass-sweep)",
                items="documents",
            )
        if not header.dry_run:
            with self.database.connection() as conn:
                self.vault.mark_seen(conn, namespace, report.run_id, run.unchanged)
        self.links.write(namespace, run.seen, stored, report, access, write=not header.dry_run)
        if rejected:
            log.info("vault run %s: %d document(s) rejected, nothing swept", report.run_id, rejected)
            return
        if header.source_incomplete:
            log.info("vault run %s: the client left out files it could not read, nothing swept", report.run_id)
            return
        if header.dry_run:
            report.swept_keys = doomed
            report.count("documents_swept", len(doomed))
            report.sweep_refused = not header.allow_mass_sweep and self.guard.is_mass(
                len(doomed), len(sweepable)
            )
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

    def _take(self, run: _RunState, file: VaultFile, index: int) -> None:
        """Marks one arriving document unchanged, or parses it and projects it, keeps it waiting for its
        key or reports it a conflict (`ingest_service.vault.claims`); rejects what cannot be read."""
        previous = run.by_path.get(file.path)
        if (
            previous is not None
            and run.claims.owner(previous.natural_key) is None
            and previous.node_intact
            and file_fingerprint(file) == previous.fingerprint
        ):
            journal = previous.links
            run.seen[previous.natural_key] = SeenDocument(
                entry_of_journal(previous.natural_key, file.path, journal),
                references_of_journal(journal),
                tuple(journal.get("scopes") or ()),
                owned=True,
                rewrite=False,
            )
            run.unchanged.append(previous.natural_key)
            run.outcomes[index] = DocumentOutcome(file.path, previous.natural_key, UNCHANGED)
            self._lose(run, previous.natural_key, run.claims.take(previous.natural_key, file.path))
            return
        indexed_at = datetime.now(UTC)
        try:
            parsed = parse_file(run.header.namespace, file, index, indexed_at=canonical_instant(indexed_at))
        except InvalidArgument as error:
            run.outcomes[index] = DocumentOutcome(file.path, "", REJECTED, detail=_violations(error))
            for key, claimants in run.claims.reserve(file.path):
                self._lose(run, key, claimants)
            return
        key = parsed.retain.natural_key
        claimant = Claimant(index, file.path, parsed, indexed_at)
        decision = run.claims.decide(key, file.path)
        if decision == WAIT:
            run.claims.wait(key, claimant)
        elif decision == LOSE:
            self._lose(run, key, [claimant])
        else:
            self._award(run, key, [claimant])

    def _award(self, run: _RunState, key: str, claimants: list[Claimant]) -> None:
        """The first of ``claimants`` (path order) gets ``key`` and is projected; the others lose."""
        winner, *losers = claimants
        losers += run.claims.take(key, winner.path)
        self._project(run, winner)
        self._lose(run, key, losers)

    def _lose(self, run: _RunState, key: str, claimants: list[Claimant]) -> None:
        owner = run.claims.owner(key) or ""
        for claimant in claimants:
            run.outcomes[claimant.index] = DocumentOutcome(
                claimant.path, key, CONFLICT, detail=conflict_detail(key, claimant.path, owner)
            )

    def _project(self, run: _RunState, claimant: Claimant) -> None:
        """Projects one document that got its key: a dry run plans it (writing nothing) and records its
        outcome; a run prepares it and hands it to the run's `EmbeddingPipeline`, which embeds it with
        the documents around it and writes it (`_write_projection` records the outcome then)."""
        parsed = claimant.parsed
        namespace, key = run.header.namespace, parsed.retain.natural_key
        try:
            if run.header.dry_run:
                with self.database.connection() as conn:
                    if self.vault.owned_by_agent(conn, namespace, key):
                        raise AgentOwnedKey(
                            f"{key!r} was written through the API: the vault leaves it as it is"
                        )
                planned = self.writer.plan_retain(parsed.retain)
            else:
                run.projections.add(claimant, self.writer.prepare_retain(parsed.retain, vault=True))
                return
        except (AgentOwnedKey, InvalidArgument, PermissionDenied, NotFound) as error:
            self._refused(run, claimant, error)
            return
        self._projected(run, claimant, planned)

    def _write_projection(self, run: _RunState, claimant: Claimant, document: PreparedDocument) -> None:
        """Writes one embedded document of the run (called by the run's `EmbeddingPipeline`, in order)."""
        journal = self._journal(claimant.parsed, run.report.run_id, claimant.indexed_at)
        try:
            result = self.writer.write_prepared(document, vault=VaultProjection(run.report.run_id, journal))
        except (AgentOwnedKey, InvalidArgument, PermissionDenied, NotFound) as error:
            self._refused(run, claimant, error)
            return
        self._projected(run, claimant, result)

    def _refused(
        self,
        run: _RunState,
        claimant: Claimant,
        error: AgentOwnedKey | InvalidArgument | PermissionDenied | NotFound,
    ) -> None:
        """Records a document the projection refused: a key written through the API is a conflict (its
        links still resolve: the document is seen, not owned), anything else a rejection."""
        parsed, path, key = claimant.parsed, claimant.path, claimant.parsed.retain.natural_key
        if isinstance(error, AgentOwnedKey):
            run.seen[key] = SeenDocument(parsed.entry, (), parsed.retain.scopes, owned=False, rewrite=False)
            run.outcomes[claimant.index] = DocumentOutcome(path, key, CONFLICT, detail=error.message)
            return
        detail = _violations(error) if isinstance(error, InvalidArgument) else error.message
        run.outcomes[claimant.index] = DocumentOutcome(path, key, REJECTED, detail=detail)

    def _projected(self, run: _RunState, claimant: Claimant, result: DocumentResult) -> None:
        """Records a document written (or planned, in a dry run) and its outcome."""
        parsed, key = claimant.parsed, claimant.parsed.retain.natural_key
        run.seen[key] = SeenDocument(
            parsed.entry, parsed.references, parsed.retain.scopes, owned=True, rewrite=True
        )
        run.report.count("chunks_embedded", result.chunks_embedded)
        run.report.count("chunks_written", result.chunks_written)
        status = CHANGED if key in run.stored else NEW
        run.outcomes[claimant.index] = DocumentOutcome(
            claimant.path, key, status, chunk_count=result.chunk_count
        )

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


@dataclass
class _RunState:
    """What one run keeps while its documents arrive."""

    header: VaultHeader
    report: VaultRunReport
    stored: dict[str, StoredVaultDocument]
    claims: KeyClaims
    by_path: dict[str, StoredVaultDocument] = field(default_factory=dict)
    seen: dict[str, SeenDocument] = field(default_factory=dict)
    unchanged: list[str] = field(default_factory=list)
    outcomes: dict[int, DocumentOutcome] = field(default_factory=dict)  # by stream index
    projections: EmbeddingPipeline[Claimant] = field(init=False)  # set by `VaultIngestor._run`

    def __post_init__(self) -> None:
        self.by_path = {doc.source_path: doc for doc in self.stored.values()}


_COUNTER = {
    NEW: "new",
    CHANGED: "changed",
    UNCHANGED: "unchanged",
    CONFLICT: "conflicting",
    REJECTED: "rejected",
}


def _sweepable(document: StoredVaultDocument, access: WriteAccess) -> bool:
    """Whether `VaultSweeper` would remove ``document`` if the run did not see it: its node is still the
    vault's and visible to the caller."""
    return document.origin == "vault" and access.can_see(document.scopes)


def _violations(error: InvalidArgument) -> str:
    return "; ".join(f"{v.field}: {v.description}" for v in error.violations) or error.message


__all__ = ["DocumentOutcome", "VaultHeader", "VaultIngestor", "VaultRunReport", "validate_header"]

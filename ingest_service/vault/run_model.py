"""The values of a vault run (`ingest_service.vault.ingest`): its header, what happened to each document,
the report the response is made of, and the run's view of a document for link resolution."""

from __future__ import annotations

from dataclasses import dataclass
from dataclasses import field

from common.kernel.errors import ViolationCollector
from common.kernel.field_checks import check_namespace
from common.kernel.field_checks import check_text
from ingest_service.validation.limits import check_trace_id
from ingest_service.vault.links import LinkReference
from ingest_service.vault.links import VaultEntry

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
    allow_mass_sweep: bool = False
    source_incomplete: bool = False  # the client left out files it could not read: nothing is swept


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
    sweep_refused: bool = False
    counts: dict[str, int] = field(default_factory=dict)
    documents: list[DocumentOutcome] = field(default_factory=list)
    swept_keys: list[str] = field(default_factory=list)
    unresolved_links: list[tuple[str, str, str]] = field(default_factory=list)
    audit_event_ids: list[str] = field(default_factory=list)

    def count(self, name: str, amount: int = 1) -> None:
        """Adds ``amount`` to the counter ``name``."""
        self.counts[name] = self.counts.get(name, 0) + amount


@dataclass
class SeenDocument:
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
    check_namespace(check, header.namespace, "header.namespace")
    for name in ("source", "branch", "commit_sha"):
        check_text(check, f"header.{name}", getattr(header, name), 4096)
    check_trace_id(check, header.trace_id, path="header.trace_id")
    check.raise_if_any()


__all__ = [
    "CHANGED",
    "CONFLICT",
    "NEW",
    "REJECTED",
    "UNCHANGED",
    "DocumentOutcome",
    "SeenDocument",
    "VaultHeader",
    "VaultRunReport",
    "validate_header",
]

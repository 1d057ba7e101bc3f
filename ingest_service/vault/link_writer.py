"""The links phase of a vault run (`ingest_service.vault.ingest` step 3): every document's references
resolved against the run's documents (`VaultIndex`), then against the namespace's existing nodes the
caller can see; the LINKS_TO edges and relation facts of the documents whose resolution changed are
rewritten, each document in its own transaction.

Relation facts have origin ``vault``, evidence ``asserted`` (direct, ``agent_asserted``: no observation
can take it away), the document's scopes and source path, and ``valid_from`` = when the relation was first
seen (the journal keeps its fact_id, so an unchanged relation is the same fact run after run); a relation
that disappears is closed at the run's time.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC
from datetime import datetime
from typing import Any

from common.domain.write_access import WriteAccess
from common.storage.database import Database
from common.storage.graph.store import GraphStore
from common.storage.vault_store import StoredVaultDocument
from common.storage.vault_store import VaultStore
from ingest_service.facts.engine import FactEngine
from ingest_service.facts.engine import FactInput
from ingest_service.facts.engine import accepted
from ingest_service.vault.links import LINKS_TO
from ingest_service.vault.links import LinkReference
from ingest_service.vault.links import VaultIndex
from ingest_service.vault.links import link_names
from ingest_service.vault.run_model import SeenDocument
from ingest_service.vault.run_model import VaultRunReport


class VaultLinkWriter:
    """Resolves and writes the links and relations of a run's documents (see the module doc)."""

    def __init__(self, database: Database) -> None:
        self.database = database
        self.graph = GraphStore(database)
        self.engine = FactEngine(self.graph)
        self.vault = VaultStore(database.settings)

    def write(
        self,
        namespace: str,
        seen: dict[str, SeenDocument],
        stored: dict[str, StoredVaultDocument],
        report: VaultRunReport,
        access: WriteAccess,
        *,
        write: bool,
    ) -> None:
        """Resolves every document's references (unresolved ones go into ``report``) and, with ``write``,
        rewrites the links and relations that changed.

        Raises:
            Unavailable: the database cannot be reached.
        """
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
            candidates = sorted({name for refs in pending.values() for r in refs for name in link_names(r)})
            existing = self.graph.node_labels(conn, namespace, candidates, visibility=access.visibility)
        for key, references in pending.items():
            links, relations = resolution[key]
            for reference in references:
                target = next((name for name in link_names(reference) if name in existing), None)
                if target is not None and target != key:
                    _add(links, relations, reference, target)
                elif target is None:
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
            change = _LinkChange(namespace, key, doc, wanted_links, wanted_relations, old_relations)
            self._rewrite(change, report)

    def _rewrite(self, change: _LinkChange, report: VaultRunReport) -> None:
        """`_write_links` in its own transaction; the counters only once it committed."""
        counts = VaultRunReport(report.run_id, change.namespace, False, report.trace_id)

        def work(conn: Any) -> None:
            counts.counts.clear()
            self._write_links(conn, change, counts)

        self.database.run_transaction(work)
        for name, amount in counts.counts.items():
            report.count(name, amount)

    def _write_links(self, conn: Any, change: _LinkChange, report: VaultRunReport) -> None:
        namespace, key, doc = change.namespace, change.key, change.doc
        now = datetime.now(UTC)
        labels = self.graph.node_labels(conn, namespace, [key, *change.links])
        if key not in labels:
            return
        self.graph.replace_links(
            conn, namespace, key, labels[key], {t: labels[t] for t in change.links if t in labels}
        )
        kept: list[dict[str, str]] = []
        for predicate, target in change.relations:
            fact_id = change.old_relations.get((predicate, target))
            if fact_id is None:
                [outcome] = accepted(
                    self.engine.record(
                        conn,
                        [
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
                            )
                        ],
                        now=now,
                    )
                )
                fact_id = outcome.fact_id
                report.count("relations_written")
            kept.append({"predicate": predicate, "object": target, "fact_id": fact_id})
        gone = [fact_id for pair, fact_id in change.old_relations.items() if pair not in set(change.relations)]
        report.count("relations_closed", len(self.engine.close_many(conn, namespace, gone, now)))
        self.vault.set_resolved(conn, namespace, key, {LINKS_TO: change.links, "relations": kept})


@dataclass(frozen=True)
class _LinkChange:
    """What one owned document's links and relations become, and the relation facts it has now
    (``old_relations``: fact id by (predicate, object))."""

    namespace: str
    key: str
    doc: SeenDocument
    links: list[str]
    relations: list[tuple[str, str]]
    old_relations: dict[tuple[str, str], str]


def _add(links: list[str], relations: list[tuple[str, str]], reference: LinkReference, target: str) -> None:
    if reference.relation == LINKS_TO:
        links.append(target)
    else:
        relations.append((reference.relation, target))


__all__ = ["VaultLinkWriter"]

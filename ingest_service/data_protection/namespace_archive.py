"""ExportNamespace / ImportNamespace: a namespace as a versioned, streamed archive, and back.

The archive is JSON lines (UTF-8), one record per line, ``{"kind": K, "row": {...}}``; the first line is
the header ``{"kind": "header", "format": "memory-service-archive", "version": 1, "namespace",
"export_time", "principal", "scopes_filtered"}``, the last the end record ``{"kind": "end", "records": n,
"hidden_left_out": {kind: n}}``. Kinds, in order: ``namespace_settings``, ``domain_pack``,
``observation``, ``node`` (registry row and vertex properties), ``edge`` (label, end keys, properties:
fact edges, links, trace edges), ``fact`` (intervals, evidence, supersession), ``chunk`` (text, meta and
embedding), ``snapshot`` (with its journal items), ``memory`` (with lineage: parent, summary), ``vault_run``,
``vault_document``, ``context_trace``. Audit events are nodes and edges of the graph, so they travel too.

Export reads one snapshot of the database (a single transaction). With a token whose scopes do not reach
everything, items it cannot see (observations, nodes, facts, traces with a restricting scope it lacks,
and the chunks, memories and edges of hidden nodes) are left out; the header says ``scopes_filtered``
and the end record counts what was left out per kind.

A subject export (a data-subject access request: a node key, a memory user or a personal-data value, as
EraseSubject takes them) holds only what an erasure of that subject would match: the observations holding
it, the nodes holding it with their chunks, the facts and edges touching those nodes, the memory records;
the header names the selector kind (``subject``), and import refuses such an archive (it is an answer to a
person, not a namespace). The export is audited (action ``export``; a value only as its SHA-256).

Import refuses an archive of another format or version, or whose namespace differs from the request's,
and writes everything in one transaction: ids the API names are kept, surrogate ids are new, rows
whose key exists are left as they are (a second import of the same archive writes nothing).
"""

from __future__ import annotations

import hashlib
import json
from collections import Counter
from collections.abc import Iterable
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC
from datetime import datetime
from typing import Any

from common.domain.audit import AuditEventInput
from common.domain.audit import AuditTrail
from common.domain.audit import default_trace_id
from common.domain.write_access import WriteAccess
from common.kernel.errors import InvalidArgument
from common.kernel.errors import ViolationCollector
from common.kernel.field_checks import require_namespace
from common.storage.data_protection.erasure_store import AUDIT_TYPES
from common.storage.data_protection.erasure_store import ErasureStore
from common.storage.data_protection.erasure_store import like_patterns
from common.storage.database import Database
from common.storage.graph.store import GraphStore
from common.storage.namespace_archive_store import NamespaceArchiveStore
from ingest_service.data_protection.erasure import EraseInput
from ingest_service.data_protection.erasure import check_subject
from ingest_service.data_protection.erasure import subject_values
from ingest_service.observations.removal import episode_key
from ingest_service.validation.legal_holds import caller_name

FORMAT = "memory-service-archive"
IMPORT_BATCH = 500  # rows of one table per INSERT
VERSION = 1
TABLE_KINDS = (
    ("vault_runs", "vault_run"),
    ("vault_documents", "vault_document"),
    ("context_traces", "context_trace"),
)


@dataclass(frozen=True)
class ImportReport:
    """Records read per kind, and how many of them were written (the rest existed)."""

    read: dict[str, int]
    written: dict[str, int]


def _line(record: dict[str, Any]) -> bytes:
    return (json.dumps(record, ensure_ascii=False, separators=(",", ":"), default=str) + "\n").encode()


class _Tally:
    """The records an export has written and, per kind, the rows the caller's scopes left out (the end
    record carries both)."""

    def __init__(self, visibility: Any) -> None:
        self.visibility = visibility
        self.records = 0
        self.hidden: Counter[str] = Counter()

    def line(self, kind: str, row: dict[str, Any]) -> bytes:
        """The record of one row, counted."""
        self.records += 1
        return _line({"kind": kind, "row": row})

    def every(self, kind: str, rows: Iterable[dict[str, Any]]) -> Iterator[bytes]:
        """The records of ``rows``, each counted."""
        for row in rows:
            yield self.line(kind, row)

    def visible_rows(
        self, kind: str, rows: Iterable[dict[str, Any]]
    ) -> Iterator[tuple[bytes, dict[str, Any]]]:
        """The record and the row of each of ``rows`` the caller's scopes reach; the others are counted
        as hidden ``kind``."""
        for row in rows:
            if self.visibility.allows(row.get("scopes")):
                yield self.line(kind, row), row
            else:
                self.hidden[kind] += 1

    def visible(self, kind: str, rows: Iterable[dict[str, Any]]) -> Iterator[bytes]:
        """`visible_rows`, the records only."""
        return (line for line, _ in self.visible_rows(kind, rows))

    def end(self) -> bytes:
        """The end record: how many records came before it and what was left out."""
        return _line({"kind": "end", "records": self.records, "hidden_left_out": dict(self.hidden)})


class NamespaceArchive:
    """Exports and imports namespaces (see the module doc)."""

    def __init__(self, database: Database, audit: AuditTrail | None = None) -> None:
        self.database = database
        self.store = NamespaceArchiveStore(database.settings)
        self.subjects = ErasureStore(database.settings)
        self.graph = GraphStore(database)
        self.audit = audit or AuditTrail(database)

    def export(
        self, namespace: str, *, access: WriteAccess | None = None, subject: EraseInput | None = None
    ) -> Iterator[bytes]:
        """The archive of ``namespace``, or of one subject in it (``subject``: at most one of node_key,
        memory_user, value), line by line (see the module doc).

        Raises:
            InvalidArgument: a bad namespace or subject (raised before the first line).
        """
        require_namespace(namespace)
        if subject is not None:
            check = ViolationCollector()
            check_subject(check, subject, required=False)
            check.raise_if_any()
            if not (subject.node_key.strip() or subject.memory_user.strip() or subject.value.strip()):
                subject = None
        visibility = (access or WriteAccess.of_caller()).visibility
        if subject is not None:
            self._audit_subject_export(namespace, subject)
        return self._export(namespace, visibility, subject)

    def _audit_subject_export(self, namespace: str, subject: EraseInput) -> None:
        value = subject.value.strip()
        self.audit.record(
            AuditEventInput(
                namespace=namespace,
                action="export",
                trace_id=default_trace_id(),
                target_key=subject.node_key.strip()
                or (subject.memory_user.strip() and f"memory-user:{subject.memory_user.strip()}"),
                details={
                    "operation": "subject_export",
                    **({"value_sha256": hashlib.sha256(value.encode()).hexdigest()} if value else {}),
                },
            )
        )

    def _subject_match(self, conn: Any, subject: EraseInput) -> tuple[str, set[str], set[str]]:
        """(selector kind, observation ids, node keys) an erasure of ``subject`` would match."""
        selector, values, _ = subject_values(conn, self.graph, self.subjects, subject)
        patterns = like_patterns(values)
        observations = set(self.subjects.observations_matching(conn, subject.namespace, patterns))
        # audit events and trace anchors stay out, as an erasure leaves them: they record the service's
        # own acts (a hold's reason, who exported), not the subject's data
        keys = {
            key
            for key, node_type in self.subjects.nodes_matching(conn, subject.namespace, patterns).items()
            if node_type not in AUDIT_TYPES
        }
        keys |= {episode_key(observation_id) for observation_id in observations}
        return selector, observations, keys

    def _export(self, namespace: str, visibility: Any, subject: EraseInput | None = None) -> Iterator[bytes]:
        with self.database.connection() as conn:
            conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
            selector, observation_ids, subject_keys = (
                self._subject_match(conn, subject) if subject is not None else ("", set(), set())
            )
            user = subject.memory_user.strip() if subject is not None else ""
            header = {
                "kind": "header",
                "format": FORMAT,
                "version": VERSION,
                "namespace": namespace,
                "export_time": datetime.now(UTC).isoformat(),
                "principal": caller_name(),
                "scopes_filtered": not visibility.unrestricted,
            }
            if subject is not None:
                header["subject"] = selector
            yield _line(header)
            if subject is not None:
                yield from self._subject_rows(
                    conn, namespace, visibility, observation_ids, subject_keys, user
                )
                return
            tally = _Tally(visibility)
            settings = list(self.store.rows(conn, "namespace_settings", namespace))
            for row in settings:
                yield tally.line("namespace_settings", row)
                for pack in self.store.domain_packs(conn, list(row.get("packages") or [])):
                    yield tally.line("domain_pack", pack)
            yield from tally.visible("observation", self.store.rows(conn, "observations", namespace))
            hidden_keys: set[str] = set()
            for row in self.store.nodes(conn, namespace):
                if not visibility.allows(row.get("scopes")):
                    tally.hidden["node"] += 1
                    hidden_keys.add(row["natural_key"])
                    continue
                yield tally.line("node", row)
            for edge in self.store.edges(conn, namespace):
                if edge["start"] in hidden_keys or edge["end"] in hidden_keys:
                    tally.hidden["edge"] += 1
                    continue
                yield tally.line("edge", edge)
            yield from tally.visible("fact", self.store.rows(conn, "facts", namespace))
            for row in self.store.rows(conn, "chunks", namespace):
                if row.get("node_key") in hidden_keys:
                    tally.hidden["chunk"] += 1
                    continue
                for generated in ("id", "search_document", "identifier_text"):
                    row.pop(generated, None)
                yield tally.line("chunk", row)
            for row in self.store.snapshots(conn, namespace):
                yield tally.line("snapshot", row)
            for row in self.store.rows(conn, "memories", namespace):
                if row.get("memory_id") in hidden_keys:
                    tally.hidden["memory"] += 1
                    continue
                yield tally.line("memory", row)
            for table, kind in TABLE_KINDS:
                rows = self.store.rows(conn, table, namespace)
                yield from tally.visible(kind, rows) if kind == "context_trace" else tally.every(kind, rows)
        yield tally.end()

    def _subject_rows(
        self,
        conn: Any,
        namespace: str,
        visibility: Any,
        observation_ids: set[str],
        keys: set[str],
        user: str,
    ) -> Iterator[bytes]:
        """The records of one subject (see the module doc) and the end record: what the caller sees of
        the observations and nodes that hold it, their chunks, the facts and edges touching them, the
        memory records of the user or holding it."""
        tally = _Tally(visibility)
        yield from tally.visible(
            "observation",
            self.store.rows(conn, "observations", namespace, {"observation_id": observation_ids}),
        )
        memories = list(
            self.store.rows(
                conn, "memories", namespace, {"memory_id": keys, "user_id": {user} if user else set()}
            )
        )
        memory_ids = {str(row.get("memory_id")) for row in memories}
        shown: set[str] = set()
        for line, row in tally.visible_rows("node", self.store.nodes(conn, namespace, keys | memory_ids)):
            shown.add(str(row["natural_key"]))
            yield line
        yield from tally.every("edge", self.store.edges(conn, namespace, shown))
        yield from tally.visible(
            "fact", self.store.rows(conn, "facts", namespace, {"subject_key": shown, "object_key": shown})
        )
        for row in self.store.rows(conn, "chunks", namespace, {"node_key": shown}):
            for generated in ("id", "search_document", "identifier_text", "embedding"):
                row.pop(generated, None)
            yield tally.line("chunk", row)
        yield from tally.every("memory", (r for r in memories if str(r.get("memory_id")) in shown))
        yield tally.end()

    def import_archive(self, namespace: str, data: Iterable[bytes]) -> ImportReport:
        """Imports an archive of ``namespace`` (its byte chunks, in order) in one transaction.

        Raises:
            InvalidArgument: a bad namespace; an archive that is not JSON lines of this format and
                version, names another namespace, or lacks its end record (nothing was written).
        """
        require_namespace(namespace)
        records = list(_records(data))
        header, end = (records[0] if records else {}), (records[-1] if records else {})
        check = ViolationCollector()
        if header.get("kind") != "header" or header.get("format") != FORMAT:
            check.add("data", f"not a {FORMAT} archive (the first line must be its header)")
        elif header.get("version") != VERSION:
            check.add(
                "data", f"archive version {header.get('version')!r}; this service reads version {VERSION}"
            )
        elif header.get("namespace") != namespace:
            check.add("namespace", f"the archive holds namespace {header.get('namespace')!r}")
        elif header.get("subject"):
            check.add(
                "data", "a subject export answers a person's access request; it is not a namespace to import"
            )
        if end.get("kind") != "end" or end.get("records") != len(records) - 2:
            check.add("data", "the archive is truncated (no end record, or a record count that differs)")
        check.raise_if_any()
        body = records[1:-1]
        for record in body:
            if record.get("kind") == "node":
                self.graph.ensure_label(str(record["row"]["label"]), "vertex")
            elif record.get("kind") == "edge":
                self.graph.ensure_label(str(record["row"]["label"]), "edge")
        read: Counter[str] = Counter(str(r.get("kind")) for r in body)

        def work(conn: Any) -> Counter[str]:
            written: Counter[str] = Counter()
            new_nodes: set[str] = set()
            batch: list[dict[str, Any]] = []
            batch_kind = ""

            def flush() -> None:
                if not batch:
                    return
                if batch_kind == "node":
                    keys = self.store.insert_nodes(conn, batch)
                    new_nodes.update(keys)
                    written[batch_kind] += len(keys)
                elif (
                    batch_kind == "edge"
                ):  # only edges of vertices this import created: a re-import adds none
                    fresh = [edge for edge in batch if edge["start"] in new_nodes or edge["end"] in new_nodes]
                    written[batch_kind] += self.store.insert_edges(conn, namespace, fresh)
                else:
                    written[batch_kind] += self.store.insert_rows(conn, _TABLE_OF[batch_kind], batch)
                batch.clear()

            for record in body:
                kind, row = str(record.get("kind")), record.get("row")
                if not isinstance(row, dict):
                    raise InvalidArgument.single("data", f"a {kind} record without a row")
                if kind != batch_kind or len(batch) >= IMPORT_BATCH:
                    flush()
                    batch_kind = kind
                if kind in _TABLE_OF or kind == "node":
                    if row.get("namespace", namespace) != namespace:
                        raise InvalidArgument.single("data", f"a {kind} record of another namespace")
                    batch.append(row)
                elif kind == "edge":
                    batch.append(row)
                elif kind == "domain_pack":
                    written[kind] += self.store.insert_domain_pack(conn, row)
                elif kind == "snapshot":
                    written[kind] += self.store.insert_snapshot(conn, dict(row))
                elif kind == "context_trace":
                    if not self.store.trace_exists(conn, namespace, row):
                        written[kind] += self.store.insert_rows(conn, "context_traces", [row])
                else:
                    raise InvalidArgument.single("data", f"unknown record kind {kind!r}")
            flush()
            return written

        written = self.database.run_transaction(work)
        return ImportReport(dict(read), {k: int(v) for k, v in written.items()})


_TABLE_OF = {
    "namespace_settings": "namespace_settings",
    "observation": "observations",
    "fact": "facts",
    "chunk": "chunks",
    "memory": "memories",
    "vault_run": "vault_runs",
    "vault_document": "vault_documents",
}


def _records(data: Iterable[bytes]) -> Iterator[dict[str, Any]]:
    """The JSON records of an archive's byte chunks (lines may span chunks)."""
    pending = b""
    for chunk in data:
        pending += chunk
        *lines, pending = pending.split(b"\n")
        for number, line in enumerate(lines):
            if line.strip():
                yield _parsed(line, number)
    if pending.strip():
        yield _parsed(pending, -1)


def _parsed(line: bytes, number: int) -> dict[str, Any]:
    try:
        record = json.loads(line)
    except ValueError:
        raise InvalidArgument.single("data", "a line of the archive is not JSON") from None
    if not isinstance(record, dict):
        raise InvalidArgument.single("data", "a line of the archive is not a JSON object")
    return record


__all__ = ["FORMAT", "VERSION", "ImportReport", "NamespaceArchive"]

"""TraceService.GetTrace: the trail of one trace (docs/explanation/knowledge-model.md; docs/explanation/architecture.md).
Transport free.

A trace's trail is, in one namespace and ordered by time (ties: audit events first, then by id):

* its audit events (`common.domain.audit`): explicit ones, deletions with their snapshots, pii_access;
* the context compilations recorded under the trace id by CompileContext (``context_traces``): the
  request (query, anchors, as_of, budget, token count, encoding) and one decision per candidate.

Visibility: audit events follow `AuditReadAccess` (a namespace admin reads every one; anyone else its
own and those whose restricting scopes it holds); in a compilation, a decision about a chunk or node (key
``node_key#order`` or a natural key) or a fact (key ``fact-...``) the caller cannot see — or that no
longer exists, e.g. after DeleteNode — is left out (counted in ``hidden_decision_count``), and so are anchors naming hidden nodes.
A trace with nothing the caller may see is NOT_FOUND, like an unknown one.

A compilation is as visible as an item scoped to its compiler: ``context_traces.scopes`` holds the
compiling token's own ``principal:<name>`` (`Visibility.owner`), so its request (query text, as_of,
budget) is shown to that principal and to tokens granted that scope; compilations made in development
mode (or recorded before migration 0008) carry no scope and are shown to every reader of the namespace.

Personal data: `disclose_trace` passes a trail through the caller's disclosure (`query_service.pii_output`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from dataclasses import field
from dataclasses import replace
from datetime import datetime
from typing import Any

from common.domain.audit import AuditEvent
from common.domain.audit import event_from_props
from common.kernel.errors import NotFound
from common.kernel.errors import ViolationCollector
from common.storage.audit_store import AuditReadAccess
from common.storage.audit_store import AuditStore
from common.storage.context_store import ContextStore
from common.storage.database import Database
from common.storage.graph.store import GraphStore
from common.storage.trace_store import TraceStore
from common.storage.visibility import EVERYTHING
from common.storage.visibility import Visibility
from query_service.audit_reader import disclose_audit_event
from query_service.pii_output import NO_PII_POLICY
from query_service.pii_output import PiiDisclosure
from query_service.pii_output import PiiGuard
from query_service.pii_output import PiiPolicy

MAX_TRACE_ID_LENGTH = 256
_FACT_PREFIX = "fact-"


@dataclass(frozen=True)
class ContextCompilation:
    """One recorded CompileContext call of the trace."""

    compilation_id: int
    created_at: datetime
    request: Mapping[str, Any]
    decisions: list[Mapping[str, Any]] = field(default_factory=list)
    hidden_decision_count: int = 0


@dataclass(frozen=True)
class TraceEntry:
    """An audit event or a context compilation, with its time."""

    time: datetime
    audit_event: AuditEvent | None = None
    compilation: ContextCompilation | None = None


@dataclass(frozen=True)
class TraceView:
    """The trail of one trace, oldest entry first."""

    namespace: str
    trace_id: str
    entries: list[TraceEntry]


def _item_of(decision: Mapping[str, Any]) -> tuple[str, str]:
    """("fact", fact_id) or ("node", natural_key) named by a decision's key."""
    key = str(decision.get("key", ""))
    if decision.get("kind") == "fact" or key.startswith(_FACT_PREFIX):
        return "fact", key
    node_key, sep, order = key.rpartition("#")
    return "node", node_key if sep and order.isdigit() else key


class TraceReader:
    """Reads traces (see the module doc)."""

    def __init__(self, database: Database) -> None:
        self.database = database
        graph = GraphStore(database)
        self.audit = AuditStore(graph)
        self.contexts = ContextStore(database.settings, graph)
        self.items = TraceStore(graph)
        self.pii = PiiGuard(database)

    def get_trace(
        self,
        namespace: str,
        trace_id: str,
        *,
        visibility: Visibility = EVERYTHING,
        audit_access: AuditReadAccess | None = None,
        pii: PiiPolicy = NO_PII_POLICY,
    ) -> TraceView:
        """The trail of ``trace_id`` in ``namespace`` as ``visibility`` may see it, masked for ``pii``'s
        caller (`disclose_trace`).

        Args:
            audit_access: which audit events the caller may read (a namespace admin: all; see
                `AuditReadAccess`); None: those ``visibility`` allows.

        Raises:
            InvalidArgument: empty namespace or trace_id, or a trace_id over 256 characters.
            NotFound: the trace has no audit event and no compilation the caller may see.
            Unavailable: the database cannot be reached.
        """
        check = ViolationCollector()
        if not namespace.strip():
            check.add("namespace", "required")
        if not trace_id.strip():
            check.add("trace_id", "required")
        elif len(trace_id) > MAX_TRACE_ID_LENGTH or "\x00" in trace_id:
            check.add("trace_id", f"at most {MAX_TRACE_ID_LENGTH} characters, no NUL")
        check.raise_if_any()
        with self.database.connection() as conn:
            events = [
                event_from_props(namespace, props)
                for props in self.audit.events_of_trace(
                    conn, namespace, trace_id, access=audit_access or AuditReadAccess(visibility)
                )
            ]
            rows = self.contexts.traces(conn, namespace, trace_id, visibility=visibility)
            node_keys: list[str] = []
            fact_ids: list[str] = []
            for row in rows:
                node_keys.extend(str(anchor) for anchor in (row["request"] or {}).get("anchors", []) or [])
                for decision in row["decisions"] or []:
                    kind, key = _item_of(decision)
                    (fact_ids if kind == "fact" else node_keys).append(key)
            visible_nodes = self.items.visible_node_keys(conn, namespace, node_keys, visibility)
            visible_facts = self.items.visible_fact_ids(conn, namespace, fact_ids, visibility)
            hidden_anchors = (
                set()
                if visibility.unrestricted
                else set(node_keys)
                - visible_nodes
                - self._missing(conn, namespace, [k for k in node_keys if k not in visible_nodes])
            )
        compilations: list[ContextCompilation] = []
        for row in rows:
            kept: list[Mapping[str, Any]] = []
            for decision in row["decisions"] or []:
                kind, key = _item_of(decision)
                if key in (visible_facts if kind == "fact" else visible_nodes):
                    kept.append(decision)
            request = dict(row["request"] or {})
            if "anchors" in request:
                request["anchors"] = [a for a in request["anchors"] or [] if a not in hidden_anchors]
            compilations.append(
                ContextCompilation(
                    compilation_id=int(row["id"]),
                    created_at=row["created_at"],
                    request=request,
                    decisions=kept,
                    hidden_decision_count=len(row["decisions"] or []) - len(kept),
                )
            )
        if not events and not compilations:
            raise NotFound(f"trace {trace_id!r} not found in namespace {namespace}")
        entries = [TraceEntry(time=event.recorded_at, audit_event=event) for event in events]
        entries += [TraceEntry(time=c.created_at, compilation=c) for c in compilations]
        entries.sort(
            key=lambda e: (
                e.time,
                0 if e.audit_event else 1,
                e.audit_event.event_id
                if e.audit_event
                else str(e.compilation.compilation_id if e.compilation else 0),
            )
        )
        view = TraceView(namespace=namespace, trace_id=trace_id, entries=entries)
        return self.pii.disclose(
            namespace, pii, lambda disclosure: disclose_trace(disclosure, view), trace_id=trace_id
        )

    def _missing(self, conn: Any, namespace: str, keys: list[str]) -> set[str]:
        """Keys among ``keys`` that name no node at all (an anchor may name nothing: not hidden)."""
        existing = self.items.visible_node_keys(conn, namespace, keys, EVERYTHING)
        return set(keys) - existing


def disclose_trace(disclosure: PiiDisclosure, view: TraceView) -> TraceView:
    """A trail as ``disclosure``'s caller may see it (`query_service.pii_output`): audit events' target
    keys, principals and details, and compilations' requests (query, anchors) and decisions are masked by
    patterns."""
    if not disclosure.policy.protection:
        return view
    entries = []
    for entry in view.entries:
        event, compilation = entry.audit_event, entry.compilation
        if event is not None:
            event = disclose_audit_event(disclosure, event)
        if compilation is not None:
            compilation = replace(
                compilation,
                request=disclosure.value(dict(compilation.request), key=view.trace_id),
                decisions=[
                    disclosure.value(dict(decision), key=str(decision.get("key", "")))
                    for decision in compilation.decisions
                ],
            )
        entries.append(replace(entry, audit_event=event, compilation=compilation))
    return replace(view, entries=entries)


__all__ = ["ContextCompilation", "TraceEntry", "TraceReader", "TraceView", "disclose_trace"]

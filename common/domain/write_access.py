"""Write-side visibility scopes (docs/explanation/knowledge-model.md; docs/how-to/tokens-and-scopes.md).

The read side hides items whose restricting scopes (``workspace:``, ``principal:``) do not meet the
caller's (`common.storage.visibility`). The write side keeps that rule from being bypassed:

1. **Granting.** A caller may write an item carrying restricting scopes only when *each* of them is among
   its own: the token's allowed scopes plus its ``principal:<name>``. Otherwise a writer could put data
   in front of a workspace it does not belong to, or hide data in one. Relevance scopes (``task:``,
   ``project:``) are free.
2. **Touching hidden items.** A caller must not overwrite, extend, delete, redact or purge an item it
   cannot see. Such an item answers as if it did not exist (NOT_FOUND for a single target; a failed item
   with a field violation in a batch), never revealing more than a missing one would.

Development mode (auth off) and in-process callers (no RPC) are unrestricted, exactly as on the read
side. Every write path uses this one module: Retain/PutChunks and DeleteNode (`ingest_service.documents.writer`,
`ingest_service.documents.node_deletion`), RecordObservations (`ingest_service.observations.recorder`), Redact/Purge
(`ingest_service.observations.removal`), AssertFacts/CloseFact and the facts of every path
(`ingest_service.facts.engine`, `ingest_service.facts.assertions`), Reconcile (`ingest_service.snapshots.reconciler`)
and RecordAuditEvent (`common.domain.audit`).

What a scoped write derives (entities, facts, placeholders, fragments) carries its scopes, and a
narrower write changes nothing wider: `common.domain.scope_inheritance`.

Status of a refusal: a single-target RPC gets PERMISSION_DENIED (reason ``SCOPE_NOT_ALLOWED``) for rule 1
and NOT_FOUND for rule 2; an item of a batch fails with the same text as a field violation.
"""

from __future__ import annotations

from collections.abc import Iterable
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import psycopg

from common.auth.principals import current_principal
from common.kernel.errors import FieldViolation
from common.kernel.errors import NotFound
from common.kernel.errors import PermissionDenied
from common.kernel.identifiers import fact_id as compute_fact_id
from common.storage.fact_rows import FactRow
from common.storage.fact_store import FactStore
from common.storage.graph.store import GraphStore
from common.storage.visibility import EVERYTHING
from common.storage.visibility import Visibility
from common.storage.visibility import is_restricting
from common.storage.visibility import visibility_for

SCOPE_NOT_ALLOWED = "SCOPE_NOT_ALLOWED"


@dataclass(frozen=True)
class WriteAccess:
    """What one caller may write inside a namespace.

    Attributes:
        visibility: the caller's visibility (its allowed restricting scopes, or unrestricted).
    """

    visibility: Visibility = EVERYTHING

    @classmethod
    def of_caller(cls) -> WriteAccess:
        """The access of the RPC's caller (`common.auth.principals.current_principal`); unrestricted outside an RPC
        and in development mode."""
        return cls(visibility_for(current_principal()))

    @property
    def unrestricted(self) -> bool:
        """True when nothing is checked (development mode, in-process callers)."""
        return self.visibility.unrestricted

    # -- rule 1: granting scopes -------------------------------------------------------------------

    def scope_violations(self, scopes: Iterable[str], path: str = "scopes") -> list[FieldViolation]:
        """A violation ``<path>[i]`` per restricting scope the caller does not hold (empty when allowed)."""
        if self.unrestricted:
            return []
        return [
            FieldViolation(
                f"{path}[{index}]", f"scope {scope!r} is not among the scopes this token may write"
            )
            for index, scope in enumerate(scopes)
            if isinstance(scope, str) and is_restricting(scope) and scope not in self.visibility.scopes
        ]

    def require_scopes(self, scopes: Iterable[str], path: str = "scopes") -> None:
        """Raises `PermissionDenied` (reason ``SCOPE_NOT_ALLOWED``) naming each scope the caller may not write."""
        violations = self.scope_violations(scopes, path)
        if violations:
            raise PermissionDenied("; ".join(str(v) for v in violations), reason=SCOPE_NOT_ALLOWED)

    # -- rule 2: hidden targets --------------------------------------------------------------------

    def can_see(self, item_scopes: Iterable[str] | None) -> bool:
        """True when an item with ``item_scopes`` is visible to the caller (may be touched)."""
        return self.visibility.allows(item_scopes)

    def hidden_nodes(
        self, conn: psycopg.Connection[Any], graph: GraphStore, namespace: str, natural_keys: Sequence[str]
    ) -> set[str]:
        """The keys among ``natural_keys`` whose node exists but is hidden from the caller. A placeholder
        (a fact end nothing has asserted) is never hidden for a write: it holds nothing but its key, and
        refusing it would tell the caller that hidden facts name the key; the write that names it
        decides its visibility (`common.domain.scope_inheritance` rule 3)."""
        if self.unrestricted:
            return set()
        return graph.hidden_keys(
            conn, namespace, list(natural_keys), visibility=self.visibility, placeholders=False
        )

    def require_visible_nodes(
        self,
        conn: psycopg.Connection[Any],
        graph: GraphStore,
        namespace: str,
        natural_keys: Sequence[str],
    ) -> None:
        """Raises `NotFound` when a node among ``natural_keys`` exists but is hidden from the caller (the
        same answer as for a key that does not exist)."""
        hidden = self.hidden_nodes(conn, graph, namespace, natural_keys)
        if hidden:
            raise NotFound(f"node {min(hidden)!r} not found in namespace {namespace}")

    def fact_violations(
        self,
        conn: psycopg.Connection[Any],
        facts: FactStore,
        *,
        namespace: str,
        path: str,
        fact_id: str,
        subject: str,
        object_: str,
        scopes: Sequence[str],
    ) -> list[FieldViolation]:
        """Why the caller may not write this fact (empty when it may): a scope it may not grant
        (``<path>.scopes[i]``), a hidden subject or object node (``<path>.subject`` / ``<path>.object``), or
        an existing fact of the same id it cannot see (``<path>``: strengthening would change it). Hidden
        things read "not found". A superseded fact the caller cannot see is no violation: the fact
        engine treats it as not arrived yet (`sees_fact`), so it answers like a fact id that does not
        exist."""
        if self.unrestricted:
            return []
        violations = self.scope_violations(scopes, f"{path}.scopes")
        hidden = self.hidden_nodes(conn, facts.graph, namespace, [subject, object_])
        for name, key in (("subject", subject), ("object", object_)):
            if key in hidden:
                violations.append(FieldViolation(f"{path}.{name}", f"node {key!r} not found"))
        row = facts.get(conn, namespace, fact_id)
        if row is not None and not self.sees_fact(conn, facts, namespace, row):
            violations.append(FieldViolation(path, f"fact {fact_id} not found"))
        return violations

    def sees_fact(
        self, conn: psycopg.Connection[Any], facts: FactStore, namespace: str, row: FactRow
    ) -> bool:
        """True when the caller sees the stored fact ``row``: its scopes and both its end nodes."""
        if self.unrestricted:
            return True
        return self.can_see(row.scopes) and not self.hidden_nodes(
            conn, facts.graph, namespace, [row.subject_key, row.object_key]
        )

    def require_writable(
        self,
        conn: psycopg.Connection[Any],
        facts: FactStore,
        namespace: str,
        node_keys: Sequence[str],
        fact_items: Sequence[tuple[str, str, str, str, datetime, Sequence[str]]],
    ) -> None:
        """Checks a whole request before it writes (SnapshotService.Reconcile): ``node_keys`` to upsert and
        ``fact_items`` as ``(path, subject, predicate, object, valid_from, scopes)``.

        Raises:
            PermissionDenied: a fact scope the caller may not grant (reason ``SCOPE_NOT_ALLOWED``).
            NotFound: a node, fact end or fact of the same identity hidden from the caller.
        """
        if self.unrestricted:
            return
        denied = [v for item in fact_items for v in self.scope_violations(item[5], f"{item[0]}.scopes")]
        if denied:
            raise PermissionDenied("; ".join(str(v) for v in denied), reason=SCOPE_NOT_ALLOWED)
        self.require_visible_nodes(conn, facts.graph, namespace, list(node_keys))
        for path, subject, predicate, object_, valid_from, scopes in fact_items:
            refused = self.fact_violations(
                conn,
                facts,
                namespace=namespace,
                path=path,
                fact_id=compute_fact_id(namespace, subject, predicate, object_, valid_from),
                subject=subject,
                object_=object_,
                scopes=scopes,
            )
            if refused:
                raise NotFound(str(refused[0]))


__all__ = ["SCOPE_NOT_ALLOWED", "WriteAccess"]

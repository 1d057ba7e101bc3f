"""Write-side visibility scopes (seed 000 "Видимость внутри namespace"; DESIGN §8; issue 5 §3).

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
side. Every write path uses this one module: Retain/PutChunks and DeleteNode (`ingest_service.documents`,
`ingest_service.node_deletion`), RecordObservations (`ingest_service.observations`), Redact/Purge
(`ingest_service.observation_removal`), AssertFacts/CloseFact and the facts of every path
(`ingest_service.fact_engine`, `ingest_service.fact_assertions`), Reconcile (`ingest_service.snapshots`)
and RecordAuditEvent (`common.audit`).

Status of a refusal: a single-target RPC gets PERMISSION_DENIED (reason ``SCOPE_NOT_ALLOWED``) for rule 1
and NOT_FOUND for rule 2; an item of a batch fails with the same text as a field violation.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import psycopg

from common.auth import current_principal
from common.errors import FieldViolation, NotFound, PermissionDenied
from common.storage.graph_store import GraphStore
from common.storage.visibility import EVERYTHING, Visibility, is_restricting, visibility_for

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
        """The access of the RPC's caller (`common.auth.current_principal`); unrestricted outside an RPC
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
        """The keys among ``natural_keys`` whose node exists but is hidden from the caller."""
        if self.unrestricted:
            return set()
        return graph.hidden_keys(conn, namespace, list(natural_keys), visibility=self.visibility)

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


__all__ = ["SCOPE_NOT_ALLOWED", "WriteAccess"]

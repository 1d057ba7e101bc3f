"""Visibility scopes inside a namespace (docs/explanation/knowledge-model.md;
docs/how-to/tokens-and-scopes.md).

An item (node, chunk, fact, observation) carries a list of scopes ``type:id``. Entries with the prefixes
``workspace:`` and ``principal:`` *restrict* it: the item is visible only to a caller whose allowed scopes
intersect those entries. An item without scopes, or with relevance scopes only (``task:``, ``project:``,
...), is visible to every reader of the namespace.

Who sees what:

* A token principal sees the items restricted to one of the token's ``scopes`` (tokens file) or to its
  own ``principal:<name>`` — a principal always sees what was scoped to itself, without listing it.
* Development mode (auth off, loopback only) runs as a local superuser: it sees everything
  (`Visibility.everything`). So does in-process code that calls the domain without a caller (tools,
  tests); the read servicers always pass the caller's `Visibility`.

`Visibility` is a plain value: the servicers derive it from the authenticated principal
(`visibility_for`) and pass it into the domain, which hands it to the stores. Every store builds its
predicate with the methods below, so the rule lives in one place and is applied *inside* each SQL
statement (a ranking's LIMIT is filled with visible rows; nothing is filtered afterwards).

The predicates reference one named parameter, ``%(visibility_scopes)s``; add `Visibility.params` to the
statement's parameters. A statement that embeds a predicate is composed at run time (``TRUE`` for an
unrestricted caller), so it is never one of the static named queries of ``sql/queries``.
"""

from __future__ import annotations

from collections.abc import Iterable
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING
from typing import Any

from psycopg import sql

from common.kernel.memory_names import owner_scope

if TYPE_CHECKING:
    from common.auth.principals import Principal

RESTRICTING_PREFIXES: tuple[str, ...] = ("workspace:", "principal:")
"""Scope prefixes that restrict visibility; every other scope only states relevance."""

PARAM = "visibility_scopes"
_RESTRICTING_REGEX = sql.Literal("^(workspace|principal):")


def is_restricting(scope: str) -> bool:
    """True for ``workspace:...`` and ``principal:...`` scopes."""
    return scope.startswith(RESTRICTING_PREFIXES)


@dataclass(frozen=True)
class Visibility:
    """What one caller may see inside a namespace.

    Attributes:
        unrestricted: sees every item (development mode, in-process callers).
        scopes: restricting scopes the caller holds (``workspace:x``, ``principal:y``).
        owner: the caller's own ``principal:<name>`` scope (empty for development mode and in-process
            callers): what the caller records for itself alone carries it, e.g. its context
            compilations (``context_traces.scopes``), so GetTrace shows a compilation's query only to
            its compiler and to tokens granted that scope.
    """

    unrestricted: bool = False
    scopes: frozenset[str] = frozenset()
    owner: str = ""

    @classmethod
    def everything(cls) -> Visibility:
        """The local superuser: every item is visible."""
        return cls(unrestricted=True)

    @classmethod
    def of_scopes(cls, scopes: Iterable[str], *, owner: str = "") -> Visibility:
        """A restricted caller holding ``scopes`` (non-restricting entries are ignored) and ``owner``."""
        held = {s for s in scopes if is_restricting(s)}
        return cls(unrestricted=False, scopes=frozenset(held | ({owner} if owner else set())), owner=owner)

    @property
    def owner_scopes(self) -> list[str]:
        """The scopes of what the caller records for itself alone: ``[owner]``, or none."""
        return [self.owner] if self.owner else []

    # -- Python mirror (for values already in memory) --------------------------------------------

    def allows(self, item_scopes: Iterable[str] | None) -> bool:
        """True when an item with ``item_scopes`` is visible (the same rule as the SQL predicates)."""
        if self.unrestricted:
            return True
        restricting = [s for s in item_scopes or () if isinstance(s, str) and is_restricting(s)]
        return not restricting or any(s in self.scopes for s in restricting)

    # -- SQL -------------------------------------------------------------------------------------

    @property
    def params(self) -> Mapping[str, Any]:
        """The parameter the predicates reference (merge into the statement's named parameters)."""
        return {PARAM: sorted(self.scopes)}

    def array_predicate(self, column: sql.Composable) -> sql.Composable:
        """Predicate over a ``text[]`` scopes column (NULL counts as no scopes)."""
        if self.unrestricted:
            return sql.SQL("TRUE")
        return sql.SQL(
            "(NOT EXISTS (SELECT 1 FROM unnest({column}) AS vis(scope) WHERE vis.scope ~ {regex})"
            " OR coalesce({column}, '{{}}'::text[]) && %({param})s::text[])"
        ).format(column=column, regex=_RESTRICTING_REGEX, param=sql.SQL(PARAM))

    def jsonb_predicate(self, scopes: sql.Composable) -> sql.Composable:
        """Predicate over a jsonb value holding the scopes array (e.g. ``meta -> 'scopes'``; absent, null
        or not an array counts as no scopes)."""
        if self.unrestricted:
            return sql.SQL("TRUE")
        array = sql.SQL("(CASE jsonb_typeof({s}) WHEN 'array' THEN {s} ELSE '[]'::jsonb END)").format(
            s=scopes
        )
        return sql.SQL(
            "(NOT EXISTS (SELECT 1 FROM jsonb_array_elements_text({array}) AS vis(scope) WHERE vis.scope ~ {regex})"
            " OR {array} ?| %({param})s::text[])"
        ).format(array=array, regex=_RESTRICTING_REGEX, param=sql.SQL(PARAM))

    def node_predicate(self, namespace: sql.Composable, natural_key: sql.Composable) -> sql.Composable:
        """Predicate "the node ``natural_key`` of ``namespace`` is not hidden" over ``graph_nodes.scopes``
        (a key without a node counts as visible: it holds nothing)."""
        if self.unrestricted:
            return sql.SQL("TRUE")
        return sql.SQL(
            "NOT EXISTS (SELECT 1 FROM graph_nodes vis_node WHERE vis_node.namespace = {namespace}"
            " AND vis_node.natural_key = {key} AND NOT {visible})"
        ).format(
            namespace=namespace,
            key=natural_key,
            visible=self.array_predicate(sql.SQL("vis_node.scopes")),
        )


EVERYTHING = Visibility.everything()


def visibility_for(principal: Principal | None) -> Visibility:
    """The `Visibility` of a caller.

    * None (no RPC in progress: in-process callers) and the development principal (auth off): everything.
    * A token principal: its allowed scopes plus its own ``principal:<name>``, plus, for a token with a
      memory scope, the owner scope of its memories
      (`common.kernel.memory_names.owner_scope`), so Search, CompileContext and ListFacts show a user
      their own memories and what was derived from them, never another user's.
    """
    if principal is None or not principal.authenticated:
        return EVERYTHING
    scopes = set(principal.allowed_scopes)
    if principal.has_memory_scope:
        scopes.add(owner_scope(principal.organization_id, principal.environment, principal.user_id))
    return Visibility.of_scopes(scopes, owner=f"principal:{principal.name}")


__all__ = ["EVERYTHING", "RESTRICTING_PREFIXES", "Visibility", "is_restricting", "visibility_for"]

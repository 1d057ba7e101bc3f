"""The typed traversal of CompileTypedContext (`query_service.context.typed_context`; docs/how-to/domain-packs.md):
which relations a walk may follow (`relation_rules`, `check_relations`), where it starts (`resolve_anchors`;
`ResolvedAnchor`, masked by `disclose_anchor`), and how the walked steps become each node's smallest depth and
path (`reach`). The walk itself is `common.storage.graph.traversal.TraversalStore.walk`. Transport free.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from dataclasses import replace

from common.kernel.errors import ViolationCollector
from common.packs.identifier_patterns import MENTIONS
from common.packs.identifier_patterns import find_identifiers
from common.packs.kind_validation import NamespaceKinds
from common.storage.graph.traversal import RelationRule
from common.storage.graph.traversal import WalkStep
from query_service.context.pack.items import fact_score
from query_service.pii_output import PiiDisclosure


@dataclass(frozen=True)
class PathStep:
    """One step of a path: the fact followed, its relation, ``out``/``in``, and the node reached."""

    fact_id: str
    relation: str
    direction: str
    node_key: str


@dataclass(frozen=True)
class ResolvedAnchor:
    """An anchor candidate: the text given, its canonical key, ``anchor``/``query``, and whether it exists
    (and is visible)."""

    input: str
    natural_key: str
    source: str
    found: bool


@dataclass
class NodeReach:
    """How the walk reached a node: at its smallest ``depth`` (anchors 0), from ``anchor``, along ``path``;
    ``quality`` is `query_service.context.pack.items.fact_score` (base 1) of the best fact reaching it at
    that depth (anchors 1)."""

    depth: int
    anchor: str
    path: tuple[PathStep, ...]
    quality: float


def check_relations(kinds: NamespaceKinds, relations: Sequence[str]) -> None:
    """Checks that every requested relation is one of the packs' or ``MENTIONS``.

    Raises:
        InvalidArgument: ``relations[i]`` violations naming the known relations.
    """
    known = {*kinds.relations, MENTIONS}
    check = ViolationCollector()
    for index, relation in enumerate(relations):
        if relation not in known:
            check.add(
                f"relations[{index}]",
                f"{relation!r} is not a relation of the namespace's packs nor {MENTIONS}; "
                f"known: {', '.join(sorted(known))}",
            )
    check.raise_if_any()


def relation_rules(kinds: NamespaceKinds, only: Sequence[str] = ()) -> list[RelationRule]:
    """The rules of the packs' relations (kind sets include kind aliases) plus MENTIONS, restricted to
    ``only`` when given."""

    def synonyms(names: frozenset[str]) -> frozenset[str]:
        out = set(names)
        for name in names:
            kind = kinds.kinds.get(name)
            if kind is not None:
                out.update(kind.kind_aliases)
        return frozenset(out)

    rules = [
        RelationRule(relation.relation, synonyms(relation.from_kinds), synonyms(relation.to_kinds))
        for relation in kinds.relations.values()
    ]
    if MENTIONS not in kinds.relations:  # a pack may define MENTIONS itself; its kinds then apply
        rules.append(RelationRule(MENTIONS))
    if only:
        wanted = set(only)
        rules = [rule for rule in rules if rule.relation in wanted]
    return sorted(rules, key=lambda rule: rule.relation)


def resolve_anchors(
    kinds: NamespaceKinds, anchors: Sequence[str], query: str, *, query_limit: int
) -> list[tuple[str, str, str]]:
    """(input, canonical key, source) candidates, distinct by key, request anchors first.

    A request anchor is resolved through ``kindAliases`` and ``aliases`` (`NamespaceKinds.resolve_key`);
    one without a pack kind prefix is also read as an alias id of any kind and as an identifier of the
    packs' ``idPatterns``. The identifiers found in ``query`` (at most ``query_limit``) follow with
    source ``"query"``.
    """
    out: dict[str, tuple[str, str, str]] = {}
    pack_kinds = {kind.kind: kind for kind in kinds.kinds.values()}  # canonical kinds (no kindAliases)
    for anchor in anchors:
        keys = [kinds.resolve_key(anchor)]
        prefix = anchor.partition(":")[0] if ":" in anchor else ""
        if prefix not in kinds.kinds:
            keys += [
                f"{name}:{kind.aliases[anchor]}"
                for name, kind in pack_kinds.items()
                if anchor in kind.aliases
            ]
            keys += [
                match.natural_key for match in find_identifiers(kinds, [anchor]) if match.matched == anchor
            ]
        for key in keys:
            out.setdefault(key, (anchor, key, "anchor"))
    for match in find_identifiers(kinds, [query], limit=query_limit):
        out.setdefault(match.natural_key, (match.matched, match.natural_key, "query"))
    return list(out.values())


def path_of(step: WalkStep, length: int) -> tuple[PathStep, ...]:
    """The first ``length`` steps of the path that reached ``step``."""
    return tuple(
        PathStep(step.path_facts[i], step.path_relations[i], step.path_directions[i], step.path_keys[i + 1])
        for i in range(length)
    )


def reach(anchors: Sequence[str], steps: Sequence[WalkStep]) -> dict[str, NodeReach]:
    """Every node on a kept path at its smallest depth (anchors at 0), with the path that reached it and
    the quality of the best fact reaching it at that depth. Every fact on a kept path is itself a step
    (the walk is breadth first and keeps whole prefixes)."""
    facts = {step.fact.fact_id: step.fact for step in steps}
    reached = {key: NodeReach(0, key, (), 1.0) for key in anchors}
    for step in steps:
        for position in range(1, len(step.path_keys)):
            key = step.path_keys[position]
            row = facts.get(step.path_facts[position - 1])
            value = fact_score(row) if row is not None else 0.0
            current = reached.get(key)
            if current is None or position < current.depth:
                reached[key] = NodeReach(position, step.anchor, path_of(step, position), value)
            elif position == current.depth and value > current.quality:
                current.quality = value
    return reached


def disclose_anchor(disclosure: PiiDisclosure, anchor: ResolvedAnchor) -> ResolvedAnchor:
    """A resolved anchor (the text given and its key) masked by patterns."""
    if not disclosure.policy.protection:
        return anchor
    return replace(
        anchor,
        input=disclosure.text(anchor.input, key=anchor.natural_key),
        natural_key=disclosure.text(anchor.natural_key, key=anchor.natural_key),
    )

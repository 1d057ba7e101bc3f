"""CompileTypedContext: a context pack built by typed traversal from anchors along the relations of the
namespace's domain packs (seed 000 "Доменные пакеты и строгий режим"; DESIGN §6-7; issue 4 §4).

Steps:

1. **Packs.** The namespace's enabled packs (`KindValidator`, cached per process for a few seconds). A
   namespace without packs is FAILED_PRECONDITION (reason ``NO_DOMAIN_PACK``): typed traversal is defined
   by pack relations, and CompileContext already serves untyped namespaces; the message names the fix
   (``DomainPackService.SetNamespaceKinds``).
2. **Anchors.** Each request anchor is resolved through ``kindAliases`` and ``aliases``
   (``svc:checkout`` -> ``service:checkout-svc``, `NamespaceKinds.resolve_key`); an anchor without a
   pack kind prefix is also read as an alias id of any kind (``checkout``) and as an identifier of the
   packs' ``idPatterns`` (``PROJ-123`` -> ``issue:PROJ-123``). The identifiers the ``idPatterns`` find in
   the query text are anchors too (`find_identifiers`, the function the write path uses). Only keys
   whose node exists and is visible to the caller start the walk; every candidate is reported in
   ``pack.anchors`` with ``found`` (a hidden node looks exactly like a missing one).
3. **Walk.** `TraversalStore.walk`: a bounded recursive CTE over the ``facts`` index, both directions,
   facts valid at ``as_of``, evidence not lost, visible to the caller; relations are the packs'
   (subject/object kinds within ``fromKinds``/``toKinds``, kind aliases included) plus ``MENTIONS``
   (the identifier links made at write time, any kinds), or the subset the request names. Depth
   ``max_depth`` (default 2, at most 4), ``fanout`` facts per node and step, ``row_limit`` steps in all.
4. **Items.** Every anchor found (depth 0), every fact reached (the depth of the node it reaches), and
   every node on a path (its smallest depth; a node with chunks, such as a document or an episode
   reached through MENTIONS, shows its first visible chunk, which the fitter caps like a chunk of
   CompileContext), each with the anchor and path that reached it and its
   provenance (facts: fact_id, observation_ids, source_path; nodes: key, source_path, the provenance map
   stored with the node). Conflicting facts are flagged, never resolved.
5. **Rank.** ``score = distance_decay ** d x confidence x evidence rank / 3`` (seed 000: asserted 3,
   extracted 2, inferred and derived 1) where ``d`` is the depth of a node and ``depth - 1`` for a fact (a
   fact touching an anchor weighs as much as the anchor); a node's confidence and evidence are those of
   the best fact reaching it; anchors score 1. Ties: smaller depth first, then nodes before facts, then
   key.
6. **Fit and trace.** `PackFitter` (shared with CompileContext) fits the rendered items into
   ``token_budget`` tokens of the configured tokenizer; every decision goes to ``context_traces``.

Configured as data: `TypedContextSettings` with named presets in `TYPED_CONTEXT_PRESETS`.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import cast

from common.storage.database import Database
from common.kernel.errors import FailedPrecondition, InvalidArgument, ViolationCollector
from common.packs.identifier_patterns import MENTIONS, find_identifiers
from common.kernel.identifiers import canonical_instant, canonical_json
from common.packs.kind_validation import KindValidator, NamespaceKinds
from common.kernel.pii import PiiMarks
from common.storage.chunk_rankings import StoredChunk
from common.storage.chunk_store import ChunkStore
from common.storage.context_store import ContextStore, NodeSummary
from common.storage.fact_store import FactRow, FactStore
from common.storage.graph_store import GraphStore, type_of_key
from common.storage.traversal_store import RelationRule, TraversalStore, WalkQuery, WalkStep
from common.storage.visibility import EVERYTHING, Visibility
from common.text_models.tokenizer import TokenCounter
from query_service.context_compiler import (
    EVIDENCE_RANK,
    MAX_EVIDENCE_RANK,
    ContextRequest,
    ItemProvenance,
    render_fact,
    validate_context,
)
from query_service.context_fitting import FitCandidate, PackFitter
from query_service.pii_output import NO_PII_POLICY, PiiGuard, PiiPolicy, disclose_anchor, disclose_typed_item

DEFAULT_MAX_DEPTH = 2
MAX_DEPTH = 4
MAX_RELATIONS = 100
NODE = "node"
FACT = "fact"


@dataclass(frozen=True)
class TypedContextSettings:
    """How a typed context pack is compiled.

    Attributes:
        fanout: facts followed from one node in one step (highest confidence first).
        row_limit: steps the walk reads in total (it stops there; the pack says ``truncated``).
        max_query_anchors: identifiers taken from the query text.
        distance_decay: score factor per step of graph distance.
        separator, min_truncated_tokens, max_item_share: budget fitting (`PackFitter`); typed items are
            short and never cut.
    """

    fanout: int = 50
    row_limit: int = 2000
    max_query_anchors: int = 20
    distance_decay: float = 0.5
    separator: str = "\n"
    min_truncated_tokens: int = 48
    max_item_share: float = 0.35


TYPED_CONTEXT_PRESETS: dict[str, TypedContextSettings] = {"default": TypedContextSettings()}


@dataclass(frozen=True)
class TypedContextRequest:
    """A CompileTypedContextRequest in domain form; 0/None/empty fields take their defaults."""

    namespace: str
    query: str = ""
    anchors: tuple[str, ...] = ()
    as_of: datetime | None = None
    token_budget: int = 0
    max_depth: int = 0
    relations: tuple[str, ...] = ()
    trace_id: str = ""
    visibility: Visibility = EVERYTHING
    pii: PiiPolicy = NO_PII_POLICY  # the caller's: items are masked before fitting (query_service.pii_output)


@dataclass(frozen=True)
class PathStep:
    """One step of a path: the fact followed, its relation, ``out``/``in``, and the node reached."""

    fact_id: str
    relation: str
    direction: str
    node_key: str


@dataclass(frozen=True)
class TypedItem:
    """One item of a typed pack (maps onto memory.v1.TypedContextItem)."""

    kind: str
    key: str
    text: str
    score: float
    provenance: ItemProvenance
    natural_key: str
    node_type: str
    depth: int
    anchor: str
    path: tuple[PathStep, ...] = ()
    relation: str = ""
    conflict: bool = False
    token_count: int = 0


@dataclass(frozen=True)
class ResolvedAnchor:
    """An anchor candidate: the text given, its canonical key, ``anchor``/``query``, and whether it exists
    (and is visible)."""

    input: str
    natural_key: str
    source: str
    found: bool


@dataclass(frozen=True)
class TypedContextPack:
    """The compiled typed context; ``token_count`` counts ``text`` and never exceeds ``token_budget``."""

    items: list[TypedItem]
    text: str
    token_count: int
    trace_id: str
    token_budget: int
    dropped_count: int
    as_of: datetime
    anchors: list[ResolvedAnchor]
    max_depth: int
    relations: list[str]
    truncated: bool


@dataclass(kw_only=True)
class _Candidate(FitCandidate):
    item: TypedItem


@dataclass
class _NodeReach:
    depth: int
    anchor: str
    path: tuple[PathStep, ...]
    quality: float  # confidence x evidence rank / 3 of the best fact reaching the node


def quality(row: FactRow) -> float:
    """``confidence x evidence rank / 3`` (unknown evidence classes rank 1), in 0..1."""
    return max(0.0, min(1.0, row.confidence)) * EVIDENCE_RANK.get(row.evidence, 1) / MAX_EVIDENCE_RANK


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
    """(input, canonical key, source) candidates, distinct by key, request anchors first (see step 2)."""
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


def render_node(
    key: str, node_type: str, summary: NodeSummary | None, reach: _NodeReach | None, excerpt: str = ""
) -> str:
    """``[type] key — title {attributes} (depth d from anchor: R1 > R2)``, then on the next lines
    ``excerpt`` (the node's first chunk: what a document or episode says) when there is one."""
    text = f"[{node_type}] {key}"
    if summary is not None and summary.title and summary.title != key:
        text += f" — {summary.title}"
    if summary is not None and summary.attributes:
        text += " " + canonical_json(summary.attributes)
    if reach is not None and reach.path:
        text += (
            f" (depth {reach.depth} from {reach.anchor}: {' > '.join(step.relation for step in reach.path)})"
        )
    return f"{text}\n{excerpt}" if excerpt else text


def _path(step: WalkStep, length: int) -> tuple[PathStep, ...]:
    return tuple(
        PathStep(step.path_facts[i], step.path_relations[i], step.path_directions[i], step.path_keys[i + 1])
        for i in range(length)
    )


class TypedContextCompiler:
    """Compiles typed context packs (see the module doc).

    Args:
        database: the process's database.
        tokens: the token counter of the configured encoding.
        kinds: the namespace pack settings (shared cache of the process).
        settings: a `TypedContextSettings` (default preset when None).
    """

    def __init__(
        self,
        database: Database,
        tokens: TokenCounter,
        kinds: KindValidator,
        settings: TypedContextSettings | None = None,
    ) -> None:
        self.database = database
        self.tokens = tokens
        self.kinds = kinds
        self.settings = settings or TYPED_CONTEXT_PRESETS["default"]
        graph = GraphStore(database)
        self.graph = graph
        self.facts = FactStore(graph)
        self.store = ContextStore(database.settings, graph)
        self.traversal = TraversalStore()
        self.chunks = ChunkStore(database.settings)
        self.fitter = PackFitter(
            tokens,
            separator=self.settings.separator,
            min_truncated_tokens=self.settings.min_truncated_tokens,
            max_item_share=self.settings.max_item_share,
        )
        self.pii = PiiGuard(database)

    def compile(self, request: TypedContextRequest) -> TypedContextPack:
        """Compiles the typed pack for ``request`` and records the decisions under its trace id.

        Raises:
            InvalidArgument: field violations named like the CompileTypedContextRequest fields.
            FailedPrecondition: the namespace has no domain pack enabled (reason NO_DOMAIN_PACK).
            Unavailable: the database cannot be reached.
        """
        base, max_depth = self._validate(request)
        as_of = base.as_of or datetime.now(UTC)
        kinds = self.kinds.for_namespace(request.namespace)
        if not kinds.active:
            raise FailedPrecondition(
                f"namespace {request.namespace!r} has no domain pack enabled, so there are no relations to "
                "traverse: enable a pack with DomainPackService.SetNamespaceKinds, or use CompileContext",
                reason="NO_DOMAIN_PACK",
            )
        known_relations = {*kinds.relations, MENTIONS}
        check = ViolationCollector()
        for index, relation in enumerate(request.relations):
            if relation not in known_relations:
                check.add(
                    f"relations[{index}]",
                    f"{relation!r} is not a relation of the namespace's packs nor {MENTIONS}; "
                    f"known: {', '.join(sorted(known_relations))}",
                )
        check.raise_if_any()
        rules = relation_rules(kinds, request.relations)
        candidates = resolve_anchors(
            kinds, base.anchors, base.query, query_limit=self.settings.max_query_anchors
        )
        with self.database.connection() as conn:
            found = self.graph.node_labels(
                conn, request.namespace, [key for _, key, _ in candidates], visibility=request.visibility
            )
            anchors = [ResolvedAnchor(given, key, source, key in found) for given, key, source in candidates]
            start = [anchor.natural_key for anchor in anchors if anchor.found]
            walk = self.traversal.walk(
                conn,
                WalkQuery(
                    namespace=request.namespace,
                    anchors=start,
                    as_of=as_of,
                    max_depth=max_depth,
                    rules=rules,
                    visibility=request.visibility,
                    fanout=self.settings.fanout,
                    row_limit=self.settings.row_limit,
                ),
            )
            reach = self._reach(start, walk.steps)
            summaries = self.store.node_summaries(conn, request.namespace, list(reach))
            excerpts = self.chunks.first_chunks(
                conn, request.namespace, list(reach), visibility=request.visibility
            )
            conflicts = self.facts.conflicting_ids(
                conn, [step.fact for step in walk.steps], visibility=request.visibility
            )
            fit_candidates = self._candidates(reach, summaries, excerpts, walk.steps, conflicts)
            fit_candidates.sort(key=lambda c: (-c.score, c.item.depth, 0 if c.kind == NODE else 1, c.key))
            if request.pii.masks:  # personal data masked before fitting, so the budget holds (seed 000)
                shown = self.pii.start(request.pii)
                for candidate in fit_candidates:
                    summary = summaries.get(candidate.item.natural_key) if candidate.kind == NODE else None
                    marks = summary.pii if summary is not None else PiiMarks()
                    candidate.item = disclose_typed_item(shown, candidate.item, marks)
                    candidate.text = candidate.item.text
                anchors = [disclose_anchor(shown, anchor) for anchor in anchors]
            fitted = self.fitter.fit(fit_candidates, base.token_budget)
            token_count = self.tokens.count(fitted.text)
            assert token_count <= base.token_budget, (token_count, base.token_budget)
            self.store.record_trace(
                conn,
                namespace=request.namespace,
                trace_id=base.trace_id,
                request={
                    "compiler": "typed",
                    "query": base.query,
                    "anchors": list(base.anchors),
                    "resolved_anchors": [anchor.__dict__ for anchor in anchors],
                    "as_of": canonical_instant(as_of),
                    "max_depth": max_depth,
                    "relations": [rule.relation for rule in rules],
                    "walk_rows": walk.rows,
                    "truncated": walk.truncated,
                    "token_budget": base.token_budget,
                    "token_count": token_count,
                    "encoding": self.tokens.encoding_name,
                },
                decisions=fitted.decisions,
                scopes=request.visibility.owner_scopes,
            )
        items = [
            replace(cast(_Candidate, kept.candidate).item, text=kept.text, token_count=kept.token_count)
            for kept in fitted.kept
        ]
        if request.pii.audits:  # a cleared caller: one pii_access event for the kept items' personal data
            exposed = self.pii.start(request.pii)
            for item in items:
                summary = summaries.get(item.natural_key) if item.kind == NODE else None
                disclose_typed_item(exposed, item, summary.pii if summary is not None else PiiMarks())
            self.pii.close(request.namespace, exposed, trace_id=base.trace_id)
        return TypedContextPack(
            items=items,
            text=fitted.text,
            token_count=token_count,
            trace_id=base.trace_id,
            token_budget=base.token_budget,
            dropped_count=fitted.dropped_count,
            as_of=as_of,
            anchors=anchors,
            max_depth=max_depth,
            relations=[rule.relation for rule in rules],
            truncated=walk.truncated,
        )

    # -- steps -------------------------------------------------------------------------------------

    @staticmethod
    def _validate(request: TypedContextRequest) -> tuple[ContextRequest, int]:
        """The shared fields checked as CompileContext checks them, plus max_depth and relations; every
        violation is reported at once."""
        violations = []
        base = ContextRequest(namespace=request.namespace)
        try:
            base = validate_context(
                ContextRequest(
                    namespace=request.namespace,
                    query=request.query,
                    anchors=request.anchors,
                    as_of=request.as_of,
                    token_budget=request.token_budget,
                    trace_id=request.trace_id or "typed-" + uuid.uuid4().hex,
                    visibility=request.visibility,
                )
            )
        except InvalidArgument as error:
            violations += error.violations
        check = ViolationCollector()
        if not 0 <= request.max_depth <= MAX_DEPTH:
            check.add(
                "max_depth",
                f"must be in 0..{MAX_DEPTH} (0 means {DEFAULT_MAX_DEPTH}), got {request.max_depth}",
            )
        if len(request.relations) > MAX_RELATIONS:
            check.add("relations", f"at most {MAX_RELATIONS} relations")
        violations += check.violations
        if violations:
            raise InvalidArgument(violations)
        return base, request.max_depth or DEFAULT_MAX_DEPTH

    @staticmethod
    def _reach(anchors: Sequence[str], steps: Sequence[WalkStep]) -> dict[str, _NodeReach]:
        """Every node on a kept path at its smallest depth (anchors at 0), with the path that reached it
        and the quality of the best fact reaching it at that depth. Every fact on a kept path is itself a
        step (the walk is breadth first and keeps whole prefixes)."""
        facts = {step.fact.fact_id: step.fact for step in steps}
        reach = {key: _NodeReach(0, key, (), 1.0) for key in anchors}
        for step in steps:
            for position in range(1, len(step.path_keys)):
                key = step.path_keys[position]
                row = facts.get(step.path_facts[position - 1])
                value = quality(row) if row is not None else 0.0
                current = reach.get(key)
                if current is None or position < current.depth:
                    reach[key] = _NodeReach(position, step.anchor, _path(step, position), value)
                elif position == current.depth and value > current.quality:
                    current.quality = value
        return reach

    def _candidates(
        self,
        reach: dict[str, _NodeReach],
        summaries: dict[str, NodeSummary],
        excerpts: dict[str, StoredChunk],
        steps: Sequence[WalkStep],
        conflicts: set[str],
    ) -> list[_Candidate]:
        decay = self.settings.distance_decay
        out: list[_Candidate] = []
        for key, node in reach.items():
            summary = summaries.get(key)
            node_type = summary.node_type if summary and summary.node_type else type_of_key(key)
            score = 1.0 if node.depth == 0 else decay**node.depth * max(node.quality, 0.01)
            item = TypedItem(
                kind=NODE,
                key=key,
                text=render_node(
                    key, node_type, summary, node, excerpts[key].text if key in excerpts else ""
                ),
                score=score,
                provenance=ItemProvenance(
                    node_key=key,
                    source_path=summary.source_path if summary else "",
                    observation_ids=tuple(
                        [str(summary.provenance["observation_id"])]
                        if summary and summary.provenance.get("observation_id")
                        else []
                    ),
                    metadata=summary.provenance if summary else {},
                ),
                natural_key=key,
                node_type=node_type,
                depth=node.depth,
                anchor=node.anchor,
                path=node.path,
                relation=node.path[-1].relation if node.path else "",
            )
            out.append(
                _Candidate(
                    kind=NODE,
                    key=key,
                    text=item.text,
                    score=score,
                    truncatable=key in excerpts,  # a long excerpt is capped or cut like a chunk
                    item=item,
                    detail={"depth": node.depth, "anchor": node.anchor},
                )
            )
        for step in steps:
            row = step.fact
            conflict = row.fact_id in conflicts
            far_summary = summaries.get(step.node_key)
            score = decay ** (step.depth - 1) * quality(row)
            item = TypedItem(
                kind=FACT,
                key=row.fact_id,
                text=render_fact(row, conflict=conflict),
                score=score,
                provenance=ItemProvenance(
                    node_key=row.subject_key,
                    source_path=row.source_path,
                    observation_ids=tuple(row.observation_ids),
                    fact_id=row.fact_id,
                ),
                natural_key=step.node_key,
                node_type=(
                    far_summary.node_type
                    if far_summary and far_summary.node_type
                    else type_of_key(step.node_key)
                ),
                depth=step.depth,
                anchor=step.anchor,
                path=_path(step, step.depth),
                relation=row.predicate,
                conflict=conflict,
            )
            out.append(
                _Candidate(
                    kind=FACT,
                    key=row.fact_id,
                    text=item.text,
                    score=score,
                    item=item,
                    detail={
                        "depth": step.depth,
                        "anchor": step.anchor,
                        "evidence": row.evidence,
                        "confidence": row.confidence,
                    },
                )
            )
        return out

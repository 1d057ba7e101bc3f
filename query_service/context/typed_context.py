"""CompileTypedContext: a context pack built by typed traversal from anchors along the relations of the
namespace's domain packs (docs/how-to/domain-packs.md).

Steps:

1. **Packs.** The namespace's enabled packs (`KindValidator`, cached per process for a few seconds). A
   namespace without packs is FAILED_PRECONDITION (reason ``NO_DOMAIN_PACK``): typed traversal is defined
   by pack relations, and CompileContext already serves untyped namespaces; the message names the fix
   (``DomainPackService.SetNamespaceKinds``).
2. **Anchors** (`query_service.context.typed_traversal.resolve_anchors`): the request anchors read through the
   packs' ``kindAliases``, ``aliases`` and ``idPatterns`` (``svc:checkout`` -> ``service:checkout-svc``,
   ``checkout``, ``PROJ-123`` -> ``issue:PROJ-123``), and the identifiers the ``idPatterns`` find in the
   query text. Only keys whose node exists and is visible to the caller start the walk; every candidate
   is reported in ``pack.anchors`` with ``found`` (a hidden node looks exactly like a missing one).
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
5. **Rank.** ``score = distance_decay ** d x confidence x evidence rank / 3``
   (docs/explanation/knowledge-model.md: asserted 3, extracted 2, inferred and derived 1) where ``d`` is the depth of a node and ``depth - 1`` for a fact (a
   fact touching an anchor weighs as much as the anchor); a node's confidence and evidence are those of
   the best fact reaching it; anchors score 1. Ties: smaller depth first, then nodes before facts, then
   key.
6. **Fit and trace.** `PackFitter` (shared with CompileContext) fits the rendered items into
   ``token_budget`` tokens of the configured tokenizer; every decision goes to ``context_traces``
   (`query_service.context.pack.compiler.PackCompiler`).

Personal data (`query_service.pii_output`): for a caller without clearance every item, path and resolved
anchor is masked (a node item whose marks withhold it loses its title and attributes) before fitting, so
the budget holds; a cleared caller's kept items are audited in one ``pii_access`` event under the
pack's trace id (`disclose_typed_item`; `query_service.context.typed_traversal.disclose_anchor`).

What both compilers share is in `query_service.context.pack`; the traversal's relations, anchors and
reach are in `query_service.context.typed_traversal`; this module holds the typed pack, its items and ranks.

Configured as data: `TypedContextSettings` with named presets in `TYPED_CONTEXT_PRESETS`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from dataclasses import field
from dataclasses import replace
from datetime import UTC
from datetime import datetime
from typing import cast

from common.kernel.errors import FailedPrecondition
from common.kernel.identifiers import canonical_json
from common.kernel.pii import PiiMarks
from common.packs.kind_validation import KindValidator
from common.storage.chunks.rows import StoredChunk
from common.storage.chunks.store import ChunkStore
from common.storage.context_store import NodeSummary
from common.storage.database import Database
from common.storage.graph.store import type_of_key
from common.storage.graph.traversal import TraversalStore
from common.storage.graph.traversal import WalkQuery
from common.storage.graph.traversal import WalkStep
from common.storage.memories.liveness import gone_memories
from common.text_models.tokenizer import TokenCounter
from query_service.context.pack.compiler import PackCompiler
from query_service.context.pack.fitting import FitCandidate
from query_service.context.pack.fitting import FitSettings
from query_service.context.pack.items import ContextItem
from query_service.context.pack.items import ContextPack
from query_service.context.pack.items import fact_score
from query_service.context.pack.items import render_fact
from query_service.context.pack.request import ContextRequest
from query_service.context.pack.request import context_request_violations
from query_service.context.pack.request import with_context_defaults
from query_service.context.typed_traversal import NodeReach
from query_service.context.typed_traversal import PathStep
from query_service.context.typed_traversal import ResolvedAnchor
from query_service.context.typed_traversal import check_relations
from query_service.context.typed_traversal import disclose_anchor
from query_service.context.typed_traversal import path_of
from query_service.context.typed_traversal import reach
from query_service.context.typed_traversal import relation_rules
from query_service.context.typed_traversal import resolve_anchors
from query_service.pii_output import PiiDisclosure
from query_service.pii_output import withheld_text
from query_service.provenance import Provenance

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
        fitting: budget fitting (`FitSettings`, one item a line); node and fact lines are short and never
            cut, a node's excerpt is capped or cut like a chunk.
    """

    fanout: int = 50
    row_limit: int = 2000
    max_query_anchors: int = 20
    distance_decay: float = 0.5
    fitting: FitSettings = field(default_factory=lambda: FitSettings(separator="\n"))


TYPED_CONTEXT_PRESETS: dict[str, TypedContextSettings] = {"default": TypedContextSettings()}


@dataclass(frozen=True)
class TypedContextRequest(ContextRequest):
    """A CompileTypedContextRequest in domain form: the shared `ContextRequest` fields plus ``max_depth``
    (0 means 2, at most 4) and ``relations`` (empty: every relation of the packs and MENTIONS)."""

    max_depth: int = 0
    relations: tuple[str, ...] = ()


@dataclass(frozen=True, kw_only=True)
class TypedItem(ContextItem):
    """One item of a typed pack (maps onto memory.v1.TypedContextItem): a `ContextItem` with its place in
    the graph (the node it names or reaches, that node's type, its depth, the anchor and path that
    reached it, and the relation of the last step)."""

    natural_key: str
    node_type: str
    depth: int
    anchor: str
    path: tuple[PathStep, ...] = ()
    relation: str = ""


@dataclass(frozen=True, kw_only=True)
class TypedContextPack(ContextPack):
    """A compiled typed pack (maps onto memory.v1.TypedContextPack): a `ContextPack` of `TypedItem` with the
    anchors resolved, the depth and relations walked, and whether the walk hit its row limit."""

    items: Sequence[TypedItem]
    anchors: list[ResolvedAnchor]
    max_depth: int
    relations: list[str]
    truncated: bool


@dataclass(kw_only=True)
class _Candidate(FitCandidate):
    item: TypedItem

    @classmethod
    def of(cls, item: TypedItem, *, truncatable: bool = False, **detail: object) -> _Candidate:
        """The candidate of ``item``, its ``detail`` recorded with its decision."""
        return cls(
            kind=item.kind,
            key=item.key,
            text=item.text,
            score=item.score,
            truncatable=truncatable,
            item=item,
            detail=dict(detail),
        )


def validate_typed_context(request: TypedContextRequest) -> TypedContextRequest:
    """Checks a request and fills defaults: the shared fields as CompileContext checks them, plus
    ``max_depth`` (0 -> 2) and the number of ``relations``; the trace id defaults to ``typed-...``.

    Raises:
        InvalidArgument: every violation at once, named like the CompileTypedContextRequest fields.
    """
    check = context_request_violations(request)
    if not 0 <= request.max_depth <= MAX_DEPTH:
        check.add(
            "max_depth",
            f"must be in 0..{MAX_DEPTH} (0 means {DEFAULT_MAX_DEPTH}), got {request.max_depth}",
        )
    if len(request.relations) > MAX_RELATIONS:
        check.add("relations", f"at most {MAX_RELATIONS} relations")
    check.raise_if_any()
    return with_context_defaults(
        replace(request, max_depth=request.max_depth or DEFAULT_MAX_DEPTH), trace_prefix="typed-"
    )


def render_node(
    key: str, node_type: str, summary: NodeSummary | None, reach: NodeReach | None, excerpt: str = ""
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


def disclose_typed_item(disclosure: PiiDisclosure, item: TypedItem, marks: PiiMarks) -> TypedItem:
    """An item as ``disclosure``'s caller may see it (`query_service.pii_output`): its rendered text,
    keys, path and provenance masked by patterns; a node item whose node ``marks`` withhold it (``fio``,
    ``address``) is rendered as ``[type] key [withheld: ...]`` without title and attributes."""
    if not disclosure.policy.protection:
        return item
    key = item.provenance.fact_id or item.natural_key
    ids = item.provenance.observation_ids
    if disclosure.withholds(marks):
        text = f"[{item.node_type}] {disclosure.text(item.natural_key)} {withheld_text(marks)}"
    else:
        text = disclosure.text(item.text, marks=marks, key=key, observation_ids=ids)
    return replace(
        item,
        text=text,
        natural_key=disclosure.text(item.natural_key, key=key),
        anchor=disclosure.text(item.anchor, key=key),
        path=tuple(replace(step, node_key=disclosure.text(step.node_key, key=key)) for step in item.path),
        provenance=replace(
            item.provenance,
            node_key=disclosure.text(item.provenance.node_key, key=key),
            source_path=disclosure.text(item.provenance.source_path, key=key),
            metadata=disclosure.value(item.provenance.metadata, key=key, observation_ids=ids),
        ),
    )


class TypedContextCompiler(PackCompiler):
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
        self.settings = settings or TYPED_CONTEXT_PRESETS["default"]
        super().__init__(database, tokens, self.settings.fitting)
        self.kinds = kinds
        self.traversal = TraversalStore()
        self.chunks = ChunkStore(database.settings)

    def compile(self, request: TypedContextRequest) -> TypedContextPack:
        """Compiles the typed pack for ``request`` and records the decisions under its trace id.

        Raises:
            InvalidArgument: field violations named like the CompileTypedContextRequest fields.
            PermissionDenied: an anchor holds personal data and the caller's output is masked (reason
                PII_CLEARANCE_REQUIRED): whether it is found would tell whether it is stored.
            FailedPrecondition: the namespace has no domain pack enabled (reason NO_DOMAIN_PACK).
            Unavailable: the database cannot be reached.
        """
        request = validate_typed_context(request)
        request.pii.refuse_personal_data_lookups(
            {f"anchors[{i}]": key for i, key in enumerate(request.anchors)}
        )
        as_of = request.as_of or datetime.now(UTC)
        kinds = self.kinds.for_namespace(request.namespace)
        if not kinds.active:
            raise FailedPrecondition(
                f"namespace {request.namespace!r} has no domain pack enabled, so there are no relations to "
                "traverse: enable a pack with DomainPackService.SetNamespaceKinds, or use CompileContext",
                reason="NO_DOMAIN_PACK",
            )
        check_relations(kinds, request.relations)
        rules = relation_rules(kinds, request.relations)
        candidates = resolve_anchors(
            kinds, request.anchors, request.query, query_limit=self.settings.max_query_anchors
        )
        with self.database.connection() as conn:
            found = self.graph.node_labels(
                conn, request.namespace, [key for _, key, _ in candidates], visibility=request.visibility
            )
            # a memory hidden by a lossy summary or expired is no anchor (`common.storage.memories.liveness`)
            live = set(found) - gone_memories(conn, request.namespace, list(found))
            anchors = [ResolvedAnchor(given, key, source, key in live) for given, key, source in candidates]
            start = [anchor.natural_key for anchor in anchors if anchor.found]
            walk = self.traversal.walk(
                conn,
                WalkQuery(
                    namespace=request.namespace,
                    anchors=start,
                    as_of=as_of,
                    max_depth=request.max_depth,
                    rules=rules,
                    visibility=request.visibility,
                    fanout=self.settings.fanout,
                    row_limit=self.settings.row_limit,
                ),
            )
            reached = reach(start, walk.steps)
            summaries = self.store.node_summaries(conn, request.namespace, list(reached))
            excerpts = self.chunks.first_chunks(
                conn, request.namespace, list(reached), visibility=request.visibility
            )
            conflicts = self.facts.conflicting_ids(
                conn, [step.fact for step in walk.steps], visibility=request.visibility
            )
            fit_candidates = self._candidates(reached, summaries, excerpts, walk.steps, conflicts)
            fit_candidates.sort(key=lambda c: (-c.score, c.item.depth, 0 if c.kind == NODE else 1, c.key))
            if request.pii.masks:  # personal data masked before fitting, so the budget holds (docs/explanation/knowledge-model.md)
                shown = self.pii.start(request.pii)
                for candidate in fit_candidates:
                    candidate.item = disclose_typed_item(
                        shown, candidate.item, _marks(candidate.item, summaries)
                    )
                    candidate.text = candidate.item.text
                anchors = [disclose_anchor(shown, anchor) for anchor in anchors]
            fitted = self.fitter.fit(fit_candidates, request.token_budget)
        with self.database.primary_connection() as conn:  # the journal is a write: never on a replica
            self.record(
                conn,
                request,
                fitted,
                {
                    "compiler": "typed",
                    "resolved_anchors": [anchor.__dict__ for anchor in anchors],
                    "max_depth": request.max_depth,
                    "relations": [rule.relation for rule in rules],
                    "walk_rows": walk.rows,
                    "truncated": walk.truncated,
                },
            )
        items = [
            replace(cast(_Candidate, kept.candidate).item, text=kept.text, token_count=kept.token_count)
            for kept in fitted.kept
        ]
        self.audit_kept(
            request,
            lambda exposed: [disclose_typed_item(exposed, item, _marks(item, summaries)) for item in items],
        )
        return TypedContextPack(
            items=items,
            **self.pack_totals(request, fitted, as_of),
            anchors=anchors,
            max_depth=request.max_depth,
            relations=[rule.relation for rule in rules],
            truncated=walk.truncated,
        )

    def _candidates(
        self,
        reached: dict[str, NodeReach],
        summaries: dict[str, NodeSummary],
        excerpts: dict[str, StoredChunk],
        steps: Sequence[WalkStep],
        conflicts: set[str],
    ) -> list[_Candidate]:
        decay = self.settings.distance_decay
        out: list[_Candidate] = []
        for key, node in reached.items():
            summary = summaries.get(key)
            node_type = _node_type(key, summaries)
            score = 1.0 if node.depth == 0 else decay**node.depth * max(node.quality, 0.01)
            item = TypedItem(
                kind=NODE,
                key=key,
                text=render_node(
                    key, node_type, summary, node, excerpts[key].text if key in excerpts else ""
                ),
                score=score,
                provenance=Provenance(
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
            # a long excerpt is capped or cut like a chunk
            out.append(_Candidate.of(item, truncatable=key in excerpts, depth=node.depth, anchor=node.anchor))
        for step in steps:
            row = step.fact
            conflict = row.fact_id in conflicts
            score = decay ** (step.depth - 1) * fact_score(row)
            item = TypedItem(
                kind=FACT,
                key=row.fact_id,
                text=render_fact(row, conflict=conflict),
                score=score,
                provenance=Provenance.of_fact(row),
                natural_key=step.node_key,
                node_type=_node_type(step.node_key, summaries),
                depth=step.depth,
                anchor=step.anchor,
                path=path_of(step, step.depth),
                relation=row.predicate,
                conflict=conflict,
            )
            out.append(
                _Candidate.of(
                    item,
                    depth=step.depth,
                    anchor=step.anchor,
                    evidence=row.evidence,
                    confidence=row.confidence,
                )
            )
        return out


def _node_type(key: str, summaries: dict[str, NodeSummary]) -> str:
    """The node's stored type, or the kind prefix of its key when it has none."""
    summary = summaries.get(key)
    return summary.node_type if summary and summary.node_type else type_of_key(key)


def _marks(item: TypedItem, summaries: dict[str, NodeSummary]) -> PiiMarks:
    """The personal data marks of a node item's node (fact items carry none)."""
    summary = summaries.get(item.natural_key) if item.kind == NODE else None
    return summary.pii if summary is not None else PiiMarks()

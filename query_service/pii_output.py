"""Personal data on the read side (seed 000 "Персональные данные", "Аудит-контур"; DESIGN §8; issue 5 §4).

With ``CB_PII_PROTECTION`` on, every output of the query service passes through a `PiiDisclosure`:

* **Caller without PII clearance**: every output string is masked by the detector's patterns
  (`common.pii.mask`: ``[phone]``, ``[email]``, ...), whether or not the item was marked on write —
  texts, titles, headings, contents, natural keys, fact attributes, observation data and assertions,
  provenance metadata (e.g. a commit author's e-mail). An item whose marks name a category the patterns
  cannot find (``fio``, ``address``, or ``pii: true`` without a category; `common.pii.PiiMarks.undetectable`)
  has its text, title and heading **withheld**: replaced by `withheld_text` (``[withheld: fio]``), because
  masking by patterns would hand the name or address out unchanged. Its natural key, provenance and
  scores are still returned (masked by patterns), so a cleared caller can fetch it.
* **Caller with PII clearance** (``pii_clearance`` in the tokens file): output is unmasked; when the
  response contained personal data (a detected category or an explicit undetectable mark), one audit
  event ``action="pii_access"`` is recorded in the request's namespace before the response is returned
  (`PiiGuard.close`): principal, method, the natural keys and observation ids exposed, and the
  categories. If the audit cannot be written the call fails, so no unaudited disclosure happens.

With protection off nothing is masked, withheld or audited (explicit marks are still stored on write).

The policy (`PiiPolicy`) is built by the servicer from the caller and the settings, like
`common.storage.visibility.Visibility`, and passed into the domain reader, which applies it at its output
boundary (one place per output path). In-process callers that pass no policy get `NO_PII_POLICY`: no
masking, no audit. Transport free.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from common.domain.audit import PII_ACCESS_ACTION, AuditEventInput, AuditTrail
from common.auth.principals import Principal
from common.kernel.config import Settings
from common.storage.database import Database
from common.kernel.pii import PiiMarks, detect, detect_value, mask, mask_value
from common.storage.chunk_store import meta_observation_ids

if TYPE_CHECKING:  # the output types import this module; only their shapes are needed here
    from common.domain.observation_view import ObservationView
    from common.storage.chunk_rankings import StoredChunk
    from common.storage.fact_store import FactRow
    from query_service.hybrid_search import SearchHit
    from query_service.sources import SourceView
    from query_service.trace_reader import TraceView
    from query_service.typed_context import ResolvedAnchor, TypedItem

NO_MARKS = PiiMarks()
# Cap on the keys and ids listed in one pii_access event (the audit details are bounded to 64 KiB).
MAX_AUDITED_KEYS = 200
MAX_AUDIT_DETAILS_BYTES = 48 * 1024


def withheld_text(marks: PiiMarks) -> str:
    """What replaces the text, title and heading of a withheld item: ``[withheld: fio, address]``."""
    return f"[withheld: {', '.join(marks.undetectable)}]"


@dataclass(frozen=True)
class PiiPolicy:
    """How one caller's output is treated.

    Attributes:
        protection: ``CB_PII_PROTECTION``.
        clearance: the caller's token has ``pii_clearance``.
        principal: the caller's name (for the audit event).
        method: the RPC, e.g. ``/memory.v1.SourceService/GetSource`` (for the audit event).
    """

    protection: bool = False
    clearance: bool = False
    principal: str = ""
    method: str = ""

    @classmethod
    def for_caller(cls, principal: Principal | None, settings: Settings, method: str) -> PiiPolicy:
        """The policy of an RPC's caller. No principal (in-process) and the development principal hold no
        clearance, so with protection on their output is masked."""
        return cls(
            protection=settings.pii_protection,
            clearance=bool(principal and principal.pii_clearance),
            principal=principal.name if principal else "",
            method=method,
        )

    @property
    def masks(self) -> bool:
        """Output is masked (protection on, caller not cleared)."""
        return self.protection and not self.clearance

    @property
    def audits(self) -> bool:
        """Unmasked personal data in the output is audited (protection on, caller cleared)."""
        return self.protection and self.clearance


NO_PII_POLICY = PiiPolicy()


@dataclass
class PiiDisclosure:
    """Applies a `PiiPolicy` to the pieces of one response and collects what a cleared caller was shown.

    Use one per response: pass every output string or JSON-like value through `text` / `value`, then hand
    it to `PiiGuard.close`.
    """

    policy: PiiPolicy
    categories: set[str] = field(default_factory=set)
    natural_keys: list[str] = field(default_factory=list)
    observation_ids: list[str] = field(default_factory=list)

    def withholds(self, marks: PiiMarks) -> bool:
        """True when an item with ``marks`` is withheld from this caller (see the module doc)."""
        return self.policy.masks and bool(marks.undetectable)

    def text(
        self, text: str, *, marks: PiiMarks = NO_MARKS, key: str = "", observation_ids: Iterable[str] = ()
    ) -> str:
        """``text`` as this caller may see it: unchanged (protection off, or cleared: then noted for the
        audit under ``key`` / ``observation_ids``), masked, or withheld (`withheld_text`)."""
        if not self.policy.protection:
            return text
        if self.policy.masks:
            return withheld_text(marks) if marks.undetectable else mask(text)
        self._note(detect(text), marks, key, observation_ids)
        return text

    def value(
        self, value: Any, *, marks: PiiMarks = NO_MARKS, key: str = "", observation_ids: Iterable[str] = ()
    ) -> Any:
        """A JSON-like value (dict/list/str) treated like `text`, string by string. Withholding does not
        apply here (values are provenance and attributes); callers withhold whole fields themselves."""
        if not self.policy.protection:
            return value
        if self.policy.masks:
            return mask_value(value)
        self._note(detect_value(value), marks, key, observation_ids)
        return value

    def _note(self, found: Iterable[str], marks: PiiMarks, key: str, observation_ids: Iterable[str]) -> None:
        categories = set(found) | set(marks.undetectable)
        if not categories:
            return
        self.categories |= categories
        if key and key not in self.natural_keys:
            self.natural_keys.append(key)
        for observation_id in observation_ids:
            if observation_id and observation_id not in self.observation_ids:
                self.observation_ids.append(observation_id)


class PiiGuard:
    """Applies `PiiPolicy` to each output path and records the ``pii_access`` audit events of cleared
    callers (`common.audit.AuditTrail`). One per reader; thread-safe."""

    def __init__(self, database: Database) -> None:
        self.audit = AuditTrail(database)

    # -- output paths ------------------------------------------------------------------------------

    def search_hits(self, namespace: str, hits: Sequence[SearchHit], policy: PiiPolicy) -> list[SearchHit]:
        """Search hits as ``policy``'s caller may see them (RetrievalService.Search); audited."""
        if not policy.protection:
            return list(hits)
        disclosure = self.start(policy)
        out = [disclose_hit(disclosure, hit) for hit in hits]
        self.close(namespace, disclosure)
        return out

    def source(self, namespace: str, view: SourceView, marks: PiiMarks, policy: PiiPolicy) -> SourceView:
        """A source view (SourceService.GetSource) for ``policy``'s caller; ``marks`` are the node's."""
        if not policy.protection:
            return view
        disclosure = self.start(policy)
        key, ids = view.natural_key, view.observation_ids
        if disclosure.withholds(marks):
            hidden = withheld_text(marks)
            title, content = hidden, hidden
        else:
            title = disclosure.text(view.title, marks=marks, key=key, observation_ids=ids)
            content = disclosure.text(view.content, marks=marks, key=key, observation_ids=ids)
        out = replace(
            view,
            natural_key=disclosure.text(view.natural_key, key=key),
            title=title,
            content=content,
            source_path=disclosure.text(view.source_path, key=key),
            provenance=disclosure.value(view.provenance, key=key, observation_ids=ids),
        )
        self.close(namespace, disclosure)
        return out

    def facts(self, namespace: str, rows: Sequence[FactRow], policy: PiiPolicy) -> list[FactRow]:
        """Facts (FactQueryService.ListFacts) for ``policy``'s caller: subject and object keys, attributes
        and source path are masked by patterns (facts carry no marks)."""
        if not policy.protection:
            return list(rows)
        disclosure = self.start(policy)
        out = [disclose_fact(disclosure, row) for row in rows]
        self.close(namespace, disclosure)
        return out

    def observation(
        self, namespace: str, view: ObservationView, marks: PiiMarks, policy: PiiPolicy
    ) -> ObservationView:
        """An observation (ObservationQueryService.GetObservation) for ``policy``'s caller; ``marks`` are
        its episode's. Withheld: content becomes `withheld_text`, data ``{}`` and assertions ``[]``; every
        other field (participants, source, provenance) is masked by patterns."""
        if not policy.protection:
            return view
        disclosure = self.start(policy)
        fields = dict(view.fields)
        ids = (view.observation_id,)
        if disclosure.withholds(marks):
            fields.update(content=withheld_text(marks), data={}, assertions=[])
            fields = {
                name: value if name in ("content", "data", "assertions") else disclosure.value(value)
                for name, value in fields.items()
            }
        else:
            fields = disclosure.value(fields, marks=marks, observation_ids=ids)
        out = replace(view, fields=fields)
        self.close(namespace, disclosure)
        return out

    def trace(self, view: TraceView, policy: PiiPolicy) -> TraceView:
        """A trace (TraceService.GetTrace) for ``policy``'s caller: audit events' target keys, principals
        and details, and compilations' requests (query, anchors) and decisions are masked by patterns."""
        if not policy.protection:
            return view
        disclosure = self.start(policy)
        entries = []
        for entry in view.entries:
            event, compilation = entry.audit_event, entry.compilation
            if event is not None:
                key = event.target_key
                event = replace(
                    event,
                    target_key=disclosure.text(event.target_key, key=key),
                    principal=disclosure.text(event.principal, key=key),
                    details=disclosure.value(dict(event.details), key=key),
                )
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
        out = replace(view, entries=entries)
        self.close(view.namespace, disclosure, trace_id=view.trace_id)
        return out

    def start(self, policy: PiiPolicy) -> PiiDisclosure:
        """A fresh disclosure for one response."""
        return PiiDisclosure(policy)

    def close(self, namespace: str, disclosure: PiiDisclosure, *, trace_id: str = "") -> None:
        """Records one ``pii_access`` event when a cleared caller was shown personal data in ``namespace``.

        Details: ``method``, ``categories`` (sorted), ``natural_keys`` and ``observation_ids`` (at most
        `MAX_AUDITED_KEYS` each and `MAX_AUDIT_DETAILS_BYTES` together, with ``truncated`` true when more
        were exposed). ``target_key`` is the
        single key or observation id when exactly one was exposed. ``trace_id`` empty: the request id.

        Raises:
            Unavailable: the audit event could not be written (the response must not be returned).
        """
        if not disclosure.policy.audits or not disclosure.categories:
            return
        keys, ids = disclosure.natural_keys, disclosure.observation_ids
        exposed = [*keys, *ids]
        details: dict[str, Any] = {
            "method": disclosure.policy.method,
            "categories": sorted(disclosure.categories),
            "natural_keys": keys[:MAX_AUDITED_KEYS],
            "observation_ids": ids[:MAX_AUDITED_KEYS],
        }
        limit = MAX_AUDITED_KEYS
        # Keys may be long (up to 512 characters): shorten the lists until the details fit the audit limit.
        while limit > 1 and len(json.dumps(details, ensure_ascii=False).encode()) > MAX_AUDIT_DETAILS_BYTES:
            limit //= 2
            details["natural_keys"], details["observation_ids"] = keys[:limit], ids[:limit]
        if len(keys) > limit or len(ids) > limit:
            details["truncated"] = True
        self.audit.record(
            AuditEventInput(
                namespace=namespace,
                action=PII_ACCESS_ACTION,
                trace_id=trace_id,
                principal=disclosure.policy.principal,
                target_key=exposed[0] if len(exposed) == 1 else "",
                details=details,
            )
        )


def disclose_chunk(disclosure: PiiDisclosure, chunk: StoredChunk) -> StoredChunk:
    """A chunk as ``disclosure``'s caller may see it; its marks are in ``chunk.meta`` (written with it)."""
    if not disclosure.policy.protection:
        return chunk
    marks = marks_of(chunk.meta)
    key, ids = chunk.node_key, meta_observation_ids(chunk.meta)
    if disclosure.withholds(marks):
        hidden = withheld_text(marks)
        title, heading, text = hidden, hidden if chunk.heading else "", hidden
    else:
        title = disclosure.text(chunk.title, marks=marks, key=key, observation_ids=ids)
        heading = disclosure.text(chunk.heading, marks=marks, key=key, observation_ids=ids)
        text = disclosure.text(chunk.text, marks=marks, key=key, observation_ids=ids)
    return replace(
        chunk,
        node_key=disclosure.text(chunk.node_key, key=key),
        source_path=disclosure.text(chunk.source_path, key=key),
        title=title,
        heading=heading,
        text=text,
        meta=disclosure.value(chunk.meta, key=key, observation_ids=ids),
    )


def disclose_hit(disclosure: PiiDisclosure, hit: SearchHit) -> SearchHit:
    """A search hit (chunk and provenance) as ``disclosure``'s caller may see it."""
    if not disclosure.policy.protection:
        return hit
    chunk = disclose_chunk(disclosure, hit.chunk)
    provenance = hit.provenance
    return replace(
        hit,
        chunk=chunk,
        provenance=replace(
            provenance,
            node_key=chunk.node_key,
            source_path=disclosure.text(provenance.source_path, key=hit.chunk.node_key),
            metadata=disclosure.value(
                provenance.metadata, key=hit.chunk.node_key, observation_ids=provenance.observation_ids
            ),
        ),
    )


def disclose_fact(disclosure: PiiDisclosure, row: FactRow) -> FactRow:
    """A fact as ``disclosure``'s caller may see it (keys, attributes and source path by patterns)."""
    if not disclosure.policy.protection:
        return row
    ids = tuple(row.observation_ids)
    return replace(
        row,
        subject_key=disclosure.text(row.subject_key, key=row.fact_id, observation_ids=ids),
        object_key=disclosure.text(row.object_key, key=row.fact_id, observation_ids=ids),
        attributes=disclosure.value(row.attributes, key=row.fact_id, observation_ids=ids),
        source_path=disclosure.text(row.source_path, key=row.fact_id, observation_ids=ids),
    )


def disclose_typed_item(disclosure: PiiDisclosure, item: TypedItem, marks: PiiMarks = NO_MARKS) -> TypedItem:
    """A CompileTypedContext item as ``disclosure``'s caller may see it: its rendered text, keys, path and
    provenance by patterns; a node item whose node ``marks`` withhold it (``fio``, ``address``) is
    rendered as ``[type] key [withheld: ...]`` without title and attributes."""
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


def disclose_anchor(disclosure: PiiDisclosure, anchor: ResolvedAnchor) -> ResolvedAnchor:
    """A resolved anchor of CompileTypedContext (the text given and its key) masked by patterns."""
    if not disclosure.policy.protection:
        return anchor
    return replace(
        anchor,
        input=disclosure.text(anchor.input, key=anchor.natural_key),
        natural_key=disclosure.text(anchor.natural_key, key=anchor.natural_key),
    )


def marks_of(props: Mapping[str, Any] | None) -> PiiMarks:
    """The marks stored in node props or chunk meta (`common.pii.PiiMarks.from_props`)."""
    return PiiMarks.from_props(props)


__all__ = [
    "MAX_AUDITED_KEYS",
    "NO_PII_POLICY",
    "PiiDisclosure",
    "PiiGuard",
    "PiiPolicy",
    "disclose_anchor",
    "disclose_chunk",
    "disclose_fact",
    "disclose_hit",
    "disclose_typed_item",
    "marks_of",
    "withheld_text",
]

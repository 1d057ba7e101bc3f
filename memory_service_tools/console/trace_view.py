"""A journaled context compilation (TraceService.GetTrace) as the trace page reads it: the request as
named fields, the budget used, and the candidates' decisions split into kept and dropped, each with the
node (and chunk) it names. The journal's form is `query_service.context.pack.compiler.PackCompiler.record`
(request) and `query_service.context.pack.fitting` (one decision per candidate); fields it adds later
are shown under "other" rather than lost.
"""

from __future__ import annotations

from dataclasses import dataclass
from dataclasses import field
from datetime import datetime
from typing import Any

KEPT = "kept"
# Request fields shown in their own rows; the rest (what a compiler adds, e.g. search_depth) follow.
REQUEST_FIELDS = ("query", "anchors", "as_of", "token_budget", "token_count", "encoding")
# Decision fields shown in their own columns; the rest are the candidate's details.
DECISION_FIELDS = ("kind", "key", "score", "decision", "reason", "tokens")


@dataclass(frozen=True)
class Decision:
    """One candidate's decision.

    Attributes:
        kind: ``chunk``, ``node``, ``fact``, ... as journaled.
        key: the journaled key (``node_key#order`` for a chunk, a natural key, or a fact id).
        node_key: the node the key names ("" for a fact: its decision does not name the subject).
        chunk_order: the chunk's order within ``node_key`` (None for anything else).
        score: the candidate's score.
        kept: True when it went into the pack.
        reason: why it was kept or dropped.
        tokens: its size in tokens.
        details: the other journaled fields (the selection rule, score components, ...), by name.
    """

    kind: str
    key: str
    node_key: str
    chunk_order: int | None
    score: float | None
    kept: bool
    reason: str
    tokens: int | None
    details: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Compilation:
    """One journaled compilation, ready to render (``raw`` keeps the journal as it came)."""

    time: datetime | None
    compilation_id: int
    query: str
    anchors: list[str]
    as_of: str
    token_budget: int
    token_count: int
    encoding: str
    other: dict[str, Any]
    kept: list[Decision]
    dropped: list[Decision]
    hidden: int
    raw: dict[str, Any]

    @property
    def percent(self) -> int:
        """The budget used, in percent (0..100)."""
        return min(100, round(100 * self.token_count / self.token_budget)) if self.token_budget else 0


def _number(value: Any) -> float | None:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def decision_of(journaled: dict[str, Any]) -> Decision:
    """A journaled decision as a `Decision` (a field missing or of another type is left empty)."""
    kind = str(journaled.get("kind", ""))
    key = str(journaled.get("key", ""))
    node_key, order = key, None
    if kind != "fact" and not key.startswith("fact-"):
        head, sep, tail = key.rpartition("#")
        if sep and tail.isdigit():
            node_key, order = head, int(tail)
    else:
        node_key = ""
    tokens = _number(journaled.get("tokens"))
    return Decision(
        kind=kind,
        key=key,
        node_key=node_key,
        chunk_order=order,
        score=_number(journaled.get("score")),
        kept=journaled.get("decision") == KEPT,
        reason=str(journaled.get("reason", "")),
        tokens=int(tokens) if tokens is not None else None,
        details={name: value for name, value in journaled.items() if name not in DECISION_FIELDS},
    )


def compilation_of(
    when: datetime | None,
    compilation_id: int,
    request: dict[str, Any],
    decisions: list[dict[str, Any]],
    hidden: int,
) -> Compilation:
    """The `Compilation` of one journaled entry (``request`` and ``decisions`` as plain dicts)."""
    rows = [decision_of(d) for d in decisions]
    anchors = request.get("anchors")
    budget, used = _number(request.get("token_budget")), _number(request.get("token_count"))
    return Compilation(
        time=when,
        compilation_id=compilation_id,
        query=str(request.get("query", "")),
        anchors=[str(a) for a in anchors] if isinstance(anchors, list) else [],
        as_of=str(request.get("as_of", "")),
        token_budget=int(budget or 0),
        token_count=int(used or 0),
        encoding=str(request.get("encoding", "")),
        other={name: value for name, value in request.items() if name not in REQUEST_FIELDS},
        kept=[d for d in rows if d.kept],
        dropped=[d for d in rows if not d.kept],
        hidden=hidden,
        raw={"request": request, "decisions": decisions},
    )

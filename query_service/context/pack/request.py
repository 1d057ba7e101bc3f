"""The request of a context pack (`ContextRequest`: the fields of CompileContextRequest, which
CompileTypedContextRequest extends), its limits, and the checks and defaults both compilers apply.
Transport free.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from dataclasses import replace
from datetime import UTC
from datetime import datetime
from typing import TypeVar

from common.kernel.errors import ViolationCollector
from common.kernel.identifiers import MAX_KEY_LENGTH
from common.kernel.identifiers import NAMESPACE_PATTERN
from common.storage.visibility import EVERYTHING
from common.storage.visibility import Visibility
from query_service.pii_output import NO_PII_POLICY
from query_service.pii_output import PiiPolicy

DEFAULT_TOKEN_BUDGET = 2000
MAX_TOKEN_BUDGET = 100_000
MAX_ANCHORS = 100
MAX_QUERY_CHARS = 4000
MAX_TRACE_ID_CHARS = 256
MAX_DROPPED_LIMIT = 100

Request = TypeVar("Request", bound="ContextRequest")


@dataclass(frozen=True)
class ContextRequest:
    """A CompileContextRequest in domain form; ``token_budget`` 0 means 2000, ``as_of`` None means now,
    ``trace_id`` empty means a generated one.

    Attributes:
        namespace: the namespace compiled from.
        query: the question (at most 4000 characters); a query or an anchor is required.
        anchors: natural keys the pack is about (at most 100; duplicates are dropped).
        as_of: the instant facts are valid at.
        token_budget: the pack text's size limit in tokens of the configured tokenizer (1..100000).
        trace_id: the journal entry's id in ``context_traces`` (at most 256 characters).
        visibility: the caller's (`common.storage.visibility`): hidden items are never candidates.
        pii: the caller's personal data policy: candidates are masked before fitting.
        dropped_limit: list this many of the best dropped candidates with the pack (0..100; CompileContext).
    """

    namespace: str
    query: str = ""
    anchors: tuple[str, ...] = ()
    as_of: datetime | None = None
    token_budget: int = 0
    trace_id: str = ""
    visibility: Visibility = EVERYTHING
    pii: PiiPolicy = NO_PII_POLICY
    dropped_limit: int = 0


def context_request_violations(request: ContextRequest) -> ViolationCollector:
    """The violations of the shared fields, named like the CompileContextRequest fields, not yet raised:
    a compiler adds those of its own fields, then raises them all at once."""
    check = ViolationCollector()
    if not request.namespace.strip():
        check.add("namespace", "required")
    elif not NAMESPACE_PATTERN.match(request.namespace):
        check.add("namespace", "pattern [A-Za-z0-9][A-Za-z0-9._:-]{0,127}")
    if not request.query.strip() and not request.anchors:
        check.add("query", "a query or at least one anchor is required")
    if len(request.query) > MAX_QUERY_CHARS or "\x00" in request.query:
        check.add("query", f"at most {MAX_QUERY_CHARS} characters, no NUL")
    if len(request.anchors) > MAX_ANCHORS:
        check.add("anchors", f"at most {MAX_ANCHORS} anchors")
    else:
        for index, anchor in enumerate(request.anchors):
            if not anchor.strip() or "\x00" in anchor or len(anchor) > MAX_KEY_LENGTH:
                check.add(
                    f"anchors[{index}]",
                    f"must be a non-empty natural key of at most {MAX_KEY_LENGTH} characters",
                )
    budget = request.token_budget or DEFAULT_TOKEN_BUDGET
    if not 1 <= budget <= MAX_TOKEN_BUDGET:
        check.add(
            "token_budget",
            f"must be in 1..{MAX_TOKEN_BUDGET} (0 means {DEFAULT_TOKEN_BUDGET}), got {request.token_budget}",
        )
    if len(request.trace_id) > MAX_TRACE_ID_CHARS:
        check.add("trace_id", f"at most {MAX_TRACE_ID_CHARS} characters")
    if not 0 <= request.dropped_limit <= MAX_DROPPED_LIMIT:
        check.add("dropped_limit", f"must be in 0..{MAX_DROPPED_LIMIT}, got {request.dropped_limit}")
    return check


def with_context_defaults(request: Request, *, trace_prefix: str) -> Request:
    """``request`` (checked) with its defaults filled: anchors without duplicates, budget 0 -> 2000,
    as_of None -> now, an empty trace id -> ``trace_prefix`` and a random hex id."""
    return replace(
        request,
        anchors=tuple(dict.fromkeys(request.anchors)),
        as_of=request.as_of or datetime.now(UTC),
        token_budget=request.token_budget or DEFAULT_TOKEN_BUDGET,
        trace_id=request.trace_id or trace_prefix + uuid.uuid4().hex,
    )

"""ListFacts in domain form: validation, keyset pages and conflict flags over `FactStore` (seed 000 "Факты").

Transport free; `query_service.query_servicers.FactQueryService` maps it onto memory.v1.
"""

from __future__ import annotations

import binascii
from dataclasses import dataclass, field
from datetime import UTC, datetime

from common.storage.database import Database
from common.kernel.errors import ViolationCollector
from common.storage.fact_store import FactQuery, FactRow, FactStore, decode_cursor, encode_cursor
from common.storage.graph_store import GraphStore
from common.storage.visibility import EVERYTHING, Visibility
from query_service.pii_output import NO_PII_POLICY, PiiGuard, PiiPolicy

DEFAULT_PAGE_SIZE = 100
MAX_PAGE_SIZE = 1000


@dataclass(frozen=True)
class FactListRequest:
    """A ListFactsRequest in domain form; ``page_size`` 0 means 100; ``include_lost`` also returns facts
    whose evidence was lost (every observation behind them redacted or purged), for audit."""

    namespace: str
    subject: str = ""
    predicate: str = ""
    object: str = ""
    as_of: datetime | None = None
    include_history: bool = False
    include_lost: bool = False
    page_size: int = 0
    page_token: str = ""
    visibility: Visibility = EVERYTHING  # the caller's: hidden facts are left out inside the query
    pii: PiiPolicy = NO_PII_POLICY  # the caller's: keys and attributes are masked (or audited) on the way out


@dataclass(frozen=True)
class FactPage:
    """One page of facts with the ids of those in conflict, and the token of the next page ("" at the end)."""

    facts: list[FactRow]
    conflicts: set[str] = field(default_factory=set)
    next_page_token: str = ""


def validate_fact_list(request: FactListRequest) -> FactQuery:
    """Turns a request into a `FactQuery`.

    Raises:
        InvalidArgument: ``namespace`` empty, none of ``subject``/``predicate``/``object``, ``page_size``
            outside 0..1000, or a ``page_token`` this service did not issue.
    """
    check = ViolationCollector()
    if not request.namespace.strip():
        check.add("namespace", "required")
    if not (request.subject or request.predicate or request.object):
        for name in ("subject", "predicate", "object"):
            check.add(name, "at least one of subject, predicate and object is required")
    if not 0 <= request.page_size <= MAX_PAGE_SIZE:
        check.add(
            "page_size",
            f"must be in 0..{MAX_PAGE_SIZE} (0 means {DEFAULT_PAGE_SIZE}), got {request.page_size}",
        )
    after = None
    if request.page_token:
        try:
            after = decode_cursor(request.page_token)
        except (ValueError, TypeError, binascii.Error, UnicodeError):
            check.add("page_token", "malformed: pass the next_page_token of a previous response unchanged")
    check.raise_if_any()
    return FactQuery(
        namespace=request.namespace,
        subject=request.subject,
        predicate=request.predicate,
        object=request.object,
        as_of=request.as_of,
        include_history=request.include_history,
        include_lost=request.include_lost,
        page_size=request.page_size or DEFAULT_PAGE_SIZE,
        after=after,
        visibility=request.visibility,
    )


class FactReader:
    """Reads pages of facts."""

    def __init__(self, database: Database) -> None:
        self.database = database
        self.facts = FactStore(GraphStore(database))
        self.pii = PiiGuard(database)

    def list_facts(self, request: FactListRequest, *, now: datetime | None = None) -> FactPage:
        """One page of the facts matching ``request`` (see the ListFacts comment in the proto).

        Raises:
            InvalidArgument: see `validate_fact_list`.
            Unavailable: the database cannot be reached.
        """
        query = validate_fact_list(request)
        with self.database.connection() as conn:
            rows = self.facts.list(conn, query, now or datetime.now(UTC))
            page = rows[: query.page_size]
            conflicts = self.facts.conflicting_ids(conn, page, visibility=query.visibility)
        token = encode_cursor(page[-1]) if len(rows) > query.page_size and page else ""
        shown = self.pii.facts(request.namespace, page, request.pii)
        return FactPage(facts=shown, conflicts=conflicts, next_page_token=token)

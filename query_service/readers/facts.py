"""ListFacts in domain form (docs/explanation/knowledge-model.md): validation of a
`common.storage.fact_rows.FactQuery`, keyset pages, conflict flags, and the disclosure of facts' personal
data (`disclose_fact`).

Transport free; `query_service.servicers.fact_query_servicer.FactQueryServicer` maps it onto memory.v1.
"""

from __future__ import annotations

from dataclasses import dataclass
from dataclasses import field
from dataclasses import replace
from datetime import UTC
from datetime import datetime

from common.kernel.errors import ViolationCollector
from common.kernel.page_tokens import MalformedPageToken
from common.storage.database import Database
from common.storage.fact_rows import FactQuery
from common.storage.fact_rows import FactRow
from common.storage.fact_rows import decode_cursor
from common.storage.fact_rows import encode_cursor
from common.storage.fact_store import FactStore
from common.storage.graph.store import GraphStore
from query_service.pii_output import NO_PII_POLICY
from query_service.pii_output import PiiDisclosure
from query_service.pii_output import PiiGuard
from query_service.pii_output import PiiPolicy

DEFAULT_PAGE_SIZE = 100
MAX_PAGE_SIZE = 1000


@dataclass(frozen=True)
class FactPage:
    """One page of facts with the ids of those in conflict, and the token of the next page ("" at the end)."""

    facts: list[FactRow]
    conflicts: set[str] = field(default_factory=set)
    next_page_token: str = ""


def validate_fact_query(query: FactQuery) -> FactQuery:
    """Checks a ListFacts query and fills its defaults (``page_size`` 0 -> 100).

    Raises:
        InvalidArgument: ``namespace`` empty, none of ``subject``/``predicate``/``object``, ``page_size``
            outside 0..1000, or a ``page_token`` this service did not issue.
    """
    check = ViolationCollector()
    if not query.namespace.strip():
        check.add("namespace", "required")
    if not (query.subject or query.predicate or query.object):
        for name in ("subject", "predicate", "object"):
            check.add(name, "at least one of subject, predicate and object is required")
    if not 0 <= query.page_size <= MAX_PAGE_SIZE:
        check.add(
            "page_size",
            f"must be in 0..{MAX_PAGE_SIZE} (0 means {DEFAULT_PAGE_SIZE}), got {query.page_size}",
        )
    if query.page_token:
        try:
            decode_cursor(query.page_token)
        except MalformedPageToken:
            check.add("page_token", "malformed: pass the next_page_token of a previous response unchanged")
    check.raise_if_any()
    return replace(query, page_size=query.page_size or DEFAULT_PAGE_SIZE)


def disclose_fact(disclosure: PiiDisclosure, row: FactRow) -> FactRow:
    """A fact as ``disclosure``'s caller may see it (`query_service.pii_output`): subject and object keys,
    attributes and source path masked by patterns (facts carry no marks); audited under the fact id."""
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


class FactReader:
    """Reads pages of facts."""

    def __init__(self, database: Database) -> None:
        self.database = database
        self.facts = FactStore(GraphStore(database))
        self.pii = PiiGuard(database)

    def list_facts(
        self, query: FactQuery, *, pii: PiiPolicy = NO_PII_POLICY, now: datetime | None = None
    ) -> FactPage:
        """One page of the facts matching ``query`` (see the ListFacts comment in the proto).

        Args:
            query: the filters, page size (0 means 100) and page token; ``query.visibility`` is the
                caller's (hidden facts are left out inside the query).
            pii: the caller's personal data policy: keys and attributes are masked (or audited).
            now: the instant "now" (default: the current time).

        Raises:
            InvalidArgument: see `validate_fact_query`.
            PermissionDenied: the subject or object filter holds personal data and ``pii`` masks the
                caller's output (reason PII_CLEARANCE_REQUIRED).
            Unavailable: the database cannot be reached.
        """
        query = validate_fact_query(query)
        pii.refuse_personal_data_lookups({"subject": query.subject, "object": query.object})
        with self.database.connection() as conn:
            rows = self.facts.list(conn, query, now or datetime.now(UTC))
            page = rows[: query.page_size]
            conflicts = self.facts.conflicting_ids(conn, page, visibility=query.visibility)
        token = encode_cursor(page[-1]) if len(rows) > query.page_size and page else ""
        shown = self.pii.disclose(
            query.namespace, pii, lambda disclosure: [disclose_fact(disclosure, row) for row in page]
        )
        return FactPage(facts=shown, conflicts=conflicts, next_page_token=token)

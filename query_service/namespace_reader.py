"""ListNamespaces and GetNamespaceStats in domain form: what is stored, as the caller may see it.
Transport free. Counts are scope-filtered (`common.storage.namespace_stats`); the list holds only the
namespaces the caller may read."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from dataclasses import field

from common.kernel.errors import ViolationCollector
from common.kernel.identifiers import NAMESPACE_PATTERN
from common.kernel.identifiers import NAMESPACE_VIOLATION
from common.kernel.page_tokens import MalformedPageToken
from common.kernel.page_tokens import decode_page_token
from common.kernel.page_tokens import encode_page_token
from common.storage.database import Database
from common.storage.namespace_stats import NamespaceCounts
from common.storage.namespace_stats import NamespaceDetail
from common.storage.namespace_stats import NamespaceStatistics
from common.storage.visibility import EVERYTHING
from common.storage.visibility import Visibility

MAX_PREFIX_CHARS = 128
"""The longest namespace name, so the longest useful prefix."""

DEFAULT_PAGE_SIZE = 100
MAX_PAGE_SIZE = 1000


@dataclass(frozen=True)
class NamespacePage:
    """One page of ListNamespaces: the examined namespaces that hold something the caller sees, and the
    token of the next page ("" on the last)."""

    namespaces: list[NamespaceCounts] = field(default_factory=list)
    next_page_token: str = ""


class NamespaceReader:
    """Reads namespace counts on the read side (replicas when configured)."""

    def __init__(self, database: Database) -> None:
        self.database = database
        self.statistics = NamespaceStatistics(database.settings)

    def list_namespaces(
        self,
        prefix: str = "",
        *,
        page_size: int = 0,
        page_token: str = "",
        visibility: Visibility = EVERYTHING,
        readable: Callable[[str], bool] | None = None,
    ) -> NamespacePage:
        """One page of the namespaces starting with ``prefix`` that hold an item ``visibility`` reaches, by
        name, each with its counts; ``readable`` keeps only the namespaces the caller has the read right on
        (None: every one). The page examines at most ``page_size`` readable namespaces and counts only
        those, so one call never counts the whole database.

        Raises:
            InvalidArgument: ``prefix`` longer than 128 characters, ``page_size`` outside 0..1000, or a
                ``page_token`` not issued for this prefix.
            Unavailable: the database cannot be reached.
        """
        check = ViolationCollector()
        if len(prefix) > MAX_PREFIX_CHARS:
            check.add("prefix", f"at most {MAX_PREFIX_CHARS} characters")
        if not 0 <= page_size <= MAX_PAGE_SIZE:
            check.add(
                "page_size", f"must be in 0..{MAX_PAGE_SIZE} (0 means {DEFAULT_PAGE_SIZE}), got {page_size}"
            )
        after = ""
        if page_token:
            try:
                token_prefix, after = decode_page_token(page_token, length=2)
            except MalformedPageToken:
                token_prefix = None
            if token_prefix != prefix:
                check.add(
                    "page_token",
                    "not a token of a previous response to this prefix: pass next_page_token unchanged",
                )
        check.raise_if_any()
        size = page_size or DEFAULT_PAGE_SIZE
        with self.database.read_connection() as conn:
            # names only first (cheap), filtered by prefix and read right, then counts for one page of them
            candidates = sorted(
                name
                for name in self.statistics.names(conn)
                if name.startswith(prefix) and name > after and (readable is None or readable(name))
            )
            examined = candidates[:size]
            found = self.statistics.list(conn, visibility, examined) if examined else []
        more = len(candidates) > size
        return NamespacePage(
            namespaces=found, next_page_token=encode_page_token([prefix, examined[-1]]) if more else ""
        )

    def namespace_stats(self, namespace: str, *, visibility: Visibility = EVERYTHING) -> NamespaceDetail:
        """The counts of ``namespace`` by kind that ``visibility`` reaches.

        Raises:
            InvalidArgument: ``namespace`` empty or malformed.
            Unavailable: the database cannot be reached.
        """
        check = ViolationCollector()
        if not NAMESPACE_PATTERN.match(namespace):
            check.add("namespace", NAMESPACE_VIOLATION)
        check.raise_if_any()
        with self.database.read_connection() as conn:
            return self.statistics.detail(conn, namespace, visibility)

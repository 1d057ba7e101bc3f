"""ListNamespaces and GetNamespaceStats in domain form: what is stored, as the caller may see it.
Transport free. Counts are scope-filtered (`common.storage.namespace_stats`); the list holds only the
namespaces the caller may read."""

from __future__ import annotations

from collections.abc import Callable

from common.kernel.errors import ViolationCollector
from common.kernel.identifiers import NAMESPACE_PATTERN
from common.storage.database import Database
from common.storage.namespace_stats import NamespaceCounts, NamespaceDetail, NamespaceStatistics
from common.storage.visibility import EVERYTHING, Visibility


MAX_PREFIX_CHARS = 128
"""The longest namespace name, so the longest useful prefix."""


class NamespaceReader:
    """Reads namespace counts on the read side (replicas when configured)."""

    def __init__(self, database: Database) -> None:
        self.database = database
        self.statistics = NamespaceStatistics(database.settings)

    def list_namespaces(
        self,
        prefix: str = "",
        *,
        visibility: Visibility = EVERYTHING,
        readable: Callable[[str], bool] | None = None,
    ) -> list[NamespaceCounts]:
        """The namespaces starting with ``prefix`` that hold an item ``visibility`` reaches, by name, each
        with its counts; ``readable`` keeps only the namespaces the caller has the read right on (None:
        every one).

        Raises:
            InvalidArgument: ``prefix`` longer than 128 characters.
            Unavailable: the database cannot be reached.
        """
        check = ViolationCollector()
        if len(prefix) > MAX_PREFIX_CHARS:
            check.add("prefix", f"at most {MAX_PREFIX_CHARS} characters")
        check.raise_if_any()
        with self.database.read_connection() as conn:
            found = self.statistics.list(conn, visibility, None)
        return [
            counts
            for counts in found
            if counts.namespace.startswith(prefix) and (readable is None or readable(counts.namespace))
        ]

    def namespace_stats(self, namespace: str, *, visibility: Visibility = EVERYTHING) -> NamespaceDetail:
        """The counts of ``namespace`` by kind that ``visibility`` reaches.

        Raises:
            InvalidArgument: ``namespace`` empty or malformed.
            Unavailable: the database cannot be reached.
        """
        check = ViolationCollector()
        if not NAMESPACE_PATTERN.match(namespace):
            check.add("namespace", "required, pattern [A-Za-z0-9][A-Za-z0-9._:-]{0,127}")
        check.raise_if_any()
        with self.database.read_connection() as conn:
            return self.statistics.detail(conn, namespace, visibility)

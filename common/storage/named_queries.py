"""Named static queries: the ``sql/queries/*.sql`` files, parsed once, formatted once per store.

A query file is a sequence of blocks (the layout of procrastinate's ``queries.sql``)::

    -- name: count_chunks_of_node
    -- One line or more saying what the query does and returns.
    SELECT count(*) FROM {chunks} WHERE namespace = %(namespace)s AND node_key = %(node_key)s

Text before the first ``-- name:`` header is the file's own comment. A block's body runs up to the
next header. The ``-- `` lines right after a header are its description.

A body is a `psycopg.sql.SQL` template: ``{observations}``-style placeholders name configurable tables
(`query_placeholders`: identifiers, plus the configured graph name as a literal), so literal braces are
written doubled (``'{{}}'::text[]``). Values are never formatted in: they stay bound parameters
(``%(name)s``, ``%(name)b`` or ``%s``), so a literal ``%`` is written ``%%``.

A store builds its `Queries` once (in its constructor) with its settings' placeholders: every template of
the file is formatted then, so a placeholder the file uses but the store does not give fails at start-up.
Looking up a name the file lacks raises `UnknownQueryError`.

Only queries that are not composed at run time live here; a query with optional filters, variable
column lists, label identifiers or a caller's visibility predicate is composed with `psycopg.sql` where
it is used (each store's docstring says which are which).
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterator
from collections.abc import Mapping
from dataclasses import dataclass
from importlib import resources

from psycopg import sql

from common.kernel.config import Settings
from common.storage.tables import query_placeholders

_HEADER = re.compile(r"^-- name: *(?P<name>\S*) *$", re.MULTILINE)
_NAME = re.compile(r"^[a-z][a-z0-9_]*$")
QUERY_PACKAGE = "common.storage"
QUERY_FOLDER = ("sql", "queries")


class UnknownQueryError(LookupError):
    """A store asked for a query name its query file does not define."""


@dataclass(frozen=True)
class NamedQuery:
    """One block of a query file.

    Attributes:
        name: the header's name (``[a-z][a-z0-9_]*``, unique in its file).
        description: the ``-- `` lines after the header, without the comment marks, joined by spaces.
        text: the body: a `psycopg.sql.SQL` template (see the module doc), stripped.
    """

    name: str
    description: str
    text: str


def parse_named_queries(text: str, *, source: str = "<text>") -> dict[str, NamedQuery]:
    """Parses query file text into name -> `NamedQuery`, in file order.

    Raises:
        ValueError: a header without a valid name, a name defined twice, or a block without a body
            (``source`` names the file in the message).
    """
    headers = list(_HEADER.finditer(text))
    queries: dict[str, NamedQuery] = {}
    for index, header in enumerate(headers):
        name = header.group("name")
        if not _NAME.match(name):
            raise ValueError(f"{source}: invalid query name {name!r} (lower-case letters, digits, _)")
        if name in queries:
            raise ValueError(f"{source}: query {name!r} is defined twice")
        end = headers[index + 1].start() if index + 1 < len(headers) else len(text)
        lines = text[header.end() : end].strip("\n").splitlines()
        description: list[str] = []
        while lines and lines[0].startswith("--"):
            description.append(lines.pop(0).removeprefix("--").strip())
        body = "\n".join(lines).strip()
        if not body:
            raise ValueError(f"{source}: query {name!r} has no body")
        queries[name] = NamedQuery(name=name, description=" ".join(filter(None, description)), text=body)
    return queries


def query_file_names() -> list[str]:
    """The names of the query files shipped in ``common/storage/sql/queries``, sorted."""
    folder = resources.files(QUERY_PACKAGE).joinpath(*QUERY_FOLDER)
    return sorted(entry.name for entry in folder.iterdir() if entry.name.endswith(".sql"))


@functools.cache
def load_query_file(file_name: str) -> Mapping[str, NamedQuery]:
    """The parsed queries of ``sql/queries/<file_name>``, read once per process.

    Raises:
        FileNotFoundError: no such query file.
        ValueError: the file is malformed (`parse_named_queries`).
    """
    path = resources.files(QUERY_PACKAGE).joinpath(*QUERY_FOLDER, file_name)
    return parse_named_queries(path.read_text("utf-8"), source=file_name)


class Queries(Mapping[str, sql.Composed]):
    """The queries of one file formatted with a store's placeholders: name -> statement to execute."""

    def __init__(self, file_name: str, placeholders: Mapping[str, sql.Composable]) -> None:
        """Formats every query of ``file_name`` with ``placeholders``.

        Raises:
            KeyError: a query uses a placeholder ``placeholders`` lacks.
            FileNotFoundError, ValueError: see `load_query_file`.
        """
        self.file_name = file_name
        self._statements = {
            name: sql.SQL(query.text).format(**placeholders)  # type: ignore[arg-type]
            for name, query in load_query_file(file_name).items()
        }

    @classmethod
    def for_settings(cls, file_name: str, settings: Settings) -> Queries:
        """`Queries` of ``file_name`` with the table and graph names of ``settings`` (`query_placeholders`)."""
        return cls(file_name, query_placeholders(settings))

    def __getitem__(self, name: str) -> sql.Composed:
        try:
            return self._statements[name]
        except KeyError:
            raise UnknownQueryError(
                f"query {name!r} is not defined in sql/queries/{self.file_name}"
            ) from None

    def __iter__(self) -> Iterator[str]:
        return iter(self._statements)

    def __len__(self) -> int:
        return len(self._statements)


__all__ = [
    "NamedQuery",
    "Queries",
    "UnknownQueryError",
    "load_query_file",
    "parse_named_queries",
    "query_file_names",
]

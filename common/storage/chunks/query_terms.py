"""The pieces of a search query the rankings of `common.storage.chunks.rankings` look up: its
identifier-like tokens (the trigram ranking), their ILIKE patterns, and lexemes quoted for tsquery input.
"""

from __future__ import annotations

import re

_IDENTIFIER_TOKEN = re.compile(r"[0-9]")
OPENING_QUOTES = ('"', "'", "“", "„", "«", "‘", "‚", "‹", "「", "『")
"""Characters that open a quotation: a whole-query match right after one is a citation (the trigram
ranking of `common.storage.chunks.rankings`)."""
_TRIM_TOKEN = re.compile(r"^[\s\"'«»“”‘’(\[{<,;!?]+|[\s\"'«»“”‘’)\]}>,;!?.]+$")


def identifier_tokens(query: str, *, limit: int = 8) -> list[str]:
    """Identifier-like tokens of ``query`` (``PROJ-1234``, ``1:2.3-4``, ``2.36-9+deb12u4``), deduplicated.

    A token is a whitespace-separated piece, stripped of surrounding quotes and sentence punctuation,
    of at least 3 characters containing a digit. Pieces with only punctuation (``https://github``,
    ``description:``, ``top-level``) matched 50-1,656 chunks of the docs vault each, every one then
    scored with ``word_similarity``: that was the p95 of Search (bench/RESULTS.md (git history)).
    """
    tokens: list[str] = []
    for piece in query.split():
        token = _TRIM_TOKEN.sub("", piece)
        if len(token) >= 3 and _IDENTIFIER_TOKEN.search(token) and token.lower() not in tokens:
            tokens.append(token.lower())
        if len(tokens) >= limit:
            break
    return tokens


def like_pattern(token: str) -> str:
    """``token`` as an ILIKE substring pattern (``%``, ``_`` and backslashes escaped)."""
    escaped = token.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
    return f"%{escaped}%"


def tsquery_literal(lexeme: str) -> str:
    """A lexeme quoted for tsquery input (single quotes doubled, backslashes escaped)."""
    return "'" + lexeme.replace("\\", "\\\\").replace("'", "''") + "'"

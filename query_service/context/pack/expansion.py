"""Pseudo-relevance feedback for CompileContext: the rare lexemes that several of the first round's best
hits share, added to the query for one more search (docs/decisions/0043-feedback-round.md). What was
found, not the answer, widens the query: the words several hits have in common name the topic the
question is about in the conversation's own words ("shelter" for "volunteering"). Transport free."""

from __future__ import annotations

from collections.abc import Sequence

from common.storage.chunks.lexical_scoring import SharedLexeme


def feedback_terms(chunks: int, shared: Sequence[SharedLexeme], *, max_share: float, limit: int) -> list[str]:
    """The at most ``limit`` lexemes of ``shared`` held by at most ``max_share`` of the namespace's
    ``chunks`` chunks, those held by more of the texts first, then the rarer in the namespace (then by
    lexeme, so the choice is stable). A lexeme most chunks hold (a speaker's name, "thank") says nothing
    about a topic."""
    if chunks <= 0 or limit <= 0:
        return []
    ceiling = max_share * chunks
    rare = [lexeme for lexeme in shared if lexeme.documents <= ceiling]
    rare.sort(key=lambda lexeme: (-lexeme.texts, lexeme.documents, lexeme.lexeme))
    return [lexeme.lexeme for lexeme in rare[:limit]]


def expanded_query(query: str, terms: Sequence[str]) -> str:
    """``query`` followed by ``terms``, space separated."""
    return " ".join([query.strip(), *terms])

"""Recording a compilation in ``context_traces`` (`common.storage.context_store.ContextStore.record_trace`),
shared by both compilers: the request (query, anchors, as_of, budget, token count, encoding, and what the
compiler adds), every candidate's decision, and the compiling caller's own scope, so GetTrace
(`query_service.trace_reader`) shows it to that caller. Keys and decisions are stored unmasked; GetTrace
masks them on the way out. Transport free.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import psycopg

from common.kernel.identifiers import canonical_instant
from common.storage.context_store import ContextStore
from common.text_models.tokenizer import TokenCounter
from query_service.context_pack.fitting import FitResult
from query_service.context_pack.request import ContextRequest


class PackJournal:
    """Appends compilations to ``context_traces``.

    Args:
        store: the context store of the process's database.
        tokens: the token counter the pack was fitted with (its encoding is recorded).
    """

    def __init__(self, store: ContextStore, tokens: TokenCounter) -> None:
        self.store = store
        self.tokens = tokens

    def record(
        self,
        conn: psycopg.Connection[Any],
        request: ContextRequest,
        fitted: FitResult,
        details: Mapping[str, Any] | None = None,
    ) -> None:
        """Records one compilation of ``request`` (checked, defaults filled) under its trace id.

        Args:
            conn: the connection to write on (its transaction).
            request: the compiled request.
            fitted: the fitting's result: its decisions and token count are recorded.
            details: the compiler's own request fields (e.g. typed traversal's depth and relations).

        Raises:
            Unavailable: the database cannot be reached.
        """
        as_of = request.as_of
        assert as_of is not None, "record a checked request (with_context_defaults)"
        self.store.record_trace(
            conn,
            namespace=request.namespace,
            trace_id=request.trace_id,
            request={
                **(details or {}),
                "query": request.query,
                "anchors": list(request.anchors),
                "as_of": canonical_instant(as_of),
                "token_budget": request.token_budget,
                "token_count": fitted.token_count,
                "encoding": self.tokens.encoding_name,
            },
            decisions=fitted.decisions,
            scopes=request.visibility.owner_scopes,
        )

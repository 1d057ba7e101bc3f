"""`PackCompiler`: what both compilers hold and do around their own candidates — the stores they read,
the fitter (`query_service.context.pack.fitting.PackFitter`), the PII guard, recording a compilation in
``context_traces`` (`PackCompiler.record`) and auditing a cleared caller's kept items
(`PackCompiler.audit_kept`). Transport free.

The journal (`common.storage.context_store.ContextStore.record_trace`) holds the request (query,
anchors, as_of, budget, token count, encoding, and what the compiler adds), every candidate's decision,
and the compiling caller's own scope, so GetTrace (`query_service.readers.traces`) shows it to that caller.
Keys and decisions are stored unmasked; GetTrace masks them on the way out.
"""

from __future__ import annotations

from collections.abc import Callable
from collections.abc import Mapping
from datetime import datetime
from typing import Any

import psycopg

from common.kernel.identifiers import canonical_instant
from common.storage.context_store import ContextStore
from common.storage.database import Database
from common.storage.fact_store import FactStore
from common.storage.graph.store import GraphStore
from common.text_models.tokenizer import TokenCounter
from query_service.context.pack.fitting import FitResult
from query_service.context.pack.fitting import FitSettings
from query_service.context.pack.fitting import PackFitter
from query_service.context.pack.request import ContextRequest
from query_service.pii_output import PiiDisclosure
from query_service.pii_output import PiiGuard


class PackCompiler:
    """The base of CompileContext's and CompileTypedContext's compilers.

    Args:
        database: the process's database.
        tokens: the token counter of the configured encoding (``Settings.tokenizer_encoding``).
        fitting: the compiler's budget fitting settings.
    """

    def __init__(self, database: Database, tokens: TokenCounter, fitting: FitSettings) -> None:
        self.database = database
        self.tokens = tokens
        self.graph = GraphStore(database)
        self.facts = FactStore(self.graph)
        self.store = ContextStore(database.settings, self.graph)
        self.fitter = PackFitter(tokens, fitting)
        self.pii = PiiGuard(database)

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

    @staticmethod
    def pack_totals(request: ContextRequest, fitted: FitResult, as_of: datetime) -> dict[str, Any]:
        """The `ContextPack` fields both compilers fill alike, from the request, its fitting and the instant
        facts were valid at: text, token_count, trace_id, token_budget, dropped_count and as_of."""
        return {
            "text": fitted.text,
            "token_count": fitted.token_count,
            "trace_id": request.trace_id,
            "token_budget": request.token_budget,
            "dropped_count": fitted.dropped_count,
            "as_of": as_of,
        }

    def audit_kept(self, request: ContextRequest, note: Callable[[PiiDisclosure], object]) -> None:
        """For a cleared caller, one ``pii_access`` event (under the pack's trace id) for the personal data
        ``note`` passes through the disclosure: the kept items' only, as the caller receives them.

        Raises:
            Unavailable: the audit event could not be written (the pack must not be returned).
        """
        if request.pii.audits:
            self.pii.disclose(request.namespace, request.pii, note, trace_id=request.trace_id)

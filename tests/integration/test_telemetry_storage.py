"""Telemetry of the storage and embedding layers on the real database and the real model: psycopg spans
inside the caller's span, the pool gauges, the embedding batch histogram."""

from __future__ import annotations

import pytest
from opentelemetry import trace
from opentelemetry.instrumentation.psycopg import PsycopgInstrumentor
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from prometheus_client import REGISTRY
from prometheus_client import CollectorRegistry

from common.kernel.config import Settings
from common.storage.database import Database
from common.storage.pool_metrics import register_database_metrics
from common.storage.schema import migrations
from common.text_models.embeddings.provider import EmbeddingProvider

pytestmark = pytest.mark.integration


def test_sql_statements_are_spans_of_the_callers_trace(settings: Settings) -> None:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    instrumentor = PsycopgInstrumentor()
    instrumentor.instrument(tracer_provider=provider, skip_dep_check=True)
    try:
        database = Database(settings, prepare=migrations.apply)
        try:
            with (
                provider.get_tracer("test").start_as_current_span("rpc") as parent,
                database.connection() as conn,
            ):
                conn.execute("SELECT 42 AS answer").fetchone()
        finally:
            database.close()
    finally:
        instrumentor.uninstrument()
    statements = [
        span
        for span in exporter.get_finished_spans()
        if "SELECT 42" in str((span.attributes or {}).get("db.statement", ""))
    ]
    assert len(statements) == 1
    (span,) = statements
    assert span.parent is not None and span.parent.span_id == parent.get_span_context().span_id
    assert span.context.trace_id == parent.get_span_context().trace_id
    assert span.kind == trace.SpanKind.CLIENT


def test_pool_gauges_count_connections_in_use(settings: Settings) -> None:
    registry = CollectorRegistry()
    # No connections opened in the background (min size 0): the pool grows only for the callers here.
    database = Database(settings.model_copy(update={"pool_min_size": 0}), prepare=migrations.apply)
    try:
        register_database_metrics("gauge_test", database, registry)
        labels = {"service": "gauge_test", "pool": "primary"}

        def in_use() -> float | None:
            # Both gauges from one scrape (one read of the pool's statistics), so they agree.
            values = {
                sample.name: sample.value
                for family in registry.collect()
                for sample in family.samples
                if sample.labels == labels
            }
            if "memory_db_pool_size" not in values or "memory_db_pool_available" not in values:
                return None
            return values["memory_db_pool_size"] - values["memory_db_pool_available"]

        with database.connection():
            one = in_use()
            with database.connection():
                two = in_use()
                size = registry.get_sample_value("memory_db_pool_size", labels)
        # The first use may also hold a connection for the schema check: count what one more adds.
        assert one is not None and one >= 1 and two == one + 1
        assert size is not None and size >= two
        assert registry.get_sample_value("memory_db_pool_requests_waiting", labels) == 0
    finally:
        database.close()


def test_every_embedding_batch_is_timed(provider: EmbeddingProvider) -> None:
    def count(kind: str) -> float:
        value = REGISTRY.get_sample_value(
            "memory_embedding_batch_seconds_count", {"model": provider.model_id, "input": kind}
        )
        return value or 0.0

    queries, passages = count("query"), count("passage")
    provider.encode_query("when does the billing month close?")
    texts = ["first passage"] * (provider.batch_size + 1)  # two batches
    provider.encode_passages(texts)
    assert count("query") - queries == 1
    assert count("passage") - passages == 2

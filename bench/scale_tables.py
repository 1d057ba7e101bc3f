"""Building the tables of bench/bench_scale.py: the real base through a real ingest service, copies of
its rows (perturbed keys and vectors) in one namespace or spread over many, and the index rebuild around
each bulk change (see bench/bench_scale.py for the method)."""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import grpc
import psycopg
from psycopg import sql

from bench.corpus_loading import CORPORA
from bench.corpus_loading import VAULT
from bench.corpus_loading import debian_observations
from bench.corpus_loading import load_observations
from bench.run_bench import services
from memory_service_grpc_client.memory.v1 import document_service_pb2
from memory_service_grpc_client.memory.v1 import document_service_pb2_grpc
from memory_service_grpc_client.memory.v1 import observation_service_pb2_grpc
from memory_service_tools.markdown_vault import find_documents
from memory_service_tools.markdown_vault import read_document

FAQ = CORPORA / "retrieval-eval"


def ingest_base(namespace: str, *, debian: bool) -> dict[str, Any]:
    """The vault and the FAQ into ``namespace`` (or, with ``debian``, the upload stream into
    ``<namespace>-debian``) through a real ingest service."""
    started = time.perf_counter()
    with services(extra_env={"CB_EMBEDDING_THREADS": "1"}, kinds=("ingest",)) as (ingest, _):
        channel = grpc.insecure_channel(ingest, options=[("grpc.max_send_message_length", 64 << 20)])
        if debian:
            stub = observation_service_pb2_grpc.ObservationServiceStub(channel)
            outcome = load_observations(stub, debian_observations(f"{namespace}-debian"), concurrency=2)
            return {
                "debian_observations": outcome["count"],
                "seconds": round(time.perf_counter() - started, 1),
            }
        documents = document_service_pb2_grpc.DocumentServiceStub(channel)
        chunks = 0
        for path in find_documents(VAULT):
            chunks += documents.Retain(
                read_document(path, VAULT, namespace=namespace), timeout=600
            ).chunk_count
        for line in (FAQ / "debian-faq-docs.jsonl").read_text("utf-8").splitlines():
            doc = json.loads(line)
            request = document_service_pb2.RetainRequest(
                namespace=namespace,
                natural_key=doc["doc_id"],
                type="faq",
                title=doc["title"] or doc["doc_id"],
                content=doc["text"],
            )
            chunks += documents.Retain(request, timeout=600).chunk_count
    return {"chunks": chunks, "seconds": round(time.perf_counter() - started, 1)}


def droppable_indexes(conn: psycopg.Connection[Any], table: str) -> list[tuple[str, str]]:
    """(name, definition) of the table's indexes that back no constraint."""
    return conn.execute(
        "SELECT i.indexname, i.indexdef FROM pg_indexes i WHERE i.tablename = %s AND NOT EXISTS"
        " (SELECT 1 FROM pg_constraint c WHERE c.conindid = (quote_ident(i.schemaname) || '.' ||"
        " quote_ident(i.indexname))::regclass)",
        (table,),
    ).fetchall()


HNSW_ROW_KB = 3.0
"""The HNSW graph's memory per 512-d row during the build (2 KB vector, the neighbour lists of m = 16 and
their tuple headers; pgvector warns "hnsw graph no longer fits into maintenance_work_mem" and builds
several times slower once it does not fit)."""
HNSW_BUILD_MEMORY_CAP_MB = 8192


def hnsw_build_memory_mb(rows: int) -> int:
    """``maintenance_work_mem`` (MB) for building the HNSW index of ``rows`` rows in memory: 1.3 times
    `HNSW_ROW_KB` per row, at least 256 MB and at most `HNSW_BUILD_MEMORY_CAP_MB` (1M rows: 3,809 MB; the
    machine of the 1M run has 23.5 GiB). Set on the benchmark's own session only (its fresh database)."""
    return max(256, min(HNSW_BUILD_MEMORY_CAP_MB, int(rows * HNSW_ROW_KB * 1.3 / 1024)))


@contextmanager
def indexes_rebuilt(
    conn: psycopg.Connection[Any], table: str, rows: int, timings: dict[str, float]
) -> Iterator[None]:
    """Drops the table's non-constraint indexes, yields (the bulk change), rebuilds them (each timed into
    ``timings``, seconds), then VACUUM ANALYZE. The definitions are the migrated schema's own (so the
    full-text and trigram indexes are the namespace-leading GIN indexes of migration 0026)."""
    indexes = droppable_indexes(conn, table)
    for name, _ in indexes:
        conn.execute(sql.SQL("DROP INDEX {}").format(sql.Identifier(name)))
    yield
    memory_mb = hnsw_build_memory_mb(rows)
    conn.execute(sql.SQL("SET maintenance_work_mem = {}").format(sql.Literal(f"{memory_mb}MB")))
    conn.execute(
        sql.SQL("SET max_parallel_maintenance_workers = {}").format(
            sql.Literal(max(0, (os.cpu_count() or 2) - 1))
        )
    )
    timings["maintenance_work_mem_mb"] = memory_mb
    for name, definition in indexes:
        started = time.perf_counter()
        conn.execute(definition)  # type: ignore[arg-type]  # from pg_indexes, as PostgreSQL wrote it
        timings[name] = round(time.perf_counter() - started, 1)
    started = time.perf_counter()
    conn.execute(sql.SQL("VACUUM ANALYZE {}").format(sql.Identifier(table)))
    timings["vacuum_analyze"] = round(time.perf_counter() - started, 1)


# The tenant namespace of a copy (written inside statements that take parameters: ``%%`` is a ``%``).
TENANT = sql.SQL("{q} || '-tenant-' || lpad(({copy} * 10 + abs(hashtext({key})) %% 10)::text, 5, '0')")


def add_copies(
    conn: psycopg.Connection[Any], table: str, q: str, first: int, last: int, rows_last: int, layout: str
) -> None:
    """Copies ``first..last`` of Q's base rows (the last one only its first ``rows_last`` rows)."""
    key = sql.SQL("(s.node_key || '~copy' || c.copy)")
    target = (
        sql.Literal(q)
        if layout == "single"
        else TENANT.format(q=sql.Literal(q), copy=sql.SQL("c.copy"), key=key)
    )
    conn.execute(
        sql.SQL(
            "INSERT INTO {table} (namespace, node_key, chunk_order, node_type, source_path, title, heading, text,"
            " embedding, meta)"
            " SELECT {target}, {key}, s.chunk_order, s.node_type, s.source_path, s.title, s.heading, s.text,"
            " l2_normalize(s.embedding + s.embedding + s.embedding + o.embedding), s.meta"
            " FROM scale_base s CROSS JOIN generate_series(%(first)s::int, %(last)s::int) AS c(copy)"
            " JOIN scale_base o ON o.rn = (s.rn * 7919 + c.copy * 104729) %% (SELECT count(*) FROM scale_base) + 1"
            " WHERE c.copy < %(last)s::int OR s.rn <= %(rows_last)s::int"
        ).format(table=sql.Identifier(table), target=target, key=key),
        {"first": first, "last": last, "rows_last": rows_last},
    )


def move_copies(conn: psycopg.Connection[Any], table: str, q: str, layout: str) -> None:
    """Moves every copy into Q (single) or into its tenant namespace (multi)."""
    copy = sql.SQL("split_part(node_key, '~copy', 2)::int")
    target = (
        sql.Literal(q)
        if layout == "single"
        else TENANT.format(q=sql.Literal(q), copy=copy, key=sql.SQL("node_key"))
    )
    conn.execute(
        sql.SQL("UPDATE {table} SET namespace = {target} WHERE node_key LIKE '%%~copy%%'").format(
            table=sql.Identifier(table), target=target
        ),
        {},
    )

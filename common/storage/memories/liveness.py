"""Which memories derived things may show: the liveness predicates (docs/how-to/memory-records.md).

A memory is *gone for reading* while it is hidden by a lossy summary (``memories.hidden``) or past its
``expires_at`` (the expiry sweep deletes it only after a grace period, `ingest_service.memories.maintenance`,
and expiry itself passes without any write). Recall and the lists leave such rows out in
`common.storage.memories.store.MemoryStore` (their ``include_hidden`` / ``include_expired`` options stay
there); what is *derived* from a memory must not show it either, for any caller, development mode
included (these predicates do not depend on `common.storage.visibility.Visibility`):

* `live_memory_chunk`: its text, chunk 0 of ``{chunks}``, is no Search or CompileContext candidate
  (`common.storage.chunks.rankings` adds it to every ranking);
* `gone_memories`: GetSource reports such a memory's node like an absent one
  (`query_service.readers.sources`);
* `live_memory_node`: the facts whose subject or object is the memory (its ``MENTIONS`` links to entities,
  `ingest_service.memories.enrichment.jobs`) are left out of ListFacts, traversal, CompileContext's facts and the
  trace reads (`common.storage.fact_store.fact_visibility`).

Both are evaluated at statement time (``now()``), by primary key of ``memories``; rows that are not
memories pass at the cost of one comparison (``node_type``; the ``mem-`` key prefix of
`common.kernel.memory_names.memory_id`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import psycopg
from psycopg import sql

MEMORIES = sql.Identifier("memories")
"""The memories table (migration 0015; its name is not configurable, `common.storage.tables`)."""
MEMORY_KEY_PREFIX = "mem-"
"""The prefix of every memory id (`common.kernel.memory_names.memory_id`)."""

_GONE = (
    "EXISTS (SELECT 1 FROM {memories} gone_memory WHERE gone_memory.namespace = {namespace}"
    " AND gone_memory.memory_id = {key} AND (gone_memory.hidden OR gone_memory.expires_at <= now()))"
)


def live_memory_chunk(chunks: sql.Composable) -> sql.Composable:
    """Predicate "this row of the chunks table is not the chunk of a hidden or expired memory".

    Args:
        chunks: the qualifying name of the chunks table in the statement (its identifier or alias); the
            columns are qualified with it because the subquery has columns of the same names.
    """
    return sql.SQL("({c}.node_type <> 'memory' OR NOT " + _GONE + ")").format(
        c=chunks,
        memories=MEMORIES,
        namespace=sql.SQL("{}.namespace").format(chunks),
        key=sql.SQL("{}.node_key").format(chunks),
    )


def live_memory_node(namespace: sql.Composable, natural_key: sql.Composable) -> sql.Composable:
    """Predicate "the node ``natural_key`` of ``namespace`` is not a hidden or expired memory" (a key of
    another node, or of no node, passes).

    Args:
        namespace: the namespace column (qualified).
        natural_key: the node key column (qualified).
    """
    return sql.SQL("(NOT starts_with({key}, {prefix}) OR NOT " + _GONE + ")").format(
        key=natural_key,
        prefix=sql.Literal(MEMORY_KEY_PREFIX),
        memories=MEMORIES,
        namespace=namespace,
    )


def gone_memories(conn: psycopg.Connection[Any], namespace: str, natural_keys: Sequence[str]) -> set[str]:
    """The keys among ``natural_keys`` that are memories of ``namespace`` hidden or expired now."""
    keys = sorted({key for key in natural_keys if key.startswith(MEMORY_KEY_PREFIX)})
    if not keys:
        return set()
    rows = conn.execute(
        sql.SQL(
            "SELECT memory_id FROM {} WHERE namespace = %s AND memory_id = ANY(%s)"
            " AND (hidden OR expires_at <= now())"
        ).format(MEMORIES),
        (namespace, keys),
    ).fetchall()
    return {str(row[0]) for row in rows}


__all__ = ["MEMORIES", "MEMORY_KEY_PREFIX", "gone_memories", "live_memory_chunk", "live_memory_node"]

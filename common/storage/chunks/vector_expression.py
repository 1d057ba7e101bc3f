"""The vector expressions the partial HNSW indexes of the chunks table index (per tenant,
`common.storage.chunks.tenant_vector_indexes`; per owner of memories,
`common.storage.chunks.owner_vector_indexes`) and that a statement orders by to use one."""

from __future__ import annotations

from typing import Any

import psycopg
from psycopg import sql


def tenant_index_expression(embedding_dim: int) -> sql.Composed:
    """What a tenant index indexes: ``(l2_normalize(embedding)::vector(<dim>))`` (HNSW needs the
    dimension in the type). Not the bare column: then only a tenant index can serve an ORDER BY on this
    expression, while for ``embedding <=> q`` the planner preferred the table's HNSW index (its cost
    estimate is lower, its scan slower: 47-95 ms against 22-32 ms for the tenant index, 5k of 110k rows,
    measured). The cosine distance does not depend on a vector's length, so the distances are the same
    (to float rounding)."""
    return sql.SQL("(l2_normalize(embedding)::vector({}))").format(sql.Literal(int(embedding_dim)))


def owner_index_expression(embedding_dim: int) -> sql.Composed:
    """What an owner index of memory chunks indexes: ``(l2_normalize(embedding)::halfvec(<dim>))``, half
    precision: half the pages of the same index on ``vector`` (4.4 against 8.7 MB for 5,000 memories of
    512 dimensions), so more of a recall's walk is found in shared buffers; the candidates' similarity and
    score are still computed from the stored full vectors."""
    return sql.SQL("(l2_normalize(embedding)::halfvec({}))").format(sql.Literal(int(embedding_dim)))


def owner_query_expression(embedding_dim: int) -> sql.Composed:
    """The query vector (parameter ``vector``) in the type of `owner_index_expression`."""
    return sql.SQL("CAST(%(vector)s AS halfvec({}))").format(sql.Literal(int(embedding_dim)))


OWNER_INDEX_OPERATOR_CLASS = "halfvec_cosine_ops"
"""The operator class of `owner_index_expression`."""


def build_partial_hnsw_index(
    conn: psycopg.Connection[Any],
    *,
    name: str,
    chunks: sql.Composable,
    expression: sql.Composable,
    operator_class: str,
    predicate: sql.Composable,
    invalid_index: sql.Composable,
) -> None:
    """``CREATE INDEX CONCURRENTLY`` of the partial HNSW index ``name`` on ``chunks`` (writes go on), after
    dropping an invalid index of that name that an earlier build left half-way (``invalid_index``: the
    statement that finds it by name). Runs outside a transaction (autocommit connection)."""
    index = sql.Identifier(name)
    if conn.execute(invalid_index, (name,)).fetchone():
        conn.execute(sql.SQL("DROP INDEX CONCURRENTLY IF EXISTS {}").format(index))
    conn.execute(
        sql.SQL(
            "CREATE INDEX CONCURRENTLY IF NOT EXISTS {index} ON {chunks}"
            " USING hnsw ({expression} {operator_class}) WHERE {predicate}"
        ).format(
            index=index,
            chunks=chunks,
            expression=expression,
            operator_class=sql.SQL(operator_class),
            predicate=predicate,
        )
    )


__all__ = [
    "OWNER_INDEX_OPERATOR_CLASS",
    "build_partial_hnsw_index",
    "owner_index_expression",
    "owner_query_expression",
    "tenant_index_expression",
]

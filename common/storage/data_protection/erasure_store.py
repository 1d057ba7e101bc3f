"""Storage of erasure: the look-ups and sweeps of an erasure, and its receipts.

The erasure reads here find every row of a namespace that holds a value (a case-insensitive substring
match, ``ILIKE ANY``, over the row's text form), in each table that can hold one: observations, chunks,
the vertices of every AGE label table, context traces, snapshot journals, vault journals, queue jobs.
They are composed with `psycopg.sql` because the label tables are only known at run time; values are
bound parameters (`like_patterns` escapes ``%``, ``_`` and ``\\``). What happens to a matched row is
decided by the domain (`ingest_service.data_protection.erasure`).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import psycopg
from psycopg import sql
from psycopg.rows import dict_row

from common.storage.graph.age import agtype_text
from common.storage.graph.age import decode_agtype
from common.storage.graph.age import label_tables
from common.storage.row_count import fetch_count
from common.storage.tables import ComposingStore

__all__ = ["AUDIT_TYPES", "ErasureStore", "like_patterns"]

# Node types an erasure never deletes: the audit trail is scrubbed of values instead.
AUDIT_TYPES = ("audit_event", "pc_trace")


def like_patterns(values: Sequence[str]) -> list[str]:
    """``%value%`` ILIKE patterns of ``values`` with ``\\``, ``%`` and ``_`` escaped."""
    escaped = (v.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") for v in values)
    return [f"%{v}%" for v in escaped]


class ErasureStore(ComposingStore):
    """SQL of erasure and its receipts (see the module doc)."""

    # -- erasure look-ups ------------------------------------------------------------------------------

    def observations_matching(
        self, conn: psycopg.Connection[Any], namespace: str, patterns: list[str]
    ) -> list[str]:
        """Ids of the observations of ``namespace`` whose row (content, data, assertions, actor, subject,
        source, provenance, status detail) holds a pattern, in recording order."""
        if not patterns:
            return []
        rows = conn.execute(
            sql.SQL(
                "SELECT observation_id FROM {obs} o WHERE namespace = %(ns)s"
                " AND (o.*)::text ILIKE ANY(%(p)s) ORDER BY recorded_order"
            ).format(obs=self.t["observations"]),
            {"ns": namespace, "p": patterns},
        ).fetchall()
        return [str(r[0]) for r in rows]

    def observation_rows(
        self, conn: psycopg.Connection[Any], namespace: str, observation_ids: list[str]
    ) -> list[dict[str, Any]]:
        """The identity columns of observations that an erasure scrubs after the redaction."""
        return list(
            conn.cursor(row_factory=dict_row).execute(
                sql.SQL(
                    "SELECT observation_id, actor, subject, source_external_id, provenance, status_detail"
                    " FROM {obs} WHERE namespace = %s AND observation_id = ANY(%s)"
                ).format(obs=self.t["observations"]),
                (namespace, observation_ids),
            )
        )

    def rewrite_observation_identity(
        self, conn: psycopg.Connection[Any], namespace: str, row: dict[str, Any]
    ) -> None:
        """Writes back the scrubbed identity columns of one observation row (see `observation_rows`)."""
        conn.execute(
            sql.SQL(
                "UPDATE {obs} SET actor = %s::jsonb, subject = %s::jsonb, source_external_id = %s,"
                " provenance = %s::jsonb, status_detail = %s::jsonb"
                " WHERE namespace = %s AND observation_id = %s"
            ).format(obs=self.t["observations"]),
            (
                json.dumps(row["actor"]),
                json.dumps(row["subject"]),
                row["source_external_id"],
                json.dumps(row["provenance"]),
                json.dumps(row["status_detail"]),
                namespace,
                row["observation_id"],
            ),
        )

    def nodes_matching(
        self, conn: psycopg.Connection[Any], namespace: str, patterns: list[str]
    ) -> dict[str, str]:
        """Keys -> node types of the nodes of ``namespace`` that hold a pattern: in their key, in their
        vertex's properties (title, text, props) or in one of their chunks."""
        if not patterns:
            return {}
        found: dict[str, str] = {}
        rows = conn.execute(
            "SELECT natural_key, node_type FROM graph_nodes WHERE namespace = %s"
            " AND natural_key ILIKE ANY(%s)",
            (namespace, patterns),
        ).fetchall()
        found.update({str(k): str(t) for k, t in rows})
        for label in label_tables(conn, self.settings, "v"):
            rows = conn.execute(
                sql.SQL(
                    "SELECT g.natural_key, g.node_type FROM {v} v JOIN graph_nodes g ON g.vertex_id = v.id"
                    " WHERE g.namespace = %s AND ag_catalog.agtype_out(v.properties)::text ILIKE ANY(%s)"
                ).format(v=sql.Identifier(self.graph, label)),
                (namespace, patterns),
            ).fetchall()
            found.update({str(k): str(t) for k, t in rows})
        rows = conn.execute(
            sql.SQL(
                "SELECT DISTINCT c.node_key, coalesce(g.node_type, '') FROM {chunks} c"
                " LEFT JOIN graph_nodes g ON g.namespace = c.namespace AND g.natural_key = c.node_key"
                " WHERE c.namespace = %s AND (c.text ILIKE ANY(%s) OR c.title ILIKE ANY(%s)"
                " OR c.heading ILIKE ANY(%s) OR c.meta::text ILIKE ANY(%s))"
            ).format(chunks=self.t["chunks"]),
            (namespace, patterns, patterns, patterns, patterns),
        ).fetchall()
        for key, node_type in rows:
            found.setdefault(str(key), str(node_type))
        return found

    def audit_vertices_matching(
        self, conn: psycopg.Connection[Any], namespace: str, patterns: list[str]
    ) -> list[tuple[str, dict[str, Any]]]:
        """(label, properties) of the audit event vertices of ``namespace`` that hold a pattern."""
        found: list[tuple[str, dict[str, Any]]] = []
        if not patterns:
            return found
        rows = conn.execute(
            "SELECT DISTINCT label FROM graph_nodes WHERE namespace = %s AND node_type = ANY(%s)",
            (namespace, list(AUDIT_TYPES)),
        ).fetchall()
        for (label,) in rows:
            for (props,) in conn.execute(
                sql.SQL(
                    "SELECT v.properties FROM {v} v JOIN graph_nodes g ON g.vertex_id = v.id"
                    " WHERE g.namespace = %s AND ag_catalog.agtype_out(v.properties)::text ILIKE ANY(%s)"
                ).format(v=sql.Identifier(self.graph, str(label))),
                (namespace, patterns),
            ).fetchall():
                decoded = decode_agtype(props)
                if isinstance(decoded, dict):
                    found.append((str(label), decoded))
        return found

    def memories_of(
        self, conn: psycopg.Connection[Any], namespace: str, *, user_id: str = "", keys: Sequence[str] = ()
    ) -> list[dict[str, Any]]:
        """Memory rows (memory_id, user_id, is_summary, summary_id) of one user or of ``keys``, locked."""
        return list(
            conn.cursor(row_factory=dict_row).execute(
                sql.SQL(
                    "SELECT memory_id, user_id, is_summary, summary_id FROM {m}"
                    " WHERE namespace = %s AND (user_id = %s OR memory_id = ANY(%s))"
                    " ORDER BY memory_id FOR UPDATE"
                ).format(m=self.t["memories"]),
                (namespace, user_id or None, list(keys)),
            )
        )

    def memory_namespaces_of_user(self, conn: psycopg.Connection[Any], base: str, user_id: str) -> list[str]:
        """The memory namespaces (``base`` or its ``base_*`` projects) where ``user_id`` has memories."""
        rows = conn.execute(
            sql.SQL(
                "SELECT DISTINCT namespace FROM {m} WHERE user_id = %s AND (namespace = %s OR namespace LIKE %s)"
            ).format(m=self.t["memories"]),
            (user_id, base, like_patterns([base + "_"])[0][1:]),
        ).fetchall()
        return [str(r[0]) for r in rows]

    def owner_scopes(self, conn: psycopg.Connection[Any], namespace: str, memory_ids: list[str]) -> list[str]:
        """The owner scopes of the memories ``memory_ids``."""
        rows = conn.execute(
            sql.SQL(
                "SELECT DISTINCT user_scope FROM {m} WHERE namespace = %s AND memory_id = ANY(%s)"
            ).format(m=self.t["memories"]),
            (namespace, memory_ids),
        ).fetchall()
        return sorted(str(r[0]) for r in rows)

    def count_chunks_of_nodes(
        self, conn: psycopg.Connection[Any], namespace: str, keys: list[str], key_prefixes: list[str]
    ) -> int:
        """How many chunks belong to ``keys`` or to keys starting with one of ``key_prefixes``."""
        if not keys and not key_prefixes:
            return 0
        prefixes = [p[1:] for p in like_patterns(key_prefixes)]  # "prefix%"
        return fetch_count(
            conn,
            sql.SQL(
                "SELECT count(*) FROM {chunks} WHERE namespace = %s AND (node_key = ANY(%s) OR node_key LIKE ANY(%s))"
            ).format(chunks=self.t["chunks"]),
            (namespace, keys, prefixes),
        )

    def count_facts(self, conn: psycopg.Connection[Any], namespace: str) -> int:
        """How many fact rows ``namespace`` has."""
        query = sql.SQL("SELECT count(*) FROM {f} WHERE namespace = %s").format(f=self.t["facts"])
        return fetch_count(conn, query, (namespace,))

    def fold_lexeme_statistics(self, conn: psycopg.Connection[Any], namespace: str) -> None:
        """Folds the namespace's pending lexeme-count deltas into its statistics and drops the lexemes
        no chunk holds any more (what the chunks trigger does on one write in sixteen), so no term of
        deleted text stays behind."""
        conn.execute("SELECT pg_advisory_xact_lock(1952805748, hashtext(%s))", (namespace,))
        conn.execute(
            sql.SQL(
                "WITH moved AS (DELETE FROM {deltas} WHERE namespace = %(ns)s RETURNING lexeme, documents, lengths)"
                " INSERT INTO {terms} AS s (namespace, lexeme, documents, lengths)"
                " SELECT %(ns)s, lexeme, sum(documents), sum(lengths) FROM moved GROUP BY lexeme ORDER BY lexeme"
                " ON CONFLICT (namespace, lexeme) DO UPDATE"
                " SET documents = s.documents + excluded.documents, lengths = s.lengths + excluded.lengths"
            ).format(deltas=self.t["chunk_term_deltas"], terms=self.t["chunk_terms"]),
            {"ns": namespace},
        )
        conn.execute(
            sql.SQL("DELETE FROM {terms} WHERE namespace = %s AND documents = 0 AND lengths = 0").format(
                terms=self.t["chunk_terms"]
            ),
            (namespace,),
        )

    def summary_members(self, conn: psycopg.Connection[Any], namespace: str, summary_id: str) -> list[str]:
        """Ids of the memories a summary covers."""
        rows = conn.execute(
            sql.SQL("SELECT memory_id FROM {m} WHERE namespace = %s AND summary_id = %s").format(
                m=self.t["memories"]
            ),
            (namespace, summary_id),
        ).fetchall()
        return [str(r[0]) for r in rows]

    def delete_rows_matching(
        self, conn: psycopg.Connection[Any], table: str, namespace: str, patterns: list[str]
    ) -> int:
        """Deletes the rows of ``table`` (context_traces, vault_documents, vault_runs) of ``namespace``
        whose text form holds a pattern; returns how many."""
        if not patterns:
            return 0
        cursor = conn.execute(
            sql.SQL("DELETE FROM {t} x WHERE x.namespace = %s AND (x.*)::text ILIKE ANY(%s)").format(
                t=self.t[table]
            ),
            (namespace, patterns),
        )
        return cursor.rowcount

    def delete_staged_changes_matching(
        self, conn: psycopg.Connection[Any], namespace: str, patterns: list[str]
    ) -> int:
        """Deletes the change events this transaction has staged but not yet numbered (the session's
        ``change_feed_staged`` table, sql/0037_change_feed_write_cost.sql) of ``namespace`` whose text
        form holds a pattern, so the commit does not publish them; returns how many."""
        if not patterns:
            return 0
        staged = conn.execute("SELECT to_regclass('pg_temp.change_feed_staged')").fetchone()
        if staged is None or staged[0] is None:
            return 0
        cursor = conn.execute(
            "DELETE FROM pg_temp.change_feed_staged x WHERE x.namespace = %s AND (x.*)::text ILIKE ANY(%s)",
            (namespace, patterns),
        )
        return cursor.rowcount

    def delete_vault_rows_of_nodes(
        self, conn: psycopg.Connection[Any], namespace: str, keys: Sequence[str]
    ) -> int:
        """Deletes the vault journal rows of deleted nodes."""
        cursor = conn.execute(
            sql.SQL("DELETE FROM {t} WHERE namespace = %s AND natural_key = ANY(%s)").format(
                t=self.t["vault_documents"]
            ),
            (namespace, list(keys)),
        )
        return cursor.rowcount

    def delete_snapshot_items_matching(
        self, conn: psycopg.Connection[Any], namespace: str, patterns: list[str]
    ) -> int:
        """Deletes the snapshot journal items of ``namespace`` whose key or hash text holds a pattern."""
        if not patterns:
            return 0
        cursor = conn.execute(
            sql.SQL(
                "DELETE FROM {items} i USING {snapshots} s WHERE i.snapshot_row = s.id AND s.namespace = %s"
                " AND (i.*)::text ILIKE ANY(%s)"
            ).format(items=self.t["snapshot_items"], snapshots=self.t["snapshots"]),
            (namespace, patterns),
        )
        return cursor.rowcount

    def delete_jobs_matching(self, conn: psycopg.Connection[Any], patterns: list[str]) -> int:
        """Deletes queue jobs (procrastinate) not running whose arguments hold a pattern (their events go
        with them); returns how many. No-op when the queue's schema is absent."""
        if not patterns:
            return 0
        if conn.execute("SELECT to_regclass('procrastinate_jobs')").fetchone() == (None,):
            return 0
        conn.execute(
            "DELETE FROM procrastinate_events e USING procrastinate_jobs j WHERE e.job_id = j.id"
            " AND j.status <> 'doing' AND j.args::text ILIKE ANY(%s)",
            (patterns,),
        )
        cursor = conn.execute(
            "DELETE FROM procrastinate_jobs WHERE status <> 'doing' AND args::text ILIKE ANY(%s)", (patterns,)
        )
        return cursor.rowcount

    def audit_rows_matching(
        self, conn: psycopg.Connection[Any], namespace: str, patterns: list[str]
    ) -> list[dict[str, Any]]:
        """The rows of the audit list (``audit_events``, what ListAuditEvents reads) of ``namespace`` that
        hold a pattern."""
        if not patterns:
            return []
        rows = conn.execute(
            sql.SQL(
                "SELECT event_id, principal, target_key, trace_id, scopes, props FROM {t} x"
                " WHERE x.namespace = %s AND (x.*)::text ILIKE ANY(%s)"
            ).format(t=self.t["audit_events"]),
            (namespace, patterns),
        ).fetchall()
        names = ("event_id", "principal", "target_key", "trace_id", "scopes", "props")
        return [dict(zip(names, row, strict=True)) for row in rows]

    def replace_audit_row(self, conn: psycopg.Connection[Any], namespace: str, row: dict[str, Any]) -> None:
        """Writes back one audit list row scrubbed of erased values (same event id)."""
        conn.execute(
            sql.SQL(
                "UPDATE {t} SET principal = %s, target_key = %s, trace_id = %s, scopes = %s, props = %s::jsonb"
                " WHERE namespace = %s AND event_id = %s"
            ).format(t=self.t["audit_events"]),
            (
                row["principal"],
                row["target_key"],
                row["trace_id"],
                list(row["scopes"]),
                json.dumps(row["props"], ensure_ascii=False),
                namespace,
                row["event_id"],
            ),
        )

    def replace_vertex_properties(
        self, conn: psycopg.Connection[Any], label: str, namespace: str, key: str, properties: dict[str, Any]
    ) -> None:
        """Replaces the properties of one vertex (an audit event scrubbed of erased values)."""
        conn.execute(
            sql.SQL(
                "UPDATE {v} v SET properties = %s::ag_catalog.agtype FROM graph_nodes g"
                " WHERE g.vertex_id = v.id AND g.namespace = %s AND g.natural_key = %s"
            ).format(v=sql.Identifier(self.graph, label)),
            (agtype_text(properties), namespace, key),
        )

    # -- receipts --------------------------------------------------------------------------------------

    def insert_receipt(self, conn: psycopg.Connection[Any], receipt: dict[str, Any]) -> None:
        """Stores an erasure receipt (keys: the columns of ``erasure_receipts``)."""
        conn.execute(
            "INSERT INTO erasure_receipts (receipt_id, namespace, erase_time, principal, selector_kind, salt,"
            " match_hashes, counts, audit_event_id) VALUES (%(receipt_id)s, %(namespace)s, %(erase_time)s,"
            " %(principal)s, %(selector_kind)s, %(salt)s, %(match_hashes)s::jsonb, %(counts)s::jsonb,"
            " %(audit_event_id)s)",
            {
                **receipt,
                "match_hashes": json.dumps(receipt["match_hashes"]),
                "counts": json.dumps(receipt["counts"]),
            },
        )

    def get_receipt(
        self, conn: psycopg.Connection[Any], namespace: str, receipt_id: str
    ) -> dict[str, Any] | None:
        """One receipt of ``namespace``, or None."""
        return (
            conn.cursor(row_factory=dict_row)
            .execute(
                "SELECT * FROM erasure_receipts WHERE namespace = %s AND receipt_id = %s",
                (namespace, receipt_id),
            )
            .fetchone()
        )

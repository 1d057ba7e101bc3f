"""Transaction-scoped advisory locks on node keys, taken in one global order (docs/explanation/architecture.md concurrent
writers).

Two write transactions that upsert the same graph nodes in different orders deadlock: each waits for the
other's uncommitted index tuple of ``(namespace, natural_key)`` in ``graph_nodes``. PostgreSQL detects it
after ``deadlock_timeout`` and aborts one, which `common.storage.database.Database.run_transaction` then re-runs from the
start; with several RecordObservations batches in flight (``cb observe --concurrency``) that happened
dozens of times per debian load and exhausted the retries of a batch (measured: 28 retries and one
INTERNAL failure in one load of the 5,415 debian observations with 4 calls in flight).

`lock_node_keys` takes ``pg_advisory_xact_lock`` on a 64-bit hash of every ``(namespace, key)`` a
transaction is about to write, sorted, before it writes anything. Transactions sharing a key then wait
for each other in the same order (no cycle, so no deadlock); transactions with disjoint keys do not wait
at all. The locks are released at commit or rollback. A hash collision only makes two unrelated keys
share a lock (a wait, never a wrong result).
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from typing import Any

import psycopg

from common.storage.named_queries import Queries

# Distinguishes these locks from the other advisory locks of the schema (migrations, labels, snapshots),
# which use small keys or keys derived from other text.
_DOMAIN = b"memory-service/node-key\x1f"
_QUERIES = Queries("key_locks.sql", {})


def node_key_lock_id(namespace: str, key: str) -> int:
    """The signed 64-bit advisory lock id of ``(namespace, key)`` (BLAKE2b of both, 8 bytes)."""
    digest = hashlib.blake2b(_DOMAIN + namespace.encode() + b"\x1f" + key.encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big", signed=True)


def lock_node_keys(conn: psycopg.Connection[Any], keys: Iterable[tuple[str, str]]) -> int:
    """Takes the transaction-scoped advisory locks of ``(namespace, natural_key)`` pairs in ascending id
    order, waiting for transactions that hold any of them; returns how many distinct locks were taken.

    Must run inside the caller's transaction before its first write to those keys (a lock taken after a
    write does not order that write).
    """
    ids = sorted({node_key_lock_id(namespace, key) for namespace, key in keys})
    if ids:
        conn.execute(_QUERIES["lock_node_key_ids"], (ids,))
    return len(ids)

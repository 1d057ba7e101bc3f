"""The primary's WAL position after a write: the consistency token of a write RPC (DESIGN §10).

`common.kernel.consistency` encodes it for clients; `common.storage.read_routing` makes reads wait for it.
"""

from __future__ import annotations

from common.kernel.consistency import parse_lsn
from common.storage.database import Database
from common.storage.named_queries import Queries

__all__ = ["current_wal_position"]

_QUERIES = Queries("replication.sql", {})


def current_wal_position(database: Database) -> int:
    """The primary's current WAL position (integer form of ``pg_lsn``), taken on a pooled connection.

    Called after a write transaction committed, the result is at or past that commit, so a database
    that replayed it sees the write.

    Raises:
        Unavailable: the database cannot be reached.
    """
    with database.connection() as conn:
        row = conn.execute(_QUERIES["current_wal_position"]).fetchone()
    assert row is not None
    return parse_lsn(str(row[0]))

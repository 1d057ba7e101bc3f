"""The journal of vault runs and the documents of each namespace's vault (migration 0013).

`VaultStore` holds the SQL of ``vault_runs`` and ``vault_documents`` (named queries in
``sql/queries/vault.sql``), the namespace lock that serialises runs (`VaultStore.namespace_lock`), and the
two graph writes only a vault sweep makes: claiming a completed placeholder for the vault and reducing a
swept node that carries agent data back to a placeholder.
"""

from __future__ import annotations

import hashlib
import json
import logging
import time
from collections.abc import Callable
from collections.abc import Iterator
from collections.abc import Sequence
from contextlib import closing
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import psycopg
from psycopg import sql
from psycopg.types.json import Jsonb

from common.kernel.config import Settings
from common.kernel.errors import Unavailable
from common.kernel.identifiers import canonical_instant
from common.storage.graph.age import agtype_text
from common.storage.graph.store import GraphStore
from common.storage.graph.store import NodeWrite
from common.storage.named_queries import Queries
from common.storage.row_count import fetch_count

log = logging.getLogger(__name__)
_LOCK_DOMAIN = b"memory-service/vault-run\x1f"
LOCK_POLL_SECONDS = 0.2


def vault_lock_id(namespace: str) -> int:
    """The signed 64-bit advisory lock id of the vault runs of ``namespace`` (BLAKE2b, 8 bytes)."""
    digest = hashlib.blake2b(_LOCK_DOMAIN + namespace.encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big", signed=True)


@dataclass(frozen=True)
class StoredVaultDocument:
    """A row of ``vault_documents`` with the current state of its node.

    Attributes:
        natural_key: the document's key.
        source_path: path relative to the vault's root.
        fingerprint: sha256 of path, text and provenance as last projected.
        indexed_at: when this text was first projected.
        node_hash: the node's props hash right after that projection.
        seen_run: the last run that saw the document.
        links: the link and relation targets as written (``{"links": [...], "relations": [...]}``).
        resolved: what they resolved to (``{"LINKS_TO": [...], "relations": [...]}``).
        current_hash: the node's props hash now (None: the node is gone).
        placeholder: the node is a placeholder now.
        origin: the node's origin now (``vault`` while the vault owns it; None: the node is gone).
        scopes: the node's visibility scopes now (None: the node is gone).
    """

    natural_key: str
    source_path: str
    fingerprint: str
    indexed_at: datetime
    node_hash: str | None
    seen_run: str
    links: dict[str, Any]
    resolved: dict[str, Any]
    current_hash: str | None
    placeholder: bool | None
    origin: str | None
    scopes: list[str] | None

    @property
    def node_intact(self) -> bool:
        """The node still holds what the vault wrote (nobody rewrote it through the API since)."""
        return self.current_hash is not None and self.current_hash == self.node_hash and not self.placeholder


class VaultStore:
    """SQL of vault runs; stateless apart from the formatted queries, safe to share."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.queries = Queries.for_settings("vault.sql", settings)

    # -- the namespace lock ------------------------------------------------------------------------

    @contextmanager
    def namespace_lock(self, namespace: str, *, still_wanted: Callable[[], bool]) -> Iterator[None]:
        """Holds the lock of ``namespace``'s vault runs while the block runs, waiting for a run in progress.

        The lock is session-level, on a connection of its own (not the pool's, and in autocommit, so no
        transaction stays open for the run): when the process dies the connection closes and the lock is
        released. While waiting, ``still_wanted`` is asked every `LOCK_POLL_SECONDS`.

        Raises:
            Unavailable: the database cannot be reached, or ``still_wanted`` turned false while waiting
                (reason ``VAULT_RUN_ABANDONED``), or the lock's connection broke during a block that
                itself succeeded (reason ``VAULT_LOCK_LOST``: the lock ended with its session, so another
                run may have overlapped; what the block committed stays, and running it again is safe). An
                error of the block itself is never replaced by the failure to release the lock.
        """
        lock_id = vault_lock_id(namespace)
        try:
            conn = psycopg.connect(self.settings.database_url, autocommit=True, connect_timeout=5)
        except psycopg.OperationalError as error:
            raise Unavailable("database unavailable; retry later") from error
        with closing(conn):
            try:
                while True:
                    row = conn.execute(self.queries["try_lock_vault_namespace"], (lock_id,)).fetchone()
                    if row and row[0]:
                        break
                    if not still_wanted():
                        raise Unavailable(
                            f"the run was abandoned while waiting for another vault run of {namespace}",
                            reason="VAULT_RUN_ABANDONED",
                        )
                    time.sleep(LOCK_POLL_SECONDS)
            except psycopg.OperationalError as error:
                raise Unavailable("database unavailable; retry later") from error
            try:
                yield
            except BaseException:
                self._release(conn, lock_id, namespace, block_succeeded=False)
                raise
            self._release(conn, lock_id, namespace, block_succeeded=True)

    def _release(
        self, conn: psycopg.Connection[Any], lock_id: int, namespace: str, *, block_succeeded: bool
    ) -> None:
        """Releases the lock of `namespace_lock`; a broken connection already released it (its session
        ended), which is an error only after a block that succeeded (see `namespace_lock`)."""
        try:
            conn.execute(self.queries["unlock_vault_namespace"], (lock_id,))
        except psycopg.Error as error:
            log.warning("the vault lock of %s was lost with its connection: %s", namespace, error)
            if block_succeeded:
                raise Unavailable(
                    f"the connection holding the vault lock of {namespace} broke during the run, so another "
                    "run may have overlapped it; what the run wrote is kept, run it again",
                    reason="VAULT_LOCK_LOST",
                ) from error

    # -- runs ----------------------------------------------------------------------------------------

    def start_run(
        self,
        conn: psycopg.Connection[Any],
        *,
        run_id: str,
        namespace: str,
        source: str,
        branch: str,
        commit_sha: str,
        now: datetime,
    ) -> None:
        """Journals run ``run_id`` as running."""
        conn.execute(self.queries["insert_vault_run"], (run_id, namespace, source, branch, commit_sha, now))

    def close_abandoned_runs(
        self, conn: psycopg.Connection[Any], namespace: str, closing_run_id: str, now: datetime
    ) -> list[str]:
        """Journals as ``interrupted`` (finished at ``now``, report gaining ``abandoned: true`` and
        ``closed_by_run``) the runs of ``namespace`` still marked running; returns their run ids.

        Called by a run that holds the namespace's lock (`namespace_lock`), so none of them can still be
        in progress: a run holds that lock from before its journal row until after its end, and the lock
        ends with its process (a crash, a SIGKILL, a lost node leave the row ``running`` otherwise).
        """
        rows = conn.execute(
            self.queries["close_abandoned_vault_runs"], (now, closing_run_id, namespace)
        ).fetchall()
        return [str(row[0]) for row in rows]

    def finish_run(
        self, conn: psycopg.Connection[Any], run_id: str, status: str, report: dict[str, Any], now: datetime
    ) -> None:
        """Records the end of run ``run_id``: ``status`` (completed, interrupted, failed) and its report."""
        conn.execute(self.queries["finish_vault_run"], (status, now, Jsonb(report), run_id))

    def get_run(self, conn: psycopg.Connection[Any], run_id: str) -> dict[str, Any] | None:
        """The journal row of ``run_id`` (run_id, namespace, status, started_at, finished_at, report)."""
        row = conn.execute(self.queries["vault_run_by_id"], (run_id,)).fetchone()
        if row is None:
            return None
        names = ("run_id", "namespace", "status", "started_at", "finished_at", "report")
        return dict(zip(names, row))

    # -- documents -----------------------------------------------------------------------------------

    def documents(self, conn: psycopg.Connection[Any], namespace: str) -> dict[str, StoredVaultDocument]:
        """Natural key -> stored document of ``namespace``'s vault."""
        rows = conn.execute(self.queries["vault_documents_of_namespace"], (namespace,)).fetchall()
        return {str(row[0]): StoredVaultDocument(*row) for row in rows}

    def record_document(
        self,
        conn: psycopg.Connection[Any],
        *,
        namespace: str,
        natural_key: str,
        source_path: str,
        fingerprint: str,
        indexed_at: datetime,
        run_id: str,
        links: dict[str, Any],
    ) -> None:
        """Records a document projected by ``run_id`` in the transaction that wrote its node."""
        conn.execute(
            self.queries["upsert_vault_document"],
            {
                "namespace": namespace,
                "key": natural_key,
                "path": source_path,
                "fingerprint": fingerprint,
                "indexed_at": indexed_at,
                "run": run_id,
                "links": Jsonb(links),
            },
        )

    def mark_seen(self, conn: psycopg.Connection[Any], namespace: str, run_id: str, keys: list[str]) -> None:
        """Marks the documents ``keys`` seen by ``run_id`` (unchanged ones: nothing else is written)."""
        if keys:
            conn.execute(self.queries["mark_vault_documents_seen"], (run_id, namespace, keys))

    def set_resolved(
        self, conn: psycopg.Connection[Any], namespace: str, natural_key: str, resolved: dict[str, Any]
    ) -> None:
        """Stores what a document's links and relations resolved to."""
        conn.execute(self.queries["set_vault_resolved"], (Jsonb(resolved), namespace, natural_key))

    def forget_document(self, conn: psycopg.Connection[Any], namespace: str, natural_key: str) -> None:
        """Removes a swept document from the namespace's vault."""
        conn.execute(self.queries["delete_vault_document"], (namespace, natural_key))

    # -- graph writes of the vault -------------------------------------------------------------------

    def claim_node(self, conn: psycopg.Connection[Any], namespace: str, natural_key: str) -> None:
        """Records the vault as the owner (origin) of a node it completed from a placeholder."""
        conn.execute(self.queries["claim_vault_origin"], (namespace, natural_key))

    def record_agent_retain(
        self,
        conn: psycopg.Connection[Any],
        namespace: str,
        natural_key: str,
        pieces: Sequence[tuple[int, str, str]],
    ) -> None:
        """Journals an agent's Retain of a vault document: the (order, heading, text) of each chunk it
        wrote (kept as digests in the document's journal, ``links.agent_retain``; the next projection
        of the document replaces the journal)."""
        written = [
            {"chunk_order": order, "digest": chunk_digest(heading, text)} for order, heading, text in pieces
        ]
        conn.execute(self.queries["record_agent_retain"], (Jsonb(written), namespace, natural_key))

    def delete_agent_retained_chunks(
        self, conn: psycopg.Connection[Any], namespace: str, natural_key: str
    ) -> int:
        """Deletes the chunks an agent's Retain of the vault document wrote (`record_agent_retain`) that
        are still as it wrote them (written through the API, same order, heading and text); chunks an
        agent added with PutChunks are not among them. Returns how many."""
        return max(
            conn.execute(self.queries["delete_agent_retained_chunks"], (namespace, natural_key)).rowcount, 0
        )

    def owned_by_agent(self, conn: psycopg.Connection[Any], namespace: str, natural_key: str) -> bool:
        """Whether the key's node exists, is no placeholder and was not created by the vault."""
        row = conn.execute(self.queries["node_owner"], (namespace, natural_key)).fetchone()
        return row is not None and row[0] != "vault" and not row[1]

    def agent_facts_touching(self, conn: psycopg.Connection[Any], namespace: str, natural_key: str) -> int:
        """How many facts not of vault origin have the node as subject or object."""
        return fetch_count(
            conn,
            self.queries["agent_facts_touching"], (namespace, natural_key, natural_key)
        )

    def reduce_to_placeholder(
        self,
        conn: psycopg.Connection[Any],
        graph: GraphStore,
        *,
        namespace: str,
        natural_key: str,
        node_type: str,
        label: str,
        scopes: list[str],
        now: datetime,
    ) -> None:
        """Rewrites a node's vertex as a placeholder (no title, text or provenance; type, label and
        visibility scopes kept, so nothing becomes more visible) and flags its registry row."""
        node = NodeWrite(
            namespace=namespace,
            natural_key=natural_key,
            node_type=node_type,
            props={"scopes": scopes} if scopes else {},
        )
        conn.execute(
            sql.SQL(
                "UPDATE {} SET properties = %s::ag_catalog.agtype WHERE id ="
                " (SELECT vertex_id FROM graph_nodes WHERE namespace = %s AND natural_key = %s)"
            ).format(graph._table(label)),
            (agtype_text(node.vertex_properties(canonical_instant(now), True)), namespace, natural_key),
        )
        conn.execute(self.queries["placeholder_registry_row"], (namespace, natural_key))


def chunk_digest(heading: str, text: str) -> str:
    """sha256 hex of a chunk's heading and text joined by a newline (as ``delete_agent_retained_chunks``
    computes it in SQL)."""
    return hashlib.sha256(f"{heading}\n{text}".encode()).hexdigest()


def fingerprint(source_path: str, content: str, provenance: dict[str, Any]) -> str:
    """sha256 hex of a document's path, text and provenance (``indexed_at`` left out): equal fingerprints
    mean the run has nothing new to project."""
    stable = {key: value for key, value in provenance.items() if key != "indexed_at"}
    text = json.dumps([source_path, content, stable], sort_keys=True, ensure_ascii=False, default=str)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


__all__ = ["StoredVaultDocument", "VaultStore", "fingerprint", "vault_lock_id"]

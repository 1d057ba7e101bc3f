"""The tier policy and the expiry sweep of memory records (issue 12 §3). Transport free.

`MemoryMaintenance.run` runs both once (``cb memory maintain``; the enrichment worker schedules it
periodically):

* tier policy: a hot memory whose last use (its add, then its last recall) is older than
  ``CB_MEMORY_WARM_AFTER_DAYS`` moves to warm; a warm one older than ``CB_MEMORY_COLD_AFTER_DAYS`` moves to
  cold (a recall moves it back to hot: `MemoryStore.touch`). Rounds of ``CB_MEMORY_MAINTENANCE_BATCH`` rows
  (``FOR UPDATE SKIP LOCKED``), so concurrent runs share the work;
* ``namespaces``: a run may be confined to some namespaces (``cb memory maintain --namespace``; tests that
  shift the clock use it, so they never touch another run's memories); by default it acts on all;
* expiry sweep: a memory whose ``expire_time`` lies more than ``CB_MEMORY_EXPIRY_GRACE_HOURS`` in the past
  is deleted like DeleteMemory (node, chunk, row; one audit event ``delete`` each, reason
  ``"expired"``), each in its own transaction. Between its expiry and the sweep it is hidden from recall
  and lists but readable by GetMemory (``expired`` true).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from common.domain.audit import AuditTrail
from common.kernel.config import Settings
from common.kernel.errors import FailedPrecondition, NotFound
from common.storage.database import Database
from common.storage.memory_lifecycle_store import MemoryLifecycleStore
from common.storage.memory_store import MemoryStore
from ingest_service.memory_writer import MemoryWriter

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class MaintenanceReport:
    """What one run did: memories moved to warm, to cold, and expired ones deleted (with audit ids)."""

    moved_to_warm: int
    moved_to_cold: int
    expired_deleted: int
    audit_event_ids: tuple[str, ...] = ()


class MemoryMaintenance:
    """Runs the tier policy and the expiry sweep (see the module doc).

    Args:
        database: the process's database.
        writer: deletes expired memories (DeleteMemory's path).
        settings: the thresholds (``memory_*``).
    """

    def __init__(self, database: Database, writer: MemoryWriter, settings: Settings) -> None:
        self.database = database
        self.writer = writer
        self.settings = settings
        self.store = MemoryStore(settings)
        self.lifecycle = MemoryLifecycleStore(settings)

    def apply_tier_policy(self, now: datetime, namespaces: Sequence[str] = ()) -> tuple[int, int]:
        """Moves unused memories down one tier (``namespaces``: only in these; empty: all); returns (moved
        to warm, moved to cold)."""
        warm_before = now - timedelta(days=self.settings.memory_warm_after_days)
        cold_before = now - timedelta(days=self.settings.memory_cold_after_days)
        to_warm = to_cold = 0
        while True:
            with self.database.connection() as conn:
                warm, cold = self.lifecycle.age_tiers(
                    conn,
                    warm_before=warm_before,
                    cold_before=cold_before,
                    limit=self.settings.memory_maintenance_batch,
                    namespaces=namespaces,
                )
            to_warm, to_cold = to_warm + warm, to_cold + cold
            if (
                warm < self.settings.memory_maintenance_batch
                and cold < self.settings.memory_maintenance_batch
            ):
                return to_warm, to_cold

    def sweep_expired(self, now: datetime, namespaces: Sequence[str] = ()) -> list[str]:
        """Deletes memories expired for longer than the grace period (``namespaces``: only in these; empty:
        all); returns the audit event ids."""
        before = now - timedelta(hours=self.settings.memory_expiry_grace_hours)
        AuditTrail(self.database).prepare()
        events: list[str] = []
        held: set[tuple[str, str]] = set()
        while True:
            with self.database.connection() as conn:
                due = self.lifecycle.expired_before(
                    conn, before, self.settings.memory_maintenance_batch + len(held), namespaces
                )
            fresh = [item for item in due if (item[0], item[1]) not in held]
            for namespace, key, user_id in fresh:
                try:
                    events.append(
                        self.database.run_transaction(
                            lambda conn, ns=namespace, k=key, u=user_id: self.writer.delete_in(
                                conn, ns, u, k, "expired"
                            )
                        )
                    )
                except NotFound:  # deleted meanwhile (DeleteMemory or a concurrent sweep)
                    continue
                except FailedPrecondition as refused:  # a legal hold: the memory stays until it is lifted
                    log.info("expired memory %s in %s kept: %s", key, namespace, refused.message)
                    held.add((namespace, key))
            if len(due) < self.settings.memory_maintenance_batch + len(held) or not fresh:
                return events

    def run(self, now: datetime | None = None, *, namespaces: Sequence[str] = ()) -> MaintenanceReport:
        """The tier policy, then the expiry sweep, judged at ``now`` (default: the current instant), in
        ``namespaces`` (empty: every namespace)."""
        at = now or datetime.now(UTC)
        to_warm, to_cold = self.apply_tier_policy(at, namespaces)
        events = self.sweep_expired(at, namespaces)
        log.info(
            "memory maintenance: %d to warm, %d to cold, %d expired deleted", to_warm, to_cold, len(events)
        )
        return MaintenanceReport(to_warm, to_cold, len(events), tuple(events))


__all__ = ["MaintenanceReport", "MemoryMaintenance"]

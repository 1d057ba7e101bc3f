"""The tier policy and the expiry sweep of memory records. Transport free.

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
  and lists but readable by GetMemory (``expired`` true);
* the mass-deletion guard (`ingest_service.validation.mass_deletion`): a namespace where one pass would expire at
  least ``CB_MEMORY_EXPIRY_MASS_FLOOR`` memories and more than ``CB_MASS_SWEEP_SHARE`` of all it holds
  (a clock jumped forward, a bulk import with one TTL) is left out of the pass and reported in
  ``refused``, unless the run allows it (``cb memory maintain --allow-mass-sweep``; the worker:
  ``CB_MEMORY_EXPIRY_ALLOW_MASS_SWEEP``). Memories expiring as time goes by are a small share per pass
  (the worker runs every few minutes), so ordinary expiry is never refused.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC
from datetime import datetime
from datetime import timedelta

from common.domain.audit import AuditTrail
from common.kernel.config import Settings
from common.kernel.errors import FailedPrecondition
from common.kernel.errors import NotFound
from common.storage.database import Database
from common.storage.memories.lifecycle import MemoryLifecycleStore
from common.storage.memories.store import MemoryStore
from ingest_service.memories.writer import MemoryWriter
from ingest_service.validation.mass_deletion import MassDeletionGuard

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class MaintenanceReport:
    """What one run did: memories moved to warm, to cold, and expired ones deleted (with audit ids)."""

    moved_to_warm: int
    moved_to_cold: int
    expired_deleted: int
    audit_event_ids: tuple[str, ...] = ()
    refused: tuple[RefusedExpiry, ...] = ()


@dataclass(frozen=True)
class RefusedExpiry:
    """A namespace the expiry sweep left alone as a mass sweep: ``due`` of its ``total`` memories."""

    namespace: str
    due: int
    total: int


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
        self.guard = MassDeletionGuard(settings.mass_sweep_share, floor=settings.memory_expiry_mass_floor)

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

    def sweep_expired(
        self, now: datetime, namespaces: Sequence[str] = (), *, allow_mass_sweep: bool = False
    ) -> tuple[list[str], list[RefusedExpiry]]:
        """Deletes memories expired for longer than the grace period (``namespaces``: only in these; empty:
        all) except in namespaces where that is a mass sweep the run does not allow; returns the audit
        event ids and the namespaces left alone."""
        before = now - timedelta(hours=self.settings.memory_expiry_grace_hours)
        with self.database.connection() as conn:
            counts = self.lifecycle.expiry_counts(conn, before, namespaces)
        refused = [
            RefusedExpiry(namespace, due, total)
            for namespace, (due, total) in sorted(counts.items())
            if not allow_mass_sweep and self.guard.is_mass(due, total)
        ]
        for item in refused:
            log.warning(
                "memory expiry of %s refused as a mass sweep: %d of %d memories due; nothing expired there "
                "(cb memory maintain --allow-mass-sweep, or CB_MEMORY_EXPIRY_ALLOW_MASS_SWEEP)",
                item.namespace,
                item.due,
                item.total,
            )
        left_out = {item.namespace for item in refused}
        sweep_in = [namespace for namespace in sorted(counts) if namespace not in left_out]
        if not sweep_in:
            return [], refused
        AuditTrail(self.database).prepare()
        events: list[str] = []
        held: set[tuple[str, str]] = set()
        while True:
            with self.database.connection() as conn:
                due = self.lifecycle.expired_before(
                    conn, before, self.settings.memory_maintenance_batch + len(held), sweep_in
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
                except FailedPrecondition as hold:  # a legal hold: the memory stays until it is lifted
                    log.info("expired memory %s in %s kept: %s", key, namespace, hold.message)
                    held.add((namespace, key))
            if len(due) < self.settings.memory_maintenance_batch + len(held) or not fresh:
                return events, refused

    def run(
        self,
        now: datetime | None = None,
        *,
        namespaces: Sequence[str] = (),
        allow_mass_sweep: bool | None = None,
    ) -> MaintenanceReport:
        """The tier policy, then the expiry sweep, judged at ``now`` (default: the current instant), in
        ``namespaces`` (empty: every namespace); ``allow_mass_sweep`` (default: the setting
        ``memory_expiry_allow_mass_sweep``) lets the sweep expire a mass of memories."""
        at = now or datetime.now(UTC)
        allow = self.settings.memory_expiry_allow_mass_sweep if allow_mass_sweep is None else allow_mass_sweep
        to_warm, to_cold = self.apply_tier_policy(at, namespaces)
        events, refused = self.sweep_expired(at, namespaces, allow_mass_sweep=allow)
        log.info(
            "memory maintenance: %d to warm, %d to cold, %d expired deleted, %d namespaces refused",
            to_warm,
            to_cold,
            len(events),
            len(refused),
        )
        return MaintenanceReport(to_warm, to_cold, len(events), tuple(events), tuple(refused))


__all__ = ["MaintenanceReport", "MemoryMaintenance", "RefusedExpiry"]

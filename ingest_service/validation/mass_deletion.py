"""The mass-deletion guard: a bulk deletion that would remove all of its set, or more than a share of
it, needs an explicit word from the caller (docs/how-to/safe-bulk-deletion.md).

A vault run whose folder is a typo, a snapshot exported empty by a broken job and an expiry pass after a
clock jump all look like ordinary bulk deletions to the code that performs them; the guard tells them
apart by size alone, before anything is removed, so a refused operation changes nothing.
"""

from __future__ import annotations

from dataclasses import dataclass

from common.kernel.errors import FailedPrecondition

MASS_SWEEP_REFUSED = "MASS_SWEEP_REFUSED"


@dataclass(frozen=True)
class MassDeletionGuard:
    """Judges one bulk deletion.

    Attributes:
        share: a deletion of more than this share of its set is a mass deletion (``CB_MASS_SWEEP_SHARE``).
        floor: a deletion of fewer items is never one (1: removing every item of a set of one counts).
    """

    share: float
    floor: int = 1

    def is_mass(self, count: int, total: int) -> bool:
        """Whether removing ``count`` of ``total`` items is a mass deletion: all of them, or more than
        the share, and at least `floor` items."""
        if count <= 0 or count < self.floor:
            return False
        return count >= total or count > self.share * total

    def check(
        self, count: int, total: int, *, allowed: bool, what: str, flag: str, items: str = "items"
    ) -> None:
        """Raises when removing ``count`` of ``total`` is a mass deletion the caller did not allow.

        Args:
            count: items the operation would remove.
            total: items of the set it removes them from (the namespace's documents, the scope's open
                facts).
            allowed: the caller's explicit word.
            what: the operation and its set, for the message ("the vault sweep of namespace acme").
            flag: how the caller says so (request field and CLI option).
            items: what is counted ("documents", "open facts").

        Raises:
            FailedPrecondition: reason ``MASS_SWEEP_REFUSED``, metadata ``would_sweep``, ``total`` and
                ``share``; nothing was removed.
        """
        if allowed or not self.is_mass(count, total):
            return
        raise FailedPrecondition(
            f"{what} would remove {count} of {total} {items} (all of them, or more than "
            f"{self.share:.0%}): refused, nothing was changed; set {flag} to remove them",
            reason=MASS_SWEEP_REFUSED,
            metadata={"would_sweep": str(count), "total": str(total), "share": f"{self.share:g}"},
        )


__all__ = ["MASS_SWEEP_REFUSED", "MassDeletionGuard"]

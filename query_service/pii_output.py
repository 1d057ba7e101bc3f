"""The personal data guard of the read side (docs/how-to/personal-data.md; docs/how-to/tokens-and-scopes.md):
the caller's policy, the disclosure of one response, and the ``pii_access`` audit.

With ``CB_PII_PROTECTION`` on, every output of the query service passes through a `PiiDisclosure`:

* **Caller without PII clearance**: every output string is masked by the detector's patterns
  (`common.kernel.pii.mask`: ``[phone]``, ``[email]``, ...), whether or not the item was marked on
  write — texts, titles, headings, contents, natural keys, fact attributes, observation data and
  assertions, provenance metadata (e.g. a commit author's e-mail). An item whose marks name a category
  the patterns cannot find (``fio``, ``address``, or ``pii: true`` without a category;
  `common.kernel.pii.PiiMarks.undetectable`) has its text, title and heading **withheld**: replaced by
  `withheld_text` (``[withheld: fio]``), because masking by patterns would hand the name or address out
  unchanged. Its natural key, provenance and scores are still returned (masked by patterns), so a
  cleared caller can fetch it.
* **Caller with PII clearance** (``pii_clearance`` in the tokens file): output is unmasked; when the
  response contained personal data (a detected category or an explicit undetectable mark), one audit
  event ``action="pii_access"`` is recorded in the request's namespace before the response is returned
  (`PiiGuard.close`): principal, method, the natural keys and observation ids exposed, and the
  categories. If the audit cannot be written the call fails, so no unaudited disclosure happens.

With protection off nothing is masked, withheld or audited (explicit marks are still stored on write).

The policy (`PiiPolicy`) is built by the servicer from the caller and the settings, like
`common.storage.visibility.Visibility`, and passed into the domain reader. Each reader discloses its own
output: it passes its items, field by field, through the response's `PiiDisclosure` (its ``disclose_*``
functions: `query_service.retrieval.hybrid_search.disclose_hit`, `query_service.readers.facts.disclose_fact`,
`query_service.readers.sources.disclose_source`, ...) inside `PiiGuard.disclose`, which then audits what a
cleared caller was shown. This module knows no reader. In-process callers that pass no policy get
`NO_PII_POLICY`: no masking, no audit. Transport free.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from collections.abc import Iterable
from collections.abc import Mapping
from dataclasses import dataclass
from dataclasses import field
from typing import Any
from typing import TypeVar

from common.auth.principals import Principal
from common.domain.audit import PII_ACCESS_ACTION
from common.domain.audit import AuditEventInput
from common.domain.audit import AuditTrail
from common.kernel.config import Settings
from common.kernel.errors import PermissionDenied
from common.kernel.pii import PiiMarks
from common.kernel.pii import detect
from common.kernel.pii import detect_value
from common.kernel.pii import mask
from common.kernel.pii import mask_value
from common.storage.database import Database

Shown = TypeVar("Shown")

NO_MARKS = PiiMarks()
# Cap on the keys and ids listed in one pii_access event (the audit details are bounded to 64 KiB).
MAX_AUDITED_KEYS = 200
MAX_AUDIT_DETAILS_BYTES = 48 * 1024


def withheld_text(marks: PiiMarks) -> str:
    """What replaces the text, title and heading of a withheld item: ``[withheld: fio, address]``."""
    return f"[withheld: {', '.join(marks.undetectable)}]"


@dataclass(frozen=True)
class PiiPolicy:
    """How one caller's output is treated.

    Attributes:
        protection: ``CB_PII_PROTECTION``.
        clearance: the caller's token has ``pii_clearance``.
        principal: the caller's name (for the audit event).
        method: the RPC, e.g. ``/memory.v1.SourceService/GetSource`` (for the audit event).
    """

    protection: bool = False
    clearance: bool = False
    principal: str = ""
    method: str = ""

    @classmethod
    def for_caller(cls, principal: Principal | None, settings: Settings, method: str) -> PiiPolicy:
        """The policy of an RPC's caller. No principal (in-process) and the development principal hold no
        clearance, so with protection on their output is masked."""
        return cls(
            protection=settings.pii_protection,
            clearance=bool(principal and principal.pii_clearance),
            principal=principal.name if principal else "",
            method=method,
        )

    @property
    def masks(self) -> bool:
        """Output is masked (protection on, caller not cleared)."""
        return self.protection and not self.clearance

    def refuse_personal_data_lookups(self, fields: Mapping[str, str]) -> None:
        """Raises `PermissionDenied` (reason PII_CLEARANCE_REQUIRED) when this caller's output is masked
        and a key or filter it looks up by holds personal data: whether the answer is empty would tell
        whether that value is stored, though every output masks it. The refusal depends on the request
        alone, never on what is stored. ``fields``: the request's field names and values.
        """
        if not self.masks:
            return
        for name, value in fields.items():
            found = detect(value)
            if found:
                raise PermissionDenied(
                    f"{name} holds personal data ({', '.join(found)}); looking up by it needs a token with"
                    " PII clearance (docs/how-to/personal-data.md)",
                    reason="PII_CLEARANCE_REQUIRED",
                    metadata={"field": name},
                )

    @property
    def audits(self) -> bool:
        """Unmasked personal data in the output is audited (protection on, caller cleared)."""
        return self.protection and self.clearance


NO_PII_POLICY = PiiPolicy()


@dataclass
class PiiDisclosure:
    """Applies a `PiiPolicy` to the pieces of one response and collects what a cleared caller was shown.

    Use one per response: pass every output string or JSON-like value through `text` / `value`, then hand
    it to `PiiGuard.close`.
    """

    policy: PiiPolicy
    categories: set[str] = field(default_factory=set)
    natural_keys: list[str] = field(default_factory=list)
    observation_ids: list[str] = field(default_factory=list)

    def withholds(self, marks: PiiMarks) -> bool:
        """True when an item with ``marks`` is withheld from this caller (see the module doc)."""
        return self.policy.masks and bool(marks.undetectable)

    def text(
        self, text: str, *, marks: PiiMarks = NO_MARKS, key: str = "", observation_ids: Iterable[str] = ()
    ) -> str:
        """``text`` as this caller may see it: unchanged (protection off, or cleared: then noted for the
        audit under ``key`` / ``observation_ids``), masked, or withheld (`withheld_text`)."""
        if not self.policy.protection:
            return text
        if self.policy.masks:
            return withheld_text(marks) if marks.undetectable else mask(text)
        self._note(detect(text), marks, key, observation_ids)
        return text

    def value(
        self, value: Any, *, marks: PiiMarks = NO_MARKS, key: str = "", observation_ids: Iterable[str] = ()
    ) -> Any:
        """A JSON-like value (dict/list/str) treated like `text`, string by string. Withholding does not
        apply here (values are provenance and attributes); callers withhold whole fields themselves."""
        if not self.policy.protection:
            return value
        if self.policy.masks:
            return mask_value(value)
        self._note(detect_value(value), marks, key, observation_ids)
        return value

    def _note(self, found: Iterable[str], marks: PiiMarks, key: str, observation_ids: Iterable[str]) -> None:
        categories = set(found) | set(marks.undetectable)
        if not categories:
            return
        self.categories |= categories
        if key and key not in self.natural_keys:
            self.natural_keys.append(key)
        for observation_id in observation_ids:
            if observation_id and observation_id not in self.observation_ids:
                self.observation_ids.append(observation_id)


class PiiGuard:
    """Runs one response through a `PiiDisclosure` and records the ``pii_access`` audit events of cleared
    callers (`common.domain.audit.AuditTrail`). One per reader; thread-safe."""

    def __init__(self, database: Database) -> None:
        self.audit = AuditTrail(database)

    def disclose(
        self,
        namespace: str,
        policy: PiiPolicy,
        reveal: Callable[[PiiDisclosure], Shown],
        *,
        trace_id: str = "",
    ) -> Shown:
        """One response as ``policy``'s caller may see it, audited.

        Args:
            namespace: the request's namespace (the audit event is recorded there).
            policy: the caller's policy.
            reveal: builds the response from a fresh disclosure, passing every output string and value
                through it (the reader's ``disclose_*`` functions).
            trace_id: of the audit event; empty: the request id.

        Returns:
            What ``reveal`` returned: masked or withheld for an uncleared caller, unchanged otherwise.

        Raises:
            Unavailable: see `close`.
        """
        disclosure = self.start(policy)
        shown = reveal(disclosure)
        self.close(namespace, disclosure, trace_id=trace_id)
        return shown

    def start(self, policy: PiiPolicy) -> PiiDisclosure:
        """A fresh disclosure for one response."""
        return PiiDisclosure(policy)

    def close(self, namespace: str, disclosure: PiiDisclosure, *, trace_id: str = "") -> None:
        """Records one ``pii_access`` event when a cleared caller was shown personal data in ``namespace``.

        Details: ``method``, ``categories`` (sorted), ``natural_keys`` and ``observation_ids`` (at most
        `MAX_AUDITED_KEYS` each and `MAX_AUDIT_DETAILS_BYTES` together, with ``truncated`` true when more
        were exposed). ``target_key`` is the single key or observation id when exactly one was exposed.
        ``trace_id`` empty: the request id. The event is scoped ``principal:<caller>``: GetTrace shows it
        to that caller and to tokens granted that scope, never to other readers of the namespace.

        Raises:
            Unavailable: the audit event could not be written (the response must not be returned).
        """
        if not disclosure.policy.audits or not disclosure.categories:
            return
        keys, ids = disclosure.natural_keys, disclosure.observation_ids
        exposed = [*keys, *ids]
        details: dict[str, Any] = {
            "method": disclosure.policy.method,
            "categories": sorted(disclosure.categories),
            "natural_keys": keys[:MAX_AUDITED_KEYS],
            "observation_ids": ids[:MAX_AUDITED_KEYS],
        }
        limit = MAX_AUDITED_KEYS
        # Keys may be long (up to 512 characters): shorten the lists until the details fit the audit limit.
        while limit > 1 and len(json.dumps(details, ensure_ascii=False).encode()) > MAX_AUDIT_DETAILS_BYTES:
            limit //= 2
            details["natural_keys"], details["observation_ids"] = keys[:limit], ids[:limit]
        if len(keys) > limit or len(ids) > limit:
            details["truncated"] = True
        self.audit.record(
            AuditEventInput(
                namespace=namespace,
                action=PII_ACCESS_ACTION,
                trace_id=trace_id,
                principal=disclosure.policy.principal,
                target_key=exposed[0] if len(exposed) == 1 else "",
                details=details,
                # The event names keys and ids of what the caller was shown, possibly scoped data: it is
                # as visible as an item scoped to that caller (its principal and tokens granted
                # ``principal:<name>``), like the caller's context compilations.
                scopes=(f"principal:{disclosure.policy.principal}",) if disclosure.policy.principal else (),
            )
        )


__all__ = ["MAX_AUDITED_KEYS", "NO_PII_POLICY", "PiiDisclosure", "PiiGuard", "PiiPolicy", "withheld_text"]

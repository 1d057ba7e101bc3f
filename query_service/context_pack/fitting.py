"""Fitting ranked candidates into a token budget, shared by CompileContext and CompileTypedContext
(DESIGN §7: "fits a token budget counted with a real tokenizer, renders text, and records why each
candidate was kept or dropped"): `FitSettings`, `FitCandidate`, `PackFitter` and its `FitResult`.

Candidates arrive rendered and ranked. `PackFitter.fit` adds them greedily in rank order while the
*whole* pack text (items joined by ``separator``), counted with the configured tokenizer, stays within
the budget. A *truncatable* candidate (a chunk) that does not fit whole may be cut to fit when at least
``min_truncated_tokens`` remain, and no truncatable candidate takes more than ``max_item_share`` of the
budget (longer ones are cut to it, so one huge chunk cannot fill the pack). A candidate with a
``drop_reason`` is dropped with that reason. Every decision (kept or dropped, with the reason and the
token count) is returned in the form recorded in ``context_traces``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from common.text_models.tokenizer import TokenCounter

KEPT = "kept"
DROPPED = "dropped"


@dataclass(frozen=True)
class FitSettings:
    """How candidates are fitted into the budget.

    Attributes:
        separator: between items in the pack text.
        min_truncated_tokens: a truncatable candidate is cut to fit only when at least this many tokens
            remain.
        max_item_share: a truncatable candidate takes at most this share of the budget (longer ones are
            cut), so a single huge chunk (a long observation, an oversized code block) cannot fill the pack.
    """

    separator: str = "\n\n"
    min_truncated_tokens: int = 48
    max_item_share: float = 0.35


@dataclass
class FitCandidate:
    """A rendered, scored candidate.

    Attributes:
        kind: the item kind (``"chunk"``, ``"fact"``, ``"node"``), recorded in the trace.
        key: its identity in the trace (``node_key#chunk_order``, a fact_id, a natural key).
        text: the rendered text as it would appear in the pack.
        score: the rank score; callers sort by it before fitting.
        truncatable: may be cut (with a trailing `` …``) to fit or to the per-item cap.
        drop_reason: when set, the candidate is dropped with this reason before fitting.
        detail: extra fields recorded with the decision (scores, why it was a candidate).
    """

    kind: str
    key: str
    text: str
    score: float
    truncatable: bool = False
    drop_reason: str = ""
    detail: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Fitted:
    """A kept candidate with the text it has in the pack (possibly cut) and that text's token count."""

    candidate: FitCandidate
    text: str
    token_count: int


@dataclass(frozen=True)
class FitResult:
    """``kept`` in pack order; ``decisions`` one per candidate (in the form recorded in ``context_traces``);
    ``text`` the pack text and ``token_count`` its exact token count (never over the budget)."""

    kept: list[Fitted]
    decisions: list[dict[str, Any]]
    text: str
    token_count: int

    @property
    def dropped_count(self) -> int:
        return sum(1 for decision in self.decisions if decision["decision"] == DROPPED)


class PackFitter:
    """Greedy budget fitting with an exact token count of the whole pack text (see the module doc).

    Args:
        tokens: the token counter of the configured encoding (``Settings.tokenizer_encoding``).
        settings: separator, truncation floor and per-item cap (`FitSettings`).
    """

    def __init__(self, tokens: TokenCounter, settings: FitSettings) -> None:
        self.tokens = tokens
        self.separator = settings.separator
        self.min_truncated_tokens = settings.min_truncated_tokens
        self.max_item_share = settings.max_item_share

    def fit(self, candidates: Sequence[FitCandidate], budget: int) -> FitResult:
        """Fits ``candidates`` (in the given order) into ``budget`` tokens.

        Raises:
            AssertionError: the pack text came out over the budget (a bug in the fitting, never input).
        """
        separator = self.separator
        kept: list[Fitted] = []
        decisions: list[dict[str, Any]] = []
        text = ""
        used = 0  # exact token count of `text`

        def decide(candidate: FitCandidate, decision: str, reason: str, tokens: int) -> None:
            decisions.append(
                {
                    "kind": candidate.kind,
                    "key": candidate.key,
                    "score": round(candidate.score, 6),
                    "decision": decision,
                    "reason": reason,
                    "tokens": tokens,
                    **candidate.detail,
                }
            )

        item_cap = max(self.min_truncated_tokens, int(budget * self.max_item_share))
        for candidate in candidates:
            item_tokens = self.tokens.count(candidate.text)
            if candidate.drop_reason:
                decide(candidate, DROPPED, candidate.drop_reason, item_tokens)
                continue
            if candidate.truncatable and item_tokens > item_cap:
                capped = self._cut(candidate.text, item_cap)
                capped_tokens = self.tokens.count(capped)
                candidate.detail["capped_from_tokens"] = item_tokens
                candidate.text, item_tokens = capped, capped_tokens
            joined = candidate.text if not text else text + separator + candidate.text
            # Cheap pre-check: tokens rarely merge across the separator, so a sum far above the budget
            # cannot fit; anything near it is decided by the exact count of the whole text.
            estimate = used + item_tokens + (self.tokens.count(separator) if text else 0)
            total = self.tokens.count(joined) if estimate <= budget + 16 else estimate
            if total <= budget:
                text, used = joined, total
                kept.append(Fitted(candidate, candidate.text, item_tokens))
                decide(candidate, KEPT, "fits the budget", item_tokens)
                continue
            remaining = budget - used - (self.tokens.count(separator) if text else 0)
            if candidate.truncatable and remaining >= self.min_truncated_tokens:
                cut = self._truncate_to_fit(text, candidate.text, budget)
                if cut:
                    text = cut[0]
                    used = self.tokens.count(text)
                    cut_tokens = self.tokens.count(cut[1])
                    kept.append(Fitted(candidate, cut[1], cut_tokens))
                    decide(
                        candidate,
                        KEPT,
                        f"cut to {cut_tokens} of {item_tokens} tokens to fit the budget",
                        cut_tokens,
                    )
                    continue
            decide(
                candidate,
                DROPPED,
                f"over budget ({item_tokens} tokens, {max(remaining, 0)} left)",
                item_tokens,
            )
        token_count = self.tokens.count(text)
        assert token_count <= budget, (token_count, budget)
        return FitResult(kept, decisions, text, token_count)

    def _cut(self, item_text: str, max_tokens: int) -> str:
        """The longest token prefix of ``item_text`` that, followed by `` …``, has at most ``max_tokens``."""
        room = max_tokens - self.tokens.count(" …")
        while room > 0:
            cut = self.tokens.truncate(item_text, room).rstrip() + " …"
            excess = self.tokens.count(cut) - max_tokens
            if excess <= 0:
                return cut
            room -= excess
        return ""

    def _truncate_to_fit(self, text: str, item_text: str, budget: int) -> tuple[str, str] | None:
        """(new pack text, cut item text) for the longest token prefix of ``item_text`` that fits, or None."""
        separator = self.separator
        prefix = text + separator if text else ""
        room = budget - self.tokens.count(prefix)
        while room >= self.min_truncated_tokens:
            cut = self.tokens.truncate(item_text, room).rstrip()
            if not cut:
                return None
            cut += " …"
            if self.tokens.count(prefix + cut) <= budget:
                return prefix + cut, cut
            room -= max(1, self.tokens.count(prefix + cut) - budget)
        return None

"""Fitting ranked candidates into a token budget, shared by CompileContext and CompileTypedContext
(docs/explanation/retrieval.md: "fits a token budget counted with a real tokenizer, renders text, and records
why each candidate was kept or dropped"): `FitSettings`, `FitCandidate`, `PackFitter` and its `FitResult`.

Candidates arrive rendered and scored. The *priority* in which they are offered to the budget is either
the order given (``FitSettings.selection = "rank"``: CompileTypedContext) or value per token
(``"value_per_token"``: score divided by the tokens the item adds, at least ``min_cost_tokens``; the
greedy approximation of the knapsack problem, Dantzig 1957), ties in the order given. A candidate is kept
when the tokens it adds fit what is left; a *truncatable* candidate (a chunk) that does not fit whole may
be cut to fit when at least ``min_truncated_tokens`` remain, and no truncatable candidate takes more than
``max_item_share`` of the budget (longer ones are cut to it). A candidate with a ``drop_reason`` is
dropped with that reason.

Layout: candidates with a ``group`` (a header line, e.g. one conversation's session) are laid out
together under that header, one line each, ordered by their ``position``; every other candidate is a
block of its own. Blocks are joined by ``separator``, in the order of their best-scored kept member
(``"value_per_token"``) or of their first kept member (``"rank"``).

Token counting is incremental: each item, header and joint is counted once, when it is first offered,
and the pack's cost is the sum of its pieces (no re-tokenising of the whole pack per candidate).
Tokens can merge across a joint, so the sum is checked once against the exact count of the laid-out pack
text; while that exact count exceeds the budget (rare: a merge only ever *saves* tokens in BPE
encodings in practice, but nothing is assumed), the kept candidate of lowest priority is dropped again.
``FitResult.token_count`` is the exact count of ``FitResult.text`` and never exceeds the budget. Every
decision (kept or dropped, with the reason and the token count) is returned in the form recorded in
``context_traces``.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass
from dataclasses import field
from typing import Any
from typing import Literal

from common.text_models.tokenizer import TokenCounter

KEPT = "kept"
DROPPED = "dropped"
LINE_BREAK = "\n"
COUNT_CACHE_SIZE = 16_384
"""Token counts a fitter remembers (least recently used first out; ~200 bytes of text each)."""


@dataclass(frozen=True)
class FitSettings:
    """How candidates are fitted into the budget.

    Attributes:
        separator: between blocks in the pack text (a group's lines are joined by a line break).
        min_truncated_tokens: a truncatable candidate is cut to fit only when at least this many tokens
            remain.
        max_item_share: a truncatable candidate takes at most this share of the budget (longer ones are
            cut), so a single huge chunk (a long observation, an oversized code block) cannot fill the pack.
        selection: ``"rank"`` (offer candidates in the order given) or ``"value_per_token"`` (by score
            per token added).
        min_cost_tokens: the least cost a candidate counts with for ``"value_per_token"``, so a
            two-token line does not outrank everything by its size alone.
    """

    separator: str = "\n\n"
    min_truncated_tokens: int = 48
    max_item_share: float = 0.35
    selection: Literal["rank", "value_per_token"] = "rank"
    min_cost_tokens: int = 16


@dataclass
class FitCandidate:
    """A rendered, scored candidate.

    Attributes:
        kind: the item kind (``"chunk"``, ``"fact"``, ``"node"``), recorded in the trace.
        key: its identity in the trace (``node_key#chunk_order``, a fact_id, a natural key).
        text: the rendered text as it would appear in the pack (one line when ``group`` is set).
        score: the rank score; callers sort by it before fitting.
        truncatable: may be cut (with a trailing `` …``) to fit or to the per-item cap.
        drop_reason: when set, the candidate is dropped with this reason before fitting.
        detail: extra fields recorded with the decision (scores, why it was a candidate).
        group: the header of the block the candidate is laid out in with the others of that header
            (``""``: a block of its own).
        position: its order inside its group (e.g. (occurred_at, recorded_order) of a turn).
    """

    kind: str
    key: str
    text: str
    score: float
    truncatable: bool = False
    drop_reason: str = ""
    detail: dict[str, Any] = field(default_factory=dict)
    group: str = ""
    position: tuple[Any, ...] = ()


@dataclass(frozen=True)
class Fitted:
    """A kept candidate with the text it has in the pack (possibly cut) and that text's token count."""

    candidate: FitCandidate
    text: str
    token_count: int


@dataclass(frozen=True)
class FitResult:
    """``kept`` in pack order; ``decisions`` one per candidate (in the form recorded in ``context_traces``);
    ``text`` the pack text and ``token_count`` its exact token count (never over the budget);
    ``tokenised`` how many texts were tokenised to fit (the cost of fitting, for measurements)."""

    kept: list[Fitted]
    decisions: list[dict[str, Any]]
    text: str
    token_count: int
    tokenised: int = 0

    @property
    def dropped_count(self) -> int:
        return sum(1 for decision in self.decisions if decision["decision"] == DROPPED)


class PackFitter:
    """Greedy budget fitting with incremental token counts and an exact final count (see the module doc).

    Args:
        tokens: the token counter of the configured encoding (``Settings.tokenizer_encoding``).
        settings: separator, truncation floor, per-item cap and selection order (`FitSettings`).
    """

    def __init__(self, tokens: TokenCounter, settings: FitSettings) -> None:
        self.tokens = tokens
        self.settings = settings
        self.separator = settings.separator
        # Token counts of texts seen before (a turn's line recurs in every pack of its conversation);
        # `TokenCounter.count` is a pure function of the text, so a bounded cache changes no count.
        self._count = functools.lru_cache(maxsize=COUNT_CACHE_SIZE)(tokens.count)

    def fit(self, candidates: Sequence[FitCandidate], budget: int) -> FitResult:
        """Fits ``candidates`` into ``budget`` tokens (priority and layout: see the module doc).

        Raises:
            AssertionError: the pack text came out over the budget (a bug in the fitting, never input).
        """
        settings = self.settings
        counted = 0

        def count(text: str) -> int:
            nonlocal counted
            counted += 1
            return self._count(text)

        separator_tokens = count(self.separator)
        line_tokens = count(LINE_BREAK)
        header_tokens: dict[str, int] = {}
        item_cap = max(settings.min_truncated_tokens, int(budget * settings.max_item_share))
        decisions: dict[int, dict[str, Any]] = {}
        sized: list[tuple[int, FitCandidate, int]] = []  # (given index, candidate, tokens)
        for index, candidate in enumerate(candidates):
            item_tokens = count(candidate.text)
            if candidate.drop_reason:
                decisions[index] = _decision(candidate, DROPPED, candidate.drop_reason, item_tokens)
                continue
            if candidate.truncatable and item_tokens > item_cap:
                capped = self._cut(candidate.text, item_cap)
                capped_tokens = count(capped)
                candidate.detail["capped_from_tokens"] = item_tokens
                candidate.text, item_tokens = capped, capped_tokens
            if candidate.group and candidate.group not in header_tokens:
                header_tokens[candidate.group] = count(candidate.group)
            sized.append((index, candidate, item_tokens))
        if settings.selection == "value_per_token":
            sized.sort(key=lambda entry: -entry[1].score / max(entry[2], settings.min_cost_tokens, 1))

        kept: list[tuple[int, Fitted]] = []  # in priority order
        open_groups: set[str] = set()
        used = 0

        def added_cost(candidate: FitCandidate, item_tokens: int) -> int:
            joint = separator_tokens if kept else 0
            if not candidate.group:
                return joint + item_tokens
            if candidate.group in open_groups:
                return line_tokens + item_tokens
            return joint + header_tokens[candidate.group] + line_tokens + item_tokens

        for index, candidate, item_tokens in sized:
            cost = added_cost(candidate, item_tokens)
            if used + cost <= budget:
                used += cost
                kept.append((index, Fitted(candidate, candidate.text, item_tokens)))
                decisions[index] = _decision(candidate, KEPT, "fits the budget", item_tokens)
                if candidate.group:
                    open_groups.add(candidate.group)
                continue
            remaining = budget - used - (cost - item_tokens)
            if candidate.truncatable and remaining >= settings.min_truncated_tokens:
                cut = self._cut(candidate.text, remaining)
                cut_tokens = count(cut) if cut else 0
                if cut and cut_tokens <= remaining:
                    used += cost - item_tokens + cut_tokens
                    kept.append((index, Fitted(candidate, cut, cut_tokens)))
                    decisions[index] = _decision(
                        candidate,
                        KEPT,
                        f"cut to {cut_tokens} of {item_tokens} tokens to fit the budget",
                        cut_tokens,
                    )
                    if candidate.group:
                        open_groups.add(candidate.group)
                    continue
            decisions[index] = _decision(
                candidate,
                DROPPED,
                f"over budget ({item_tokens} tokens, {budget - used} of the budget left)",
                item_tokens,
            )

        layout, text = self._layout([fitted for _, fitted in kept])
        token_count = count(text)
        while token_count > budget and kept:  # a joint tokenised differently than its pieces: undo the last
            index, fitted = kept.pop()
            decisions[index] = _decision(
                fitted.candidate,
                DROPPED,
                f"over budget ({fitted.token_count} tokens) once the pack text was counted whole",
                fitted.token_count,
            )
            layout, text = self._layout([fitted for _, fitted in kept])
            token_count = count(text)
        assert token_count <= budget, (token_count, budget)
        return FitResult(layout, [decisions[i] for i in sorted(decisions)], text, token_count, counted)

    def _layout(self, kept: Sequence[Fitted]) -> tuple[list[Fitted], str]:
        """The kept candidates in pack order and the pack text (see the module doc)."""
        blocks: dict[str, list[Fitted]] = {}
        rank: dict[str, tuple[float, int]] = {}
        for order, fitted in enumerate(kept):
            candidate = fitted.candidate
            name = candidate.group or f"\x00{order}"  # an ungrouped candidate is a block of its own
            blocks.setdefault(name, []).append(fitted)
            first = rank.get(name, (0.0, order))
            if self.settings.selection == "value_per_token":
                rank[name] = (min(first[0], -candidate.score), first[1])
            else:
                rank.setdefault(name, (0.0, order))
        ordered: list[Fitted] = []
        texts: list[str] = []
        for name in sorted(blocks, key=lambda n: rank[n]):
            members = blocks[name]
            if name.startswith("\x00"):
                ordered.extend(members)
                texts.append(members[0].text)
                continue
            members.sort(key=lambda fitted: fitted.candidate.position)
            ordered.extend(members)
            texts.append(LINE_BREAK.join([name, *(fitted.text for fitted in members)]))
        return ordered, self.separator.join(texts)

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


def _decision(candidate: FitCandidate, decision: str, reason: str, tokens: int) -> dict[str, Any]:
    """One decision in the form recorded in ``context_traces``."""
    return {
        "kind": candidate.kind,
        "key": candidate.key,
        "score": round(candidate.score, 6),
        "decision": decision,
        "reason": reason,
        "tokens": tokens,
        **candidate.detail,
    }

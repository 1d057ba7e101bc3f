"""Budget fitting cost ("`PackFitter.fit` re-tokenises the whole pack for every candidate"), A/B in
one run: `query_service.context.pack.fitting.PackFitter` (each text counted once, one exact count of the
pack) against the fitting before it (``whole_pack_fit`` below: the pack text joined and counted whole for
every candidate that might fit), on the same candidates, interleaved.

Candidates: the turns of the LoCoMo development split (``../shared/corpora/locomo-dev``, read at run time)
as ``HH:MM speaker: text`` lines in one block per session, 200 per fit (what CompileContext offers at
a 2000-token budget: ~80 hits, their neighbours and recent turns), scores descending; budgets 1000 and
2000 tokens. Reports the mean and p95 time per fit in ms and the texts tokenised per fit.

Usage: .venv/bin/python bench/bench_pack_fitting.py [--fits N] [--note TEXT]; writes bench/results/pack-fitting-<UTC time>.json.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import time
from datetime import UTC
from datetime import datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench.bench_context_quality import DATA
from bench.bench_context_quality import turns_of
from bench.service_results import heading
from bench.service_results import machine
from bench.service_results import print_report
from bench.service_results import write_json
from common.kernel.config import Settings
from common.text_models.tokenizer import TokenCounter
from query_service.context.pack.fitting import FitCandidate
from query_service.context.pack.fitting import FitSettings
from query_service.context.pack.fitting import PackFitter


def whole_pack_fit(tokens: TokenCounter, candidates: list[FitCandidate], budget: int) -> tuple[str, int]:
    """The fitting before incremental counts: each candidate that might fit is tried by counting the
    whole joined pack text; returns the text and the number of texts tokenised."""
    text, used, counted = "", 0, 0
    for candidate in candidates:
        item = tokens.count(candidate.text)
        counted += 1
        joined = candidate.text if not text else text + "\n\n" + candidate.text
        if used + item <= budget + 16:
            total = tokens.count(joined)
            counted += 1
            if total <= budget:
                text, used = joined, total
    return text, counted


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--fits", type=int, default=200)
    parser.add_argument("--note", default="")
    arguments = parser.parse_args()
    settings = Settings()
    tokens = TokenCounter(settings.tokenizer_encoding)
    lines = [
        (
            f"[{turn['occurred_at']:%Y-%m-%d} locomo/{conversation['sample_id']}]",
            f"{turn['occurred_at']:%H:%M} {turn['speaker']}: {turn['content']}",
        )
        for conversation in json.loads(DATA.read_text("utf-8"))
        for turn in turns_of(conversation["conversation"])
    ]
    rng = random.Random(16)
    fitter = PackFitter(tokens, FitSettings(selection="rank"))
    samples: dict[str, list[float]] = {}
    counted: dict[str, list[int]] = {}
    for _ in range(arguments.fits):
        chosen = rng.sample(lines, 200)
        for budget in (1000, 2000):
            for name in ("incremental", "whole_pack"):  # interleaved A/B on the same candidates
                candidates = [
                    FitCandidate(
                        kind="chunk", key=str(i), text=text, score=1 - i / 400, group=group, position=(i,)
                    )
                    for i, (group, text) in enumerate(chosen)
                ]
                start = time.perf_counter()
                if name == "incremental":
                    count = fitter.fit(candidates, budget).tokenised
                else:
                    count = whole_pack_fit(tokens, candidates, budget)[1]
                samples.setdefault(f"{name}@{budget}", []).append((time.perf_counter() - start) * 1000)
                counted.setdefault(f"{name}@{budget}", []).append(count)
    results: dict[str, Any] = {
        "time": datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ"),
        "machine": machine(),
        "load_average": Path("/proc/loadavg").read_text().split()[:3],
        "note": arguments.note,
        "fits": arguments.fits,
        "figures": {
            key: {
                "mean_ms": round(statistics.fmean(values), 3),
                "p95_ms": round(statistics.quantiles(values, n=100)[94], 3),
                "texts_tokenised": round(statistics.fmean(counted[key]), 1),
            }
            for key, values in samples.items()
        },
    }
    write_json(results, prefix="pack-fitting")
    entry = [
        heading(results)
        + " — budget fitting, incremental counts vs whole-pack recount (`bench/bench_pack_fitting.py`)",
        "",
        (
            f"{arguments.fits} fits of 200 LoCoMo turn lines per budget, interleaved A/B on the same"
            f" candidates; load average {' '.join(results['load_average'])}."
        ),
        "",
        "| fitting | mean ms | p95 ms | texts tokenised per fit |",
        "|---|---|---|---|",
    ]
    for key, figures in results["figures"].items():
        entry.append(f"| {key} | {figures['mean_ms']} | {figures['p95_ms']} | {figures['texts_tokenised']} |")
    print_report(entry, note=arguments.note)
    return 0


if __name__ == "__main__":
    sys.exit(main())

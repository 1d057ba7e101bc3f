"""CompileContext settings variants against the default on the LoCoMo development split, in one process
and one run, per category and per conversation: the measure to judge a change to the pack's rules by
(keep a change only when it helps most conversations, not the average alone).

Loads the three conversations through the public API as `bench/bench_context_quality.py` does (one
observation per turn, then waits for the episode embedder), or reuses namespaces loaded before
(``--reuse PREFIX`` with ``--shared-database``: the namespaces ``<PREFIX>-<sample_id>``). Then, for the
default settings and each ``--variant NAME=JSON`` (`ContextSettings` fields replaced, e.g.
``'round75={"participant_round_weight": 0.75}'``), compiles every question of categories 1-4 at 1000 and
2000 tokens in process (`ContextCompiler`, the service's own code) and scores the packs with the same
measure as `bench/bench_context_quality.py` (``all``: every evidence turn's whole text is in an item of
that turn's episode). Reports ``all`` per category and per conversation, the difference to the default
per conversation, and CPU time per compile of this process (the database server's work not included).

Figures here differ from the gRPC bench by a question or three per conversation (fused scores tie and
ties are broken by chunk key, which differs between loads): compare variants within one run.

Usage (the embedded database must be up):
    .venv/bin/python bench/bench_context_variants.py --variant 'NAME={"field": value}' [...] [--note TEXT]
Results: bench/results/context-variants-<UTC time>.json, and the report printed.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import fields
from dataclasses import replace
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench.bench_compile_cost import BUDGETS
from bench.bench_compile_cost import LOCOMO
from bench.bench_compile_cost import load_locomo
from bench.bench_context_quality import CATEGORIES
from bench.bench_context_quality import SYSTEM
from bench.bench_context_quality import aggregate
from bench.bench_context_quality import evidence_ids
from bench.bench_context_quality import per_conversation
from bench.bench_context_quality import scores
from bench.bench_context_quality import turns_of
from bench.run_bench import add_run_options
from bench.run_bench import run_in_database
from bench.service_results import heading
from bench.service_results import machine
from bench.service_results import print_report
from bench.service_results import write_json
from common.kernel.identifiers import observation_id
from query_service.context.pack.settings import ContextSettings
from query_service.context.pack.settings import context_preset

DEFAULT = "default"


def parse_variant(text: str) -> tuple[str, dict[str, Any]]:
    """``NAME=JSON`` -> (name, the `ContextSettings` fields it replaces).

    Raises:
        ValueError: no ``=``, an empty or reserved name, JSON that is not an object, or a field
            `ContextSettings` does not have.
    """
    name, separator, body = text.partition("=")
    name = name.strip()
    if not separator or not name or name == DEFAULT:
        raise ValueError(f"a variant is NAME=JSON with a name other than {DEFAULT!r}: {text!r}")
    changes = json.loads(body)
    if not isinstance(changes, dict):
        raise ValueError(f"variant {name!r}: the JSON must be an object of ContextSettings fields")
    known = {field.name for field in fields(ContextSettings)}
    unknown = sorted(set(changes) - known)
    if unknown:
        raise ValueError(f"variant {name!r}: ContextSettings has no field {', '.join(unknown)}")
    return name, changes


def packed_turns(items: Any, by_episode: dict[str, str], texts: dict[str, str]) -> set[str]:
    """The turns (dia_ids) whose whole text is in a pack item of the turn's episode."""
    inside = set()
    for item in items:
        dia_id = by_episode.get(item.provenance.node_key)
        if dia_id is not None and texts[dia_id] in item.text:
            inside.add(dia_id)
    return inside


def measure(
    prefix: str, variants: dict[str, ContextSettings]
) -> tuple[list[dict[str, Any]], dict[str, float]]:
    """One row per question (category, conversation, each variant's score per budget) and each variant's
    CPU milliseconds per compile."""
    from common.kernel.config import Settings
    from common.storage.database import Database
    from common.storage.schema import migrations
    from common.text_models.embeddings.factory import build_embedding_provider
    from common.text_models.tokenizer import TokenCounter
    from query_service.context.compiler import ContextCompiler
    from query_service.context.pack.request import ContextRequest
    from query_service.retrieval.hybrid_search import HybridSearcher
    from query_service.retrieval.hybrid_search import search_preset

    settings = Settings()
    database = Database(settings, prepare=migrations.apply)
    searcher = HybridSearcher(database, build_embedding_provider(settings), search_preset("default"))
    tokens = TokenCounter(settings.tokenizer_encoding)
    compilers = {
        name: ContextCompiler(database, searcher, tokens, config) for name, config in variants.items()
    }
    cpu = dict.fromkeys(variants, 0.0)
    compiles = 0
    rows: list[dict[str, Any]] = []
    for conversation in json.loads(LOCOMO.read_text("utf-8")):
        sample_id = conversation["sample_id"]
        namespace = f"{prefix}-{sample_id}".lower()
        turns = turns_of(conversation["conversation"])
        by_episode = {
            f"episode:{observation_id(namespace, SYSTEM, sample_id, turn['dia_id'])}": turn["dia_id"]
            for turn in turns
        }
        texts = {turn["dia_id"]: turn["text"] for turn in turns}
        for question in conversation["qa"]:
            evidence = evidence_ids(question.get("evidence", []), set(texts))
            if question.get("category") not in CATEGORIES or not evidence:
                continue
            row: dict[str, Any] = {"category": question["category"], "conversation": sample_id}
            for budget in BUDGETS:
                compiles += 1
                for name, compiler in compilers.items():  # interleaved: load changes touch all alike
                    started = time.process_time()
                    pack = compiler.compile(
                        ContextRequest(namespace=namespace, query=question["question"], token_budget=budget)
                    )
                    cpu[name] += time.process_time() - started
                    row[f"{name}_pack@{budget}"] = scores(
                        packed_turns(pack.items, by_episode, texts), evidence
                    )
            rows.append(row)
    database.close()
    return rows, {name: round(1000 * seconds / max(compiles, 1), 1) for name, seconds in cpu.items()}


def parse_arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description="CompileContext variants on locomo-dev (see the module doc)."
    )
    parser.add_argument(
        "--variant",
        action="append",
        default=[],
        help='NAME={"ContextSettings field": value, ...} (repeatable)',
    )
    parser.add_argument(
        "--reuse", default="", help="namespaces <PREFIX>-<sample_id> loaded before (with --shared-database)"
    )
    add_run_options(parser)
    return parser.parse_args()


def main() -> int:
    arguments = parse_arguments()
    for text in arguments.variant:
        parse_variant(text)  # a typo fails before the load
    return run_in_database(run, arguments, "memory_bench_variants")


def run(arguments: argparse.Namespace, stamp: str) -> int:
    started = time.perf_counter()
    prefix = arguments.reuse or f"variants-{stamp}"
    if not arguments.reuse:
        load_locomo(prefix)
    base = context_preset(DEFAULT)
    variants = {DEFAULT: base} | {
        name: replace(base, **changes) for name, changes in map(parse_variant, arguments.variant)
    }
    load_before = Path("/proc/loadavg").read_text().split()[0]
    rows, cpu = measure(prefix, variants)
    methods = [f"{name}_pack@{budget}" for name in variants for budget in BUDGETS]
    results = {
        "time": stamp,
        "machine": machine(),
        "note": arguments.note,
        "variants": dict([(DEFAULT, {}), *map(parse_variant, arguments.variant)]),
        "questions": len(rows),
        "table": aggregate(rows, methods),
        "per_conversation": per_conversation(rows, methods),
        "cpu_ms_per_compile": cpu,
        "load_average": [float(load_before), float(Path("/proc/loadavg").read_text().split()[0])],
        "run_seconds": round(time.perf_counter() - started, 1),
    }
    write_json(results, prefix="context-variants")
    print_report(report(results, list(variants)), note=arguments.note)
    return 0


def report(results: dict[str, Any], names: list[str]) -> list[str]:
    """Per variant and budget: ``all`` overall and per category, per conversation with its difference to
    the default, and how many conversations gain and lose."""
    groups = ["overall", *CATEGORIES.values()]
    conversations = list(results["per_conversation"])
    lines = [
        heading(results) + " — CompileContext variants on locomo-dev (`bench/bench_context_variants.py`)",
        "",
        f"{results['questions']} questions; `all` in percent; load average {results['load_average']}.",
        "",
        "| variant @ budget | "
        + " | ".join(groups)
        + " | "
        + " | ".join(conversations)
        + " | conversations up / down | CPU ms / compile |",
        "|---|" + "---|" * (len(groups) + len(conversations) + 2),
    ]
    for name in names:
        for budget in BUDGETS:
            method = f"{name}_pack@{budget}"
            baseline = f"{DEFAULT}_pack@{budget}"
            cells = [str(results["table"][method][group]["all"]) for group in groups]
            changes = []
            for sample_id in conversations:
                figures = results["per_conversation"][sample_id]
                delta = round(figures[method] - figures[baseline], 1)
                changes.append(delta)
                cells.append(f"{figures[method]}" + (f" ({delta:+})" if name != DEFAULT else ""))
            up, down = sum(d > 0 for d in changes), sum(d < 0 for d in changes)
            cells.append("" if name == DEFAULT else f"{up} / {down}")
            cells.append(str(results["cpu_ms_per_compile"][name]))
            lines.append(f"| {name} @{budget} | " + " | ".join(cells) + " |")
    lines.append(f"\nRun time {results['run_seconds']} s.")
    return lines


if __name__ == "__main__":
    sys.exit(main())

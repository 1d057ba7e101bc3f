"""Context quality on the LoCoMo development split, through gRPC against real service
processes, next to a BM25 and a dense baseline computed in the same run.

Data: ``../shared/corpora/locomo-dev/locomo-dev.json`` (read at run time, never copied: CC BY-NC 4.0,
evaluation only; its README defines the measure). Each conversation goes into its own namespace the way
an agent records a chat: one observation per turn through RecordObservations (source {system "locomo",
stream sample_id, external_id dia_id}, kind "chat.message", occurred_at the session's date time read as
UTC, actor {person, the speaker lower-cased}, content the turn's text, followed by
``" [shared image: <blip_caption>]"`` when the turn shares an image, so the caption is searchable as in
the reference run). The baselines see the same turns as ``"Speaker: content"``.

Measures, for every question of categories 1-4 (1 multi-hop, 2 temporal, 3 open-domain, 4 single-hop),
per category and over all of them, with ``all`` (every evidence turn found), ``any`` (at least one) and
``frac`` (mean share of the evidence turns found):
- Search (top_k 20) over gRPC: the turns among the top 5/10/20 hits (hit ``episode:<observation_id>`` ->
  dia_id, the observation id computed with ``common.kernel.identifiers.observation_id``);
- CompileContext over gRPC at token_budget 1000 and 2000: the turns whose text the pack contains (an
  item whose provenance is the turn's episode and whose text holds the whole turn text, so a short turn
  is not matched inside another one); the mean tokens the packs use;
- BM25 (``rank_bm25.BM25Okapi`` over lower-cased ``\\w+`` tokens of "Speaker: content") and dense cosine
  (the configured embedding provider, questions with ``encode_query``, turns with ``encode_passages``),
  each as top-5/10/20 lists and as packs: "Speaker: content" lines in rank order, a line that does not
  fit the budget skipped and the next one tried, tokens counted with the service's tokenizer
  (``common.text_models.tokenizer.TokenCounter``, one token per line break added);
- per conversation: ``all`` of Search@10 and of the packs at 1000 and 2000 tokens (a change that helps
  one conversation may hurt another);
- Search and CompileContext latency p50/p95 over all those calls (one client, sequential).

Results are printed (figures only, no excerpts) and written as JSON to
bench/results/context-quality-<UTC time>.json. Evidence ids are normalised as the corpus README says
("D8:6; D9:17" is two ids, "D:11:26" is D11:26, "D30:05" is D30:5; ids that name no turn are dropped).

Usage: .venv/bin/python bench/bench_context_quality.py [--note TEXT] [--shared-database]  (or
`make bench-context`; the embedded database must be up: `make db`). By default the run creates a fresh
database on the server of ``CB_DATABASE_URL`` and drops it afterwards (as bench/run_bench.py does);
``--shared-database`` loads into ``CB_DATABASE_URL`` itself; ``--no-captions`` records the turn
text alone (to see what the captions change); ``--speaker-in-data`` also records data {speaker: <name>},
so the episode's searchable text names the speaker as the baselines' "Speaker: text" lines do. A run takes a few minutes.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import time
from collections.abc import Callable
from datetime import UTC
from datetime import datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import grpc
import numpy as np
from google.protobuf import struct_pb2
from google.protobuf import timestamp_pb2
from rank_bm25 import BM25Okapi

from bench.corpus_loading import load_observations
from bench.corpus_loading import wait_for_embeddings
from bench.run_bench import add_run_options
from bench.run_bench import percentiles
from bench.run_bench import run_in_database
from bench.run_bench import services
from bench.service_results import heading
from bench.service_results import machine
from bench.service_results import print_report
from bench.service_results import write_json
from common.kernel.config import Settings
from common.kernel.identifiers import observation_id
from common.text_models.embeddings.factory import build_embedding_provider
from common.text_models.tokenizer import TokenCounter
from memory_service_grpc_client.memory.v1 import context_service_pb2
from memory_service_grpc_client.memory.v1 import context_service_pb2_grpc
from memory_service_grpc_client.memory.v1 import knowledge_pb2
from memory_service_grpc_client.memory.v1 import observation_service_pb2_grpc
from memory_service_grpc_client.memory.v1 import retrieval_service_pb2
from memory_service_grpc_client.memory.v1 import retrieval_service_pb2_grpc
from memory_service_tools.observation_loader import DEFAULT_OBSERVE_CONCURRENCY

DATA = ROOT.parent / "shared" / "corpora" / "locomo-dev" / "locomo-dev.json"
CATEGORIES = {1: "multi-hop", 2: "temporal", 3: "open-domain", 4: "single-hop"}
TOP_KS = (5, 10, 20)
BUDGETS = (1000, 2000)
EVIDENCE = re.compile(r"D:?(\d+):(\d+)")
WORD = re.compile(r"\w+")
SYSTEM = "locomo"


def turns_of(conversation: dict[str, Any], *, captions: bool = True) -> list[dict[str, Any]]:
    """The turns of a conversation in order, each with its session's time (UTC) and the content recorded
    (the text, plus the image caption when ``captions``)."""
    sessions = sorted(
        (int(key.split("_")[1]), value)
        for key, value in conversation.items()
        if re.fullmatch(r"session_\d+", key) and isinstance(value, list)
    )
    turns = []
    for number, session in sessions:
        when = datetime.strptime(conversation[f"session_{number}_date_time"], "%I:%M %p on %d %B, %Y")
        for turn in session:
            content = turn["text"]
            if captions and turn.get("blip_caption"):
                content += f" [shared image: {turn['blip_caption']}]"
            turns.append({**turn, "occurred_at": when.replace(tzinfo=UTC), "content": content})
    return turns


def evidence_ids(raw: list[str], known: set[str]) -> list[str]:
    """The normalised evidence ids of a question that name a turn of its conversation (README rules)."""
    found: list[str] = []
    for item in raw:
        for session, turn in EVIDENCE.findall(item):
            dia_id = f"D{int(session)}:{int(turn)}"
            if dia_id in known and dia_id not in found:
                found.append(dia_id)
    return found


def observation(
    namespace: str, sample_id: str, turn: dict[str, Any], *, speaker_in_data: bool = False
) -> knowledge_pb2.Observation:
    """One turn as an agent records it (module doc); ``speaker_in_data`` adds data {speaker: <name>}, which
    the episode's searchable text then carries as "speaker: <name>"."""
    occurred = timestamp_pb2.Timestamp()
    occurred.FromDatetime(turn["occurred_at"])
    data = struct_pb2.Struct()
    if speaker_in_data:
        data.update({"speaker": turn["speaker"]})
    return knowledge_pb2.Observation(
        namespace=namespace,
        source=knowledge_pb2.ObservationSource(system=SYSTEM, stream=sample_id, external_id=turn["dia_id"]),
        kind="chat.message",
        occurred_at=occurred,
        actor=knowledge_pb2.Participant(type="person", id=turn["speaker"].lower()),
        content=turn["content"],
        data=data,
    )


def fill_pack(
    ranked: list[str], lines: dict[str, str], tokens: dict[str, int], budget: int
) -> tuple[list[str], int]:
    """Baseline pack: "Speaker: content" lines in rank order while they fit ``budget`` (a line that does
    not fit is skipped); returns the dia_ids packed and the tokens used."""
    packed, used = [], 0
    for dia_id in ranked:
        cost = tokens[dia_id] + (1 if packed else 0)
        if used + cost <= budget:
            packed.append(dia_id)
            used += cost
    return packed, used


def packed_turns(
    pack: context_service_pb2.ContextPack, by_episode: dict[str, str], texts: dict[str, str]
) -> set[str]:
    """The turns a service pack holds: an item from a turn's episode (its provenance's node key) whose
    text contains the whole turn text (a turn cut by the budget does not count)."""
    inside = set()
    for item in pack.items:
        dia_id = by_episode.get(item.provenance.node_key)
        if dia_id is not None and texts[dia_id] in item.text:
            inside.add(dia_id)
    return inside


def scores(found: set[str], evidence: list[str]) -> dict[str, float]:
    hit = sum(dia_id in found for dia_id in evidence)
    return {"all": float(hit == len(evidence)), "any": float(hit > 0), "frac": hit / len(evidence)}


def aggregate(rows: list[dict[str, Any]], methods: list[str]) -> dict[str, dict[str, dict[str, float]]]:
    """Per method and category ("all" = categories 1-4): the mean of all/any/frac in percent, and n."""
    table: dict[str, dict[str, dict[str, float]]] = {}
    groups = {"overall": rows} | {
        name: [row for row in rows if row["category"] == number] for number, name in CATEGORIES.items()
    }
    for method in methods:
        table[method] = {}
        for group, members in groups.items():
            if not members:
                continue
            table[method][group] = {
                measure: round(100 * sum(row[method][measure] for row in members) / len(members), 1)
                for measure in ("all", "any", "frac")
            } | {"n": len(members)}
    return table


PER_CONVERSATION = ("service_search@10", "service_pack@1000", "service_pack@2000")


def per_conversation(rows: list[dict[str, Any]], methods: list[str]) -> dict[str, dict[str, float]]:
    """Per conversation (sample_id) and method: ``all`` in percent over its questions, and n."""
    out: dict[str, dict[str, float]] = {}
    for sample_id in dict.fromkeys(row["conversation"] for row in rows):
        members = [row for row in rows if row["conversation"] == sample_id]
        out[sample_id] = {
            method: round(100 * sum(row[method]["all"] for row in members) / len(members), 1)
            for method in methods
        } | {"n": len(members)}
    return out


def timed_call(samples: list[float], call: Callable[[], Any]) -> Any:
    start = time.perf_counter()
    answer = call()
    samples.append((time.perf_counter() - start) * 1000)
    return answer


def parse_arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description="Context quality on locomo-dev (see the module doc).")
    parser.add_argument(
        "--no-captions", action="store_true", help="record the turn text only, without the image captions"
    )
    parser.add_argument(
        "--speaker-in-data",
        action="store_true",
        help="also record data {speaker: <name>} (the episode's searchable text then names the speaker)",
    )
    parser.add_argument(
        "--search-only", action="store_true", help="measure Search only (no CompileContext, no packs)"
    )
    add_run_options(parser)
    return parser.parse_args()


def main() -> int:
    return run_in_database(run, parse_arguments(), "memory_bench_ctx")


def run(arguments: argparse.Namespace, stamp: str) -> int:
    started = time.perf_counter()
    settings = Settings()
    provider = build_embedding_provider(settings)
    counter = TokenCounter(settings.tokenizer_encoding)
    conversations = json.loads(DATA.read_text("utf-8"))
    rows: list[dict[str, Any]] = []
    latency: dict[str, list[float]] = {"search": [], "compile_context": []}
    pack_tokens: dict[str, list[int]] = {
        f"{m}_pack@{b}": [] for m in ("service", "bm25", "dense") for b in BUDGETS
    }
    loaded = {"turns": 0, "created": 0, "seconds": 0.0}
    with services() as (ingest_address, query_address):
        ingest = grpc.insecure_channel(ingest_address, options=[("grpc.max_send_message_length", 64 << 20)])
        query = grpc.insecure_channel(query_address, options=[("grpc.max_receive_message_length", 64 << 20)])
        observe = observation_service_pb2_grpc.ObservationServiceStub(ingest)
        search = retrieval_service_pb2_grpc.RetrievalServiceStub(query)
        context = context_service_pb2_grpc.ContextServiceStub(query)
        for conversation in conversations:
            sample_id = conversation["sample_id"]
            namespace = f"locomo-{sample_id}-{stamp}".lower()
            turns = turns_of(conversation["conversation"], captions=not arguments.no_captions)
            by_episode = {
                f"episode:{observation_id(namespace, SYSTEM, sample_id, turn['dia_id'])}": turn["dia_id"]
                for turn in turns
            }
            load = load_observations(
                observe,
                [
                    observation(namespace, sample_id, turn, speaker_in_data=arguments.speaker_in_data)
                    for turn in turns
                ],
                concurrency=DEFAULT_OBSERVE_CONCURRENCY,
            )
            loaded["turns"] += load["count"]
            loaded["created"] += load["created"]
            loaded["seconds"] += load["seconds"]
            # Episodes are embedded in the background (GetEmbeddingBacklog): measure once vector search
            # sees every turn, as an agent that waits for its memory to settle would.
            embedded = wait_for_embeddings(observe, namespace)
            loaded["embedding_seconds"] = (
                loaded.get("embedding_seconds", 0.0) + embedded["seconds_until_embedded"]
            )
            print(
                f"{sample_id}: {load['count']} turns loaded in {load['seconds']} s, embedded"
                f" {embedded['seconds_until_embedded']} s later ({embedded['left_pending']} left pending)",
                flush=True,
            )

            lines = {turn["dia_id"]: f"{turn['speaker']}: {turn['content']}" for turn in turns}
            texts = {turn["dia_id"]: turn["text"] for turn in turns}
            order = list(lines)
            tokens = {dia_id: counter.count(line) for dia_id, line in lines.items()}
            bm25 = BM25Okapi([WORD.findall(lines[dia_id].lower()) for dia_id in order])
            passages = provider.encode_passages([lines[dia_id] for dia_id in order])
            search.Search(  # warm-up: the query model loads on first use
                retrieval_service_pb2.SearchRequest(namespace=namespace, query="hello", top_k=5), timeout=120
            )
            for question in conversation["qa"]:
                if question.get("category") not in CATEGORIES:
                    continue
                evidence = evidence_ids(question.get("evidence", []), set(lines))
                if not evidence:
                    continue
                text = question["question"]
                row: dict[str, Any] = {"category": question["category"], "conversation": sample_id}
                response = timed_call(
                    latency["search"],
                    lambda n=namespace, q=text: search.Search(
                        retrieval_service_pb2.SearchRequest(namespace=n, query=q, top_k=20),
                        timeout=60,
                    ),
                )
                service_ranked = [by_episode.get(hit.node_key, "") for hit in response.hits]
                bm25_scores = bm25.get_scores(WORD.findall(f"{text}".lower()))
                bm25_ranked = [order[i] for i in np.argsort(-bm25_scores, kind="stable")]
                dense_scores = passages @ provider.encode_query(text)
                dense_ranked = [order[i] for i in np.argsort(-dense_scores, kind="stable")]
                for k in TOP_KS:
                    row[f"service_search@{k}"] = scores(set(service_ranked[:k]), evidence)
                    row[f"bm25_search@{k}"] = scores(set(bm25_ranked[:k]), evidence)
                    row[f"dense_search@{k}"] = scores(set(dense_ranked[:k]), evidence)
                for budget in () if arguments.search_only else BUDGETS:
                    pack = timed_call(
                        latency["compile_context"],
                        lambda b=budget, n=namespace, q=text: context.CompileContext(
                            context_service_pb2.CompileContextRequest(namespace=n, query=q, token_budget=b),
                            timeout=120,
                        ),
                    ).pack
                    inside = packed_turns(pack, by_episode, texts)
                    row[f"service_pack@{budget}"] = scores(inside, evidence)
                    pack_tokens[f"service_pack@{budget}"].append(pack.token_count)
                    for name, ranked in (("bm25", bm25_ranked), ("dense", dense_ranked)):
                        packed, used = fill_pack(ranked, lines, tokens, budget)
                        row[f"{name}_pack@{budget}"] = scores(set(packed), evidence)
                        pack_tokens[f"{name}_pack@{budget}"].append(used)
                rows.append(row)
            print(f"{sample_id}: {len(rows)} questions measured so far", flush=True)

    methods = [key for key in rows[0] if key not in ("category", "conversation")]
    results: dict[str, Any] = {
        "time": stamp,
        "machine": machine(),
        "embedding_provider": settings.embedding_provider,
        "tokenizer": settings.tokenizer_encoding,
        "captions": not arguments.no_captions,
        "speaker_in_data": arguments.speaker_in_data,
        "note": arguments.note,
        "database": "shared (CB_DATABASE_URL as is)"
        if arguments.shared_database
        else "fresh (created for the run)",
        "conversations": [conversation["sample_id"] for conversation in conversations],
        "questions": len(rows),
        "load": loaded | {"seconds": round(loaded["seconds"], 2)},
        "table": aggregate(rows, methods),
        "per_conversation": per_conversation(rows, [m for m in PER_CONVERSATION if m in methods]),
        "pack_tokens_mean": {key: round(sum(v) / len(v), 1) for key, v in pack_tokens.items() if v},
        "search_grpc": percentiles(latency["search"]),
    }
    if latency["compile_context"]:
        results["compile_context_grpc"] = percentiles(latency["compile_context"])
    results["run_seconds"] = round(time.perf_counter() - started, 1)
    write_json(results, prefix="context-quality")
    lines_out = entry(results)
    print_report(lines_out)
    return 0


def entry(results: dict[str, Any]) -> list[str]:
    """The printed report: all (any / frac) in percent per method and category, tokens, latencies."""
    table = results["table"]
    groups = ["overall", *CATEGORIES.values()]
    ns = {
        group: table["service_search@10"][group]["n"]
        for group in groups
        if group in table["service_search@10"]
    }
    lines = [
        heading(results) + " — context quality on locomo-dev (`bench/bench_context_quality.py`)",
        "",
        (
            f"{results['questions']} questions of categories 1-4 over {len(results['conversations'])} conversations"
            f" ({results['load']['turns']} turns, one observation each, loaded in {results['load']['seconds']} s);"
            f" embedding provider {results['embedding_provider']}, tokenizer {results['tokenizer']};"
            f" image captions {'appended to the turn text' if results['captions'] else 'left out'};"
            f" speaker {'also in data' if results['speaker_in_data'] else 'as actor only'};"
            " `all` in percent, `any` / `frac` in brackets for the overall column."
        ),
        "",
        "| method | overall | " + " | ".join(f"{g} (n={ns[g]})" for g in groups[1:] if g in ns) + " |",
        "|---|---|" + "---|" * (len(ns) - 1),
    ]
    for method, figures in table.items():
        overall = figures["overall"]
        tokens = results["pack_tokens_mean"].get(method)
        label = method + (f" (~{tokens:.0f} tokens)" if tokens is not None else "")
        cells = [f"{overall['all']} ({overall['any']} / {overall['frac']})"]
        cells += [str(figures[g]["all"]) for g in groups[1:] if g in figures]
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    if results.get("per_conversation"):
        shown = [m for m in PER_CONVERSATION if m in next(iter(results["per_conversation"].values()))]
        lines += ["", "| conversation (n) | " + " | ".join(f"{m} all" for m in shown) + " |"]
        lines.append("|---|" + "---|" * len(shown))
        for sample_id, figures in results["per_conversation"].items():
            cells = " | ".join(str(figures[m]) for m in shown)
            lines.append(f"| {sample_id} ({figures['n']}) | {cells} |")
    for key, label in (
        ("search_grpc", "Search (top_k 20)"),
        ("compile_context_grpc", "CompileContext (1000 and 2000)"),
    ):
        if key not in results:
            continue
        r = results[key]
        lines.append(f"\n{label} over gRPC, {r['n']} calls: p50 {r['p50_ms']} / p95 {r['p95_ms']} ms.")
    lines.append(f"Run time {results['run_seconds']} s; database {results['database']}.")
    if results.get("note"):
        lines.append(f"Note: {results['note']}")
    return lines


if __name__ == "__main__":
    sys.exit(main())

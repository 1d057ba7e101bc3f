"""Section titles as queries over the docs vault: the top of Search's ranking next to stemmed BM25, the
docs-vault sentence search, and Search latency and CPU per call at about 10k chunks, in one run through
gRPC against real service processes.

Data: the docs vault's Markdown pages (``../shared/corpora/docs-vault``, 398 pages, about 9,600 chunks),
each retained as its Markdown file (Retain with the original bytes, natural key ``doc:<path>``), all in
one namespace. Stands in for a held-out manual whose section titles are the queries.

Queries:

* **titles**: the section titles (Markdown headings, their text as rendered) that head a section of
  exactly one page (compared case-insensitively; "Description" or "See also" name no page), at most
  ``--per-page`` of them per page drawn with a fixed seed, so long reference pages do not dominate.
  The page is the one relevant document. Measures over the distinct pages of the first 10 hits:
  MRR@10, hit@1, hit@10 and nDCG@10 (one relevant document: 1 / log2(rank + 1)).
* **sentences**: a distinctive sentence per page (`tests.document_corpus.distinctive_sentences`, as
  `bench/bench_documents.py` searches them): hit@5 (Search with top_k 5).

Methods: the service's Search for each preset given with ``--presets`` (empty name: the server's
default); ``bm25``: stemmed BM25 over the stored chunks' lexemes, the code of `bench.bench_retrieval`
(`stored_chunks`, `query_lexemes`, `chunk_bm25`, `bm25_ranking`), so its stemming equals the service's.

Latency: every title Search over gRPC (one client, sequential) gives p50/p95 per preset, and CPU per call:
the query service process plus the database backends of the run's database (user + system time from
/proc before and after the preset's calls, divided by the calls), which does not depend on what else the
machine runs as much as the wall-clock figures do.

A/B (``--baseline-tree DIR``): a second query service from another checkout on the same database; every
title Search runs in blocks, one block per tree and round, the order of the trees alternating round by
round (``--rounds``), after one pass per tree that is not measured (it fills the caches), each block with its latencies and CPU per call (that tree's query service and the
database backends; the other service idles meanwhile), and, with ``--compile-queries N``, a block of
CompileContext (budget 1500) for the first N titles after each Search block. The trees' responses to every
title and sentence query (and the packs, trace id cleared) are compared byte for byte (deterministic
serialisation): ``identical_responses``. ``--namespace`` searches a namespace this benchmark loaded before
(with ``--shared-database``), without Retain.

Usage: .venv/bin/python bench/bench_title_search.py [--presets documents,] [--per-page 3] [--sample N]
[--namespace NAME] [--baseline-tree DIR] [--rounds 2] [--compile-queries N] [--note TEXT]
[--shared-database]. Results go to bench/results/title-search-<UTC time>.json (and are
printed).
"""

from __future__ import annotations

import argparse
import math
import os
import random
import re
import sys
import time
from collections.abc import Callable
from contextlib import ExitStack
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import grpc
import psycopg

from bench.bench_retrieval import bm25_ranking
from bench.bench_retrieval import chunk_bm25
from bench.bench_retrieval import distinct
from bench.bench_retrieval import query_lexemes
from bench.bench_retrieval import stored_chunks
from bench.run_bench import add_run_options
from bench.run_bench import percentiles
from bench.run_bench import run_in_database
from bench.run_bench import services
from bench.service_results import cpu_seconds
from bench.service_results import heading
from bench.service_results import load_average
from bench.service_results import machine
from bench.service_results import print_report
from bench.service_results import tree_commit
from bench.service_results import write_json
from common.kernel.config import Settings
from ingest_service.documents.conversion import media_types
from memory_service_grpc_client.memory.v1 import context_service_pb2
from memory_service_grpc_client.memory.v1 import context_service_pb2_grpc
from memory_service_grpc_client.memory.v1 import document_service_pb2
from memory_service_grpc_client.memory.v1 import document_service_pb2_grpc
from memory_service_grpc_client.memory.v1 import retrieval_service_pb2
from memory_service_grpc_client.memory.v1 import retrieval_service_pb2_grpc
from tests.document_corpus import VAULT
from tests.document_corpus import CorpusDocument
from tests.document_corpus import distinctive_sentences
from tests.document_corpus import vault_pages

CUTOFF = 10
SENTENCE_CUTOFF = 5
SEED = 20261207
FRONT_MATTER = re.compile(r"\A---\n.*?\n(?:---|\.\.\.)\n", re.DOTALL)


def section_titles(markdown: str) -> list[str]:
    """The text of every heading of ``markdown`` as rendered (CommonMark: emphasis, code spans and links
    reduced to their text; front matter blocks at the start skipped), in document order."""
    from markdown_it import MarkdownIt

    body, stripped = markdown, 1
    while stripped:  # a vault page's front matter may be followed by the original page's own
        body, stripped = FRONT_MATTER.subn("", body.lstrip("\n"))
    tokens = MarkdownIt("commonmark").parse(body)
    titles = []
    for index, token in enumerate(tokens[:-1]):
        if token.type == "heading_open":
            inline = tokens[index + 1]
            text = "".join(
                " " if child.type == "softbreak" else child.content
                for child in inline.children or []
                if child.type in ("text", "code_inline", "softbreak")
            )
            text = " ".join(text.split())
            if any(character.isalpha() for character in text):
                titles.append(text)
    return titles


def title_queries(documents: list[CorpusDocument], per_page: int, seed: int = SEED) -> list[tuple[str, str]]:
    """(page key, title) pairs: titles that head a section of exactly one page, at most ``per_page`` per
    page drawn with ``seed`` (module doc)."""
    titles = {d.key: list(dict.fromkeys(section_titles(d.markdown.read_text("utf-8")))) for d in documents}
    pages_of: dict[str, set[str]] = {}
    for key, page_titles in titles.items():
        for title in page_titles:
            pages_of.setdefault(title.casefold(), set()).add(key)
    rng = random.Random(seed)
    chosen: list[tuple[str, str]] = []
    for key in sorted(titles):
        unique = [title for title in titles[key] if len(pages_of[title.casefold()]) == 1]
        rng.shuffle(unique)
        chosen.extend((key, title) for title in unique[:per_page])
    return chosen


def title_measures(ranked: list[str], relevant: str) -> dict[str, float]:
    """MRR@10, hit@1, hit@10 and nDCG@10 of one ranking of documents with one relevant document."""
    top = distinct(ranked)[:CUTOFF]
    rank = top.index(relevant) + 1 if relevant in top else 0
    return {
        "mrr": 1 / rank if rank else 0.0,
        "hit1": float(rank == 1),
        "hit10": float(rank > 0),
        "ndcg": 1 / math.log2(rank + 1) if rank else 0.0,
    }


def mean(rows: list[dict[str, float]], key: str) -> float:
    return round(sum(row[key] for row in rows) / len(rows), 4) if rows else 0.0


def child_pid(address: str) -> int:
    """The process id of this process's child that serves ``address`` (its CB_QUERY_ADDR)."""
    for entry in Path("/proc").glob("[0-9]*"):
        try:
            if int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1]) != os.getpid():
                continue
            environment = (entry / "environ").read_bytes().split(b"\0")
        except (OSError, ValueError, IndexError):
            continue
        if (
            f"CB_QUERY_ADDR={address}".encode() in environment
            and b"query" in (entry / "cmdline").read_bytes()
        ):
            return int(entry.name)
    raise RuntimeError(f"no child process serves {address}")


def database_backends(url: str) -> list[int]:
    """The backends connected to the database of ``url`` (the run's services), but not this reader."""
    with psycopg.connect(url, autocommit=True) as conn:
        return [
            int(row[0])
            for row in conn.execute(
                "SELECT pid FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()"
            ).fetchall()
        ]


def parse_arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description="Section titles as queries over the docs vault (module doc)."
    )
    parser.add_argument(
        "--presets", default="", help="comma-separated SearchRequest.preset names ('' = the server's default)"
    )
    parser.add_argument("--per-page", type=int, default=3, help="titles drawn per page (default 3)")
    parser.add_argument("--sample", type=int, help="pages of the vault drawn at random (default: all 398)")
    parser.add_argument(
        "--namespace",
        default="",
        help="search this namespace, already holding the docs vault as this benchmark retains it (with"
        " --shared-database; no Retain, no ingest service)",
    )
    parser.add_argument(
        "--baseline-tree", default="", help="checkout whose query service is the A/B baseline (module doc)"
    )
    parser.add_argument(
        "--rounds",
        type=int,
        default=2,
        help="A/B rounds, each one block per tree, order alternating (default 2)",
    )
    parser.add_argument(
        "--compile-queries",
        type=int,
        default=0,
        help="with --baseline-tree: CompileContext (budget 1500) for the first N titles in each block (default 0)",
    )
    add_run_options(parser)
    return parser.parse_args()


def main() -> int:
    return run_in_database(run, parse_arguments(), "memory_bench_titles")


def retain_vault(address: str, namespace: str, documents: list[CorpusDocument]) -> float:
    """Retains every page of ``documents`` into ``namespace`` (module doc); returns the seconds taken."""
    retain = document_service_pb2_grpc.DocumentServiceStub(grpc.insecure_channel(address))
    load_started = time.perf_counter()
    for document in documents:
        retain.Retain(
            document_service_pb2.RetainRequest(
                namespace=namespace,
                natural_key=f"doc:{document.key}",
                original=document.markdown.read_bytes(),
                media_type=media_types.MARKDOWN,
                source_path=f"{document.key}.md",
            ),
            timeout=600,
        )
    return time.perf_counter() - load_started


def cpu_of_block(service_pid: int, url: str, calls: list[Callable[[], Any]]) -> dict[str, Any]:
    """Runs ``calls`` one after another: their latencies and the CPU per call of the query service
    ``service_pid`` and the run database's backends (module doc)."""
    before = {pid: cpu_seconds(pid) for pid in [service_pid, *database_backends(url)]}
    load_before = load_average()
    samples: list[float] = []
    for call in calls:
        begin = time.perf_counter()
        call()
        samples.append((time.perf_counter() - begin) * 1000)
    after = {pid: cpu_seconds(pid) for pid in {*before, *database_backends(url)}}
    # A backend that exited meanwhile (the pool replaced a connection) reads 0: its share is not counted
    # rather than its whole lifetime subtracted.
    cpu = sum(used - before.get(pid, 0.0) for pid, used in after.items() if used > 0.0)
    return {
        **percentiles(samples),
        "cpu_ms_per_call": round(1000 * cpu / len(samples), 2),
        "load_average": [load_before, load_average()],
    }


def pooled(blocks: list[dict[str, Any]]) -> dict[str, Any]:
    """The blocks of one tree together: the mean of their p50, p95 and CPU per call, and each block's."""
    return {
        **{
            key: round(sum(block[key] for block in blocks) / len(blocks), 2)
            for key in ("p50_ms", "p95_ms", "cpu_ms_per_call")
        },
        "blocks": blocks,
    }


def run(arguments: argparse.Namespace, stamp: str) -> int:
    started = time.perf_counter()
    settings = Settings()
    documents = [
        CorpusDocument(key=str(path.relative_to(VAULT).with_suffix("")), markdown=path, files={})
        for path in vault_pages(arguments.sample)
    ]
    titles = title_queries(documents, arguments.per_page)
    sentences = distinctive_sentences(documents)
    namespace = arguments.namespace or f"titles-{stamp}".lower()
    presets = list(dict.fromkeys(arguments.presets.split(",")))
    trees = {"this tree": ROOT}
    if arguments.baseline_tree:
        trees["baseline"] = Path(arguments.baseline_tree)
    rows: dict[str, list[dict[str, float]]] = {}
    sentence_hits: dict[str, float] = {}
    sentence_misses: dict[str, list[dict[str, Any]]] = {}
    latency: dict[str, dict[str, Any]] = {}
    ab: dict[str, Any] = {}
    load_seconds = 0.0
    with ExitStack() as stack:
        ingest_address, query_address = stack.enter_context(
            services(kinds=("query",) if arguments.namespace else ("ingest", "query"))
        )
        addresses = {"this tree": query_address}
        if arguments.baseline_tree:
            addresses["baseline"] = stack.enter_context(services(root=trees["baseline"], kinds=("query",)))[1]
        if not arguments.namespace:
            load_seconds = retain_vault(ingest_address, namespace, documents)
        channels = {name: grpc.insecure_channel(address) for name, address in addresses.items()}
        searches = {name: retrieval_service_pb2_grpc.RetrievalServiceStub(c) for name, c in channels.items()}
        contexts = {name: context_service_pb2_grpc.ContextServiceStub(c) for name, c in channels.items()}
        for search in searches.values():
            search.Search(
                retrieval_service_pb2.SearchRequest(namespace=namespace, query="warm-up"), timeout=120
            )
        pids = {name: child_pid(address) for name, address in addresses.items()}

        def response(tree: str, query: str, preset: str, top_k: int) -> retrieval_service_pb2.SearchResponse:
            request = retrieval_service_pb2.SearchRequest(namespace=namespace, query=query, top_k=top_k)
            request.preset = preset
            return searches[tree].Search(request, timeout=60)  # type: ignore[no-any-return]

        def ranked(query: str, preset: str, top_k: int) -> list[str]:
            return [hit.node_key for hit in response("this tree", query, preset, top_k).hits]

        def compiled(tree: str, query: str) -> bytes:
            pack = (
                contexts[tree]
                .CompileContext(
                    context_service_pb2.CompileContextRequest(
                        namespace=namespace, query=query, token_budget=1500
                    ),
                    timeout=120,
                )
                .pack
            )
            pack.trace_id = ""  # new for every call
            return pack.SerializeToString(deterministic=True)  # type: ignore[no-any-return]

        for preset in presets:
            method = f"service[{preset or 'server default'}]"
            blocks: dict[str, dict[str, list[dict[str, Any]]]] = {
                name: {"search": [], "compile_context": []} for name in trees
            }
            answers: dict[str, dict[str, list[bytes]]] = {name: {} for name in trees}
            if arguments.baseline_tree:
                # One pass per tree, not measured: the first pass fills the caches of the service and of
                # the database; measured, it costs the tree that runs first about 30% more CPU per call
                # (an A/A run of one checkout against itself).
                for name in trees:
                    for _, title in titles:
                        response(name, title, preset, CUTOFF)
                    for _, title in titles[: arguments.compile_queries]:
                        compiled(name, title)
            for round_number in range(arguments.rounds if arguments.baseline_tree else 1):
                for name in list(trees) if round_number % 2 == 0 else list(trees)[::-1]:
                    found: list[bytes] = []
                    block = cpu_of_block(
                        pids[name],
                        settings.database_url,
                        [
                            lambda t=title, n=name: found.append(
                                response(n, t, preset, CUTOFF).SerializeToString(deterministic=True)
                            )
                            for _, title in titles
                        ],
                    )
                    blocks[name]["search"].append(block)
                    answers[name].setdefault("titles", found)
                    if arguments.compile_queries and arguments.baseline_tree:
                        packs: list[bytes] = []
                        blocks[name]["compile_context"].append(
                            cpu_of_block(
                                pids[name],
                                settings.database_url,
                                [
                                    lambda t=title, n=name: packs.append(compiled(n, t))
                                    for _, title in titles[: arguments.compile_queries]
                                ],
                            )
                        )
                        answers[name].setdefault("packs", packs)
            rows[method] = [
                title_measures(
                    [hit.node_key for hit in retrieval_service_pb2.SearchResponse.FromString(raw).hits],
                    f"doc:{key}",
                )
                for (key, _), raw in zip(titles, answers["this tree"]["titles"], strict=True)
            ]
            if not arguments.baseline_tree:
                latency[method] = blocks["this tree"]["search"][0]
            else:
                for name in trees:
                    answers[name]["sentences"] = [
                        response(name, text, preset, SENTENCE_CUTOFF).SerializeToString(deterministic=True)
                        for _, text in sentences
                    ]
                latency[method] = pooled(blocks["this tree"]["search"])
                ab[method] = {
                    "trees": {
                        name: {
                            "root": str(root),
                            "commit": tree_commit(root),
                            **{kind: pooled(values) for kind, values in blocks[name].items() if values},
                        }
                        for name, root in trees.items()
                    },
                    "identical_responses": {
                        kind: {
                            "same": sum(
                                a == b
                                for a, b in zip(
                                    answers["this tree"][kind], answers["baseline"][kind], strict=True
                                )
                            ),
                            "of": len(answers["this tree"][kind]),
                        }
                        for kind in answers["this tree"]
                    },
                }
            sentence_misses[method] = []
            for key, text in sentences:
                found = ranked(text, preset, SENTENCE_CUTOFF)
                if f"doc:{key}" not in found:
                    sentence_misses[method].append({"page": key, "sentence": text, "found": found})
            sentence_hits[method] = round(1 - len(sentence_misses[method]) / len(sentences), 4)

    with psycopg.connect(settings.database_url) as conn:
        stored = stored_chunks(conn, settings, namespace)
        title_lexemes = [query_lexemes(conn, settings, title) for _, title in titles]
        sentence_lexemes = [query_lexemes(conn, settings, text) for _, text in sentences]
    keys = [row[0] for row in stored]
    bm25 = chunk_bm25(stored)
    rows["bm25"] = [
        title_measures(bm25_ranking(bm25, keys, lexemes), f"doc:{key}")
        for (key, _), lexemes in zip(titles, title_lexemes, strict=True)
    ]
    sentence_hits["bm25"] = round(
        sum(
            f"doc:{key}" in bm25_ranking(bm25, keys, lexemes)[:SENTENCE_CUTOFF]
            for (key, _), lexemes in zip(sentences, sentence_lexemes, strict=True)
        )
        / len(sentences),
        4,
    )
    results: dict[str, Any] = {
        "time": stamp,
        "machine": machine(),
        "load_average": load_average(),
        "embedding_provider": settings.embedding_provider,
        "text_search_config": settings.text_search_config,
        "note": arguments.note,
        "database": "shared (CB_DATABASE_URL as is)"
        if arguments.shared_database
        else "fresh (created for the run)",
        "pages": len(documents),
        "chunks": len(stored),
        "title_queries": len(titles),
        "sentence_queries": len(sentences),
        "load_seconds": round(load_seconds, 1),
        "table": {
            method: {
                **{key: mean(values, key) for key in ("mrr", "hit1", "hit10", "ndcg")},
                "sentence_hit5": sentence_hits[method],
            }
            for method, values in rows.items()
        },
        "search_grpc": latency,
        "sentence_misses": sentence_misses,
        "namespace": namespace,
        "ab": ab,
    }
    results["run_seconds"] = round(time.perf_counter() - started, 1)
    write_json(results, prefix="title-search")
    print_report(entry(results), results["note"])
    return 0


def entry(results: dict[str, Any]) -> list[str]:
    """The printed report: one row per method, latencies below."""
    lines = [
        heading(results) + " — section titles as queries over the docs vault (`bench/bench_title_search.py`)",
        "",
        (
            f"{results['title_queries']} titles and {results['sentence_queries']} sentences over"
            f" {results['pages']} pages ({results['chunks']} chunks, Retain in {results['load_seconds']} s);"
            f" embedding provider {results['embedding_provider']}; load average {results['load_average']}."
        ),
        "",
        "| method | MRR@10 | hit@1 | hit@10 | nDCG@10 | sentence hit@5 |",
        "|---|---|---|---|---|---|",
    ]
    for method, figures in results["table"].items():
        cells = [figures[key] for key in ("mrr", "hit1", "hit10", "ndcg", "sentence_hit5")]
        lines.append(f"| {method} | " + " | ".join(str(cell) for cell in cells) + " |")
    lines.append("")
    for method, figures in results["search_grpc"].items():
        if "load_average" not in figures:  # an A/B run: the blocks are reported below
            continue
        lines.append(
            f"Search {method} over gRPC: p50 {figures['p50_ms']} / p95 {figures['p95_ms']} ms,"
            f" CPU {figures['cpu_ms_per_call']} ms per call (service + database), load average"
            f" {figures['load_average'][0]} -> {figures['load_average'][1]}."
        )
    for method, comparison in results.get("ab", {}).items():
        lines.append("")
        lines.append(f"A/B {method}, blocks alternating (mean of the blocks; CPU: service + database):")
        for name, tree in comparison["trees"].items():
            for kind in ("search", "compile_context"):
                if kind in tree:
                    figures = tree[kind]
                    lines.append(
                        f"- {name} ({tree['commit']}) {kind}: p50 {figures['p50_ms']} / p95 {figures['p95_ms']} ms,"
                        f" CPU {figures['cpu_ms_per_call']} ms per call, per block"
                        f" {[block['cpu_ms_per_call'] for block in figures['blocks']]}"
                    )
        same = ", ".join(
            f"{kind} {v['same']}/{v['of']}" for kind, v in comparison["identical_responses"].items()
        )
        lines.append(f"- responses byte-identical between the trees: {same}")
    lines.append(f"Run time {results['run_seconds']} s; database {results['database']}.")
    return lines


if __name__ == "__main__":
    sys.exit(main())

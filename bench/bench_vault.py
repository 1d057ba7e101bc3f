"""Vault ingest on the real docs vault, through gRPC against real service processes.

Measures, in one run, each ingest in an empty database of its own (dropped afterwards):

* the full vault ingest: the 398 files of ``shared/corpora/docs-vault`` sent by `cb ingest`'s stream
  (`memory_service_tools.cli.vault_commands.vault_messages`) to ``VaultService.IngestVault`` of a
  ``cb serve ingest`` process into an empty namespace: wall seconds and chunks/s (chunks embedded /
  wall time);
* the floor: the embedding model's own throughput on the same texts (each chunk's
  ``"<title> — <heading>\\n<text>"``, cut exactly as the server cuts them, encoded per document as the
  server batches them) in this process, measured before and after the ingest (the machine is shared:
  their spread shows the noise), reported as the ratio ingest chunks/s / floor chunks/s;
* the unchanged re-run: the same stream again (every document only marked seen): wall seconds, and the
  chunks it embedded (0);
* the load average (1 min) at each step.

Results: printed, written to bench/results/vault-<UTC time>.json.

With ``--base-root DIR`` (another checkout, e.g. a ``git worktree`` of an older commit) the service of that
tree ingests the vault too, the trees alternating per round (``--rounds N``). Every ingest runs in an
empty database of its own (`run_bench.fresh_database`), or with ``--shared-database`` in
``CB_DATABASE_URL`` itself; the floor is this tree's model. The report's first row is this tree's first
ingest; every ingest is listed with its tree's commit.

Usage: ``.venv/bin/python bench/bench_vault.py [--note TEXT] [--shared-database] [--every N]
[--base-root DIR] [--rounds N]`` (``--every`` measures a sample: every N-th file in path order) (the
database must be up: ``make db``).
"""

from __future__ import annotations

import argparse
import sys
import time
import uuid
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import grpc

from bench.run_bench import fresh_database
from bench.run_bench import run_in_database
from bench.run_bench import services
from bench.service_results import heading
from bench.service_results import load_average
from bench.service_results import machine
from bench.service_results import print_report
from bench.service_results import tree_commit
from bench.service_results import write_json
from common.kernel.config import Settings
from common.storage.chunks.store import embedding_input
from common.text_models.embeddings.factory import build_embedding_provider
from ingest_service.documents.chunking import bounded_chunks
from ingest_service.documents.chunking import chunk_markdown
from ingest_service.documents.front_matter import strip_front_matter
from ingest_service.vault.documents import VaultFile
from ingest_service.vault.documents import parse_file
from memory_service_grpc_client.memory.v1 import vault_service_pb2_grpc
from memory_service_tools.cli.vault_commands import vault_messages
from memory_service_tools.vault_source import VaultSource
from memory_service_tools.vault_source import directory_documents

VAULT = ROOT.parent / "shared" / "corpora" / "docs-vault"


def chunk_texts(source: VaultSource, settings: Settings) -> list[list[str]]:
    """Per document, the embedding inputs of its chunks, as the server computes them."""
    texts = []
    for index, document in enumerate(source.documents):
        parsed = parse_file("bench", VaultFile(document.path, document.content), index).retain
        title = parsed.title or parsed.natural_key
        pieces = bounded_chunks(
            [
                (c.heading, c.text)
                for c in chunk_markdown(strip_front_matter(parsed.content), settings.chunk_max_chars)
            ]
        )
        texts.append(list(dict.fromkeys(embedding_input(title, heading, text) for heading, text in pieces)))
    return texts


def floor(provider: Any, texts: list[list[str]]) -> dict[str, float]:
    """The model alone on ``texts``: seconds and texts/s."""
    count = sum(len(batch) for batch in texts)
    start = time.perf_counter()
    for batch in texts:
        if batch:
            provider.encode_passages(batch)
    seconds = time.perf_counter() - start
    return {
        "seconds": round(seconds, 2),
        "chunks": count,
        "per_second": round(count / seconds, 1),
        "load": load_average(),
    }


def ingest_twice(source: VaultSource, root: Path, database_url: str) -> dict[str, Any]:
    """The vault sent twice to a fresh ``cb serve ingest`` of the checkout at ``root`` (started with this
    interpreter, the code of ``root`` first on its path) writing to ``database_url``, into a new
    namespace: ``full`` (every document new) and ``unchanged`` (the same stream again), each with its
    figures."""
    namespace = "bench-vault-" + uuid.uuid4().hex[:8]
    runs: dict[str, Any] = {"commit": tree_commit(root)}
    with (
        services(root=root, kinds=("ingest",), extra_env={"CB_DATABASE_URL": database_url}) as (
            ingest_address,
            _,
        ),
        grpc.insecure_channel(ingest_address) as channel,
    ):
        stub = vault_service_pb2_grpc.VaultServiceStub(channel)
        for name in ("full", "unchanged"):
            load = load_average()
            start = time.perf_counter()
            response = stub.IngestVault(vault_messages(source, namespace), timeout=7200)
            seconds = time.perf_counter() - start
            counts = response.counts
            runs[name] = {
                "seconds": round(seconds, 2),
                "chunks_embedded": counts.chunks_embedded,
                "chunks_written": counts.chunks_written,
                "documents_new": counts.documents_new,
                "documents_unchanged": counts.documents_unchanged,
                "links_resolved": counts.links_resolved,
                "links_unresolved": counts.links_unresolved,
                "chunks_per_second": round(counts.chunks_embedded / seconds, 1),
                "load_before": load,
                "load_after": load_average(),
            }
            print(root.name, name, runs[name], flush=True)
    return runs


def run(arguments: argparse.Namespace, stamp: str) -> int:
    settings = Settings()
    source = directory_documents(VAULT)
    if arguments.every > 1:  # a sample spread over the whole vault (every n-th file in path order)
        source = VaultSource(source.documents[:: arguments.every], source=source.source)
    texts = chunk_texts(source, settings)
    provider = build_embedding_provider(settings)
    provider.encode_passages(["warm-up"])
    results: dict[str, Any] = {
        "time": stamp,
        "machine": machine(),
        "note": arguments.note,
        "documents": len(source.documents),
    }
    results["floor_before"] = floor(provider, texts)
    print("floor before", results["floor_before"], flush=True)
    variants = [("this", ROOT)]
    if arguments.base_root:
        variants.append(("base", Path(arguments.base_root).resolve()))
    ingests: list[dict[str, Any]] = []
    for round_ in range(1, arguments.rounds + 1):
        # the order alternates per round, so neither tree always runs first while the machine drifts
        for name, root in variants if round_ % 2 else list(reversed(variants)):
            if arguments.shared_database:  # every ingest next to what CB_DATABASE_URL holds
                ingests.append(
                    {"variant": name, "round": round_, **ingest_twice(source, root, settings.database_url)}
                )
                continue
            # each ingest in an empty database of its own: a later ingest into a fuller table (its HNSW
            # graph) is slower, 83 against 96 s for the same tree in 045243Z
            database = f"memory_bench_vault_{stamp.lower()}_{round_}_{name}"
            with fresh_database(settings.database_url, database) as url:
                ingests.append({"variant": name, "round": round_, **ingest_twice(source, root, url)})
    runs = {"full": ingests[0]["full"], "unchanged": ingests[0]["unchanged"]}
    results["floor_after"] = floor(provider, texts)
    print("floor after", results["floor_after"], flush=True)
    results.update(runs)
    results["ingests"] = ingests
    floor_rate = (results["floor_before"]["per_second"] + results["floor_after"]["per_second"]) / 2
    results["ratio_to_floor"] = round(runs["full"]["chunks_per_second"] / floor_rate, 3)
    write_json(results, prefix="vault")
    full, unchanged = runs["full"], runs["unchanged"]
    sample = f", every {arguments.every}th file of the vault" if arguments.every > 1 else ""
    lines = [
        heading(results),
        "",
        (
            "Vault ingest (`bench/bench_vault.py`): the docs vault through `VaultService.IngestVault`"
            " (`cb ingest`'s stream, a `cb serve ingest` process, fresh database); floor = the embedding model"
            " alone on the same chunk texts in the bench process, before and after."
        ),
        *([f"Note: {arguments.note}"] if arguments.note else []),
        "",
        "| measure | figure | load avg (1 min) |",
        "|---|---|---|",
        (
            f"| full ingest ({results['documents']} documents{sample}, {full['chunks_embedded']} chunks embedded,"
            f" {full['links_resolved']} links resolved, {full['links_unresolved']} unresolved) |"
            f" {full['seconds']} s ({full['chunks_per_second']} chunks/s) | {full['load_before']} -> {full['load_after']} |"
        ),
        (
            f"| floor: the model alone on the same texts, before / after |"
            f" {results['floor_before']['per_second']} / {results['floor_after']['per_second']} chunks/s |"
            f" {results['floor_before']['load']} / {results['floor_after']['load']} |"
        ),
        f"| full ingest / floor | {results['ratio_to_floor']} | |",
        (
            f"| unchanged re-run ({unchanged['documents_unchanged']} unchanged,"
            f" {unchanged['chunks_embedded']} chunks embedded) |"
            f" {unchanged['seconds']} s | {unchanged['load_before']} -> {unchanged['load_after']} |"
        ),
    ]
    if len(ingests) > 1:
        lines += [
            "",
            (
                "Every full ingest of the run (`--rounds`, `--base-root`: trees alternating, each into an empty"
                " database of its own):"
            ),
            "",
            "| round | tree (commit) | full ingest s | chunks/s | unchanged re-run s | load avg (1 min) |",
            "|---|---|---|---|---|---|",
        ]
        for ingest in ingests:
            full_run = ingest["full"]
            lines.append(
                f"| {ingest['round']} | {ingest['variant']} ({ingest['commit']}) | {full_run['seconds']} |"
                f" {full_run['chunks_per_second']} | {ingest['unchanged']['seconds']} |"
                f" {full_run['load_before']} -> {full_run['load_after']} |"
            )
    print_report(lines)
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description="Vault ingest benchmark (see the module doc).")
    parser.add_argument("--note", default="", help="a line added to the entry")
    parser.add_argument(
        "--base-root", default="", help="another checkout whose service is measured too, alternating (A/B)"
    )
    parser.add_argument("--rounds", type=int, default=1, help="full ingests per tree (default 1)")
    parser.add_argument("--shared-database", action="store_true", help="measure in CB_DATABASE_URL itself")
    parser.add_argument(
        "--every", type=int, default=1, help="only every n-th file of the vault (default 1: the whole vault)"
    )
    return run_in_database(run, parser.parse_args(), "memory_bench_vault")


if __name__ == "__main__":
    raise SystemExit(main())

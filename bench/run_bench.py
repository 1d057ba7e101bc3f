"""Benchmark on the real corpora, through gRPC against real service processes.

Measures, in one run on one machine:
- observations/s: the whole debian upload stream (5,415 observations) sent by one client in batches of 200
  into a fresh namespace (fact ids and `supersedes` recomputed for it, docs/explanation/knowledge-model.md),
  wall time of the load, twice: strictly sequentially (one call in flight, the baseline) and the way `cb
  observe` sends (`memory_service_tools.observation_loader.record_observations` with its default concurrency), each
  into its own namespace, reported with their ratio; then the same from 16 concurrent clients (ratio to the
  sequential client);
- chunks/s: the whole docs vault (398 Markdown files) retained by one client, chunks written / wall time;
- Search, ListFacts, CompileContext latency p50/p95/p99 over 200 queries each, one client, sequential;
- the same 200 searches done in-process as raw SQL (query embedding + the three candidate queries + fusion,
  no gRPC, no service) in the same run, reported as the ratio gRPC / raw; and in-process with the three
  rankings one after another (``SearchSettings.concurrent_rankings=False``, the baseline) alternating
  with the concurrent ones, reported as the p95 ratio concurrent / sequential.

Results are printed (with the machine's description) and written as JSON to
bench/results/service-<UTC time>.json. Targets: debian ingest <= 60 s, Search p95 <= 100 ms,
ListFacts p95 <= 10 ms.

Usage: .venv/bin/python bench/run_bench.py [--observations-only] [--note TEXT] [--shared-database]
[--change-feed off]  (the
embedded database must be up: `make db`). By default the run creates a fresh database on the server of
``CB_DATABASE_URL`` and drops it afterwards, so figures do not depend on leftovers of earlier runs and
tests; ``--shared-database`` measures in ``CB_DATABASE_URL`` itself (a multi-tenant table). ``--observations-only`` measures the two 1-client observation loads only and
prints them (JSON written). ``--note`` adds a line to the entry, e.g.
"taken under load from other processes". ``--change-feed off`` runs everything with the change feed's
outbox switched off (``PGOPTIONS=-c memory.change_feed=off`` for this process and the services it starts:
nothing is recorded; docs/how-to/change-feed.md, "What the feed costs").
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import time
import zlib
from collections.abc import Callable
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from datetime import UTC
from datetime import datetime
from pathlib import Path
from typing import Any

import grpc
import psycopg
import psycopg.conninfo
import psycopg.sql
from google.protobuf import timestamp_pb2

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.corpus_loading import UPLOADS
from bench.corpus_loading import VAULT
from bench.corpus_loading import debian_observations
from bench.corpus_loading import distinctive_sentences
from bench.corpus_loading import load_observations
from bench.corpus_loading import wait_for_embeddings
from bench.service_results import machine
from bench.service_results import write_json
from bench.service_results import write_results
from common.kernel.config import Settings
from common.kernel.identifiers import graph_label
from memory_service_grpc_client import wait_for_serving
from memory_service_grpc_client.memory.v1 import context_service_pb2
from memory_service_grpc_client.memory.v1 import context_service_pb2_grpc
from memory_service_grpc_client.memory.v1 import document_service_pb2_grpc
from memory_service_grpc_client.memory.v1 import fact_query_service_pb2
from memory_service_grpc_client.memory.v1 import fact_query_service_pb2_grpc
from memory_service_grpc_client.memory.v1 import knowledge_pb2
from memory_service_grpc_client.memory.v1 import observation_service_pb2
from memory_service_grpc_client.memory.v1 import observation_service_pb2_grpc
from memory_service_grpc_client.memory.v1 import retrieval_service_pb2
from memory_service_grpc_client.memory.v1 import retrieval_service_pb2_grpc
from memory_service_tools.markdown_vault import find_documents
from memory_service_tools.markdown_vault import read_document
from memory_service_tools.observation_loader import DEFAULT_OBSERVE_CONCURRENCY

QUERIES = 200
def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextmanager
def services(
    *,
    root: Path = ROOT,
    extra_env: dict[str, str] | None = None,
    kinds: tuple[str, ...] = ("ingest", "query"),
) -> Iterator[tuple[str, str]]:
    """Starts `cb serve ingest` and `cb serve query` (or only ``kinds``) as separate processes on free
    ports, from the code tree ``root`` (another checkout measures its code against the same database),
    with ``extra_env`` added to the environment; yields the two addresses ("" for a kind not started)."""
    addresses = {kind: f"127.0.0.1:{free_port()}" for kind in ("ingest", "query")}
    env = dict(
        os.environ,
        CB_INGEST_ADDR=addresses["ingest"],
        CB_QUERY_ADDR=addresses["query"],
        CB_INGEST_METRICS_PORT="0",
        CB_QUERY_METRICS_PORT="0",
        **(extra_env or {}),
    )
    children = [
        subprocess.Popen([sys.executable, "-m", "memory_service_tools.cli", "serve", kind], cwd=root, env=env)
        for kind in kinds
    ]
    try:
        for kind in kinds:
            if not wait_for_serving(addresses[kind], timeout=180):
                raise RuntimeError(f"service at {addresses[kind]} did not become SERVING")
        yield tuple(addresses[kind] if kind in kinds else "" for kind in ("ingest", "query"))  # type: ignore[misc]
    finally:
        for child in children:
            child.terminate()
        for child in children:
            child.wait(30)


def percentiles(samples_ms: list[float]) -> dict[str, float]:
    ordered = sorted(samples_ms)
    quantiles = statistics.quantiles(ordered, n=100, method="inclusive")
    return {
        "p50_ms": round(quantiles[49], 2),
        "p95_ms": round(quantiles[94], 2),
        "p99_ms": round(quantiles[98], 2),
        "mean_ms": round(statistics.fmean(ordered), 2),
        "n": len(ordered),
    }


def timed(calls: list[Callable[[], Any]]) -> list[float]:
    samples = []
    for call in calls:
        start = time.perf_counter()
        call()
        samples.append((time.perf_counter() - start) * 1000)
    return samples


def set_based_floor(url: str, namespace: str) -> dict[str, Any]:
    """The floor of an observation load: the rows the service stored for ``namespace`` written
    again set-based, one ``INSERT ... SELECT`` per table, into empty copies of the tables (same columns,
    defaults and indexes: ``LIKE ... INCLUDING ALL``) in a scratch schema, in one transaction: the
    observations, ``graph_nodes``, ``facts``, the chunks (embedding NULL, as the write stores episode
    chunks) and the AGE label tables of its vertices and fact edges. Returns the seconds and the rows."""
    from common.storage.session import prepare_age_session

    sql = psycopg.sql
    settings = Settings(database_url=url)
    scratch = f"floor_{zlib.crc32(namespace.encode()):08x}"
    vertices = "SELECT vertex_id FROM graph_nodes WHERE namespace = %(namespace)s"
    with psycopg.connect(url) as conn:
        prepare_age_session(conn)
        vertex_labels = [
            str(row[0])
            for row in conn.execute(
                "SELECT DISTINCT label FROM graph_nodes WHERE namespace = %s", (namespace,)
            )
        ]
        edge_labels = [
            graph_label("predicate", str(row[0]))
            for row in conn.execute("SELECT DISTINCT predicate FROM facts WHERE namespace = %s", (namespace,))
        ]
        chunk_columns = [
            str(row[0])
            for row in conn.execute(
                "SELECT column_name FROM information_schema.columns WHERE table_schema = current_schema()"
                " AND table_name = %s AND is_generated = 'NEVER' ORDER BY ordinal_position",
                (settings.chunks_table,),
            )
        ]
        written = ", ".join(chunk_columns)
        selected = ", ".join("NULL::vector" if name == "embedding" else name for name in chunk_columns)
        # (table, columns written, what is selected, which rows)
        plain = ("namespace = %(namespace)s",)
        statements = [
            (sql.Identifier(settings.observations_table), "*", "*", plain[0]),
            (sql.Identifier("graph_nodes"), "*", "*", plain[0]),
            (sql.Identifier("facts"), "*", "*", plain[0]),
            (
                sql.Identifier(settings.chunks_table),
                f"({written})",
                selected,
                plain[0],
            ),
            *(
                (sql.Identifier(settings.graph_name, label), "*", "*", f"id IN ({vertices})")
                for label in vertex_labels
            ),
            *(
                (sql.Identifier(settings.graph_name, label), "*", "*", f"start_id IN ({vertices})")
                for label in edge_labels
            ),
        ]
        conn.execute(sql.SQL("CREATE SCHEMA {}").format(sql.Identifier(scratch)))
        copies = [sql.Identifier(scratch, f"t{position}") for position in range(len(statements))]
        for copy, (table, *_) in zip(copies, statements, strict=True):
            conn.execute(sql.SQL("CREATE TABLE {} (LIKE {} INCLUDING ALL)").format(copy, table))
        conn.commit()
        start = time.perf_counter()
        rows = 0
        for copy, (table, columns, selected, where) in zip(copies, statements, strict=True):
            target = copy if columns == "*" else sql.SQL("{} {}").format(copy, sql.SQL(columns))
            rows += conn.execute(
                sql.SQL("INSERT INTO {} SELECT {} FROM {} WHERE {}").format(
                    target, sql.SQL(selected), table, sql.SQL(where)
                ),
                {"namespace": namespace},
            ).rowcount
        conn.commit()
        seconds = time.perf_counter() - start
        conn.execute(sql.SQL("DROP SCHEMA {} CASCADE").format(sql.Identifier(scratch)))
        conn.commit()
    return {"seconds": round(seconds, 3), "rows": rows, "tables": len(statements)}


@contextmanager
def fresh_database(base_url: str, name: str) -> Iterator[str]:
    """Creates the empty database ``name`` on the server of ``base_url`` and yields its URL; drops it at
    the end. Measurements then do not depend on what earlier runs and tests left in the shared database
    (its chunks table grows with every run: 307,767 chunks of 1,671 namespaces when this was added)."""
    with psycopg.connect(base_url, autocommit=True) as admin:
        admin.execute(psycopg.sql.SQL("CREATE DATABASE {}").format(psycopg.sql.Identifier(name)))
    try:
        yield psycopg.conninfo.make_conninfo(base_url, dbname=name)
    finally:
        with psycopg.connect(base_url, autocommit=True) as admin:
            admin.execute(
                psycopg.sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(
                    psycopg.sql.Identifier(name)
                )
            )


def parse_arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description="Benchmark on the real corpora (see the module doc)."
    )
    parser.add_argument(
        "--observations-only",
        action="store_true",
        help="only the two 1-client observation loads; JSON written",
    )
    add_run_options(
        parser,
        shared_help="measure in CB_DATABASE_URL itself, next to whatever it holds (default: a fresh database on its server)",
    )
    parser.add_argument(
        "--change-feed",
        choices=("on", "off"),
        default="on",
        help="off: the change feed's outbox records nothing (the write path's cost without it)",
    )
    arguments = parser.parse_args()
    if arguments.change_feed == "off":
        # libpq reads PGOPTIONS: this process's connections and the service processes' (they inherit it)
        os.environ["PGOPTIONS"] = f"{os.environ.get('PGOPTIONS', '')} -c memory.change_feed=off".strip()
    return arguments


NOTE_HELP = "a line added to the entry, e.g. 'taken under load'"
SHARED_DATABASE_HELP = "load into CB_DATABASE_URL itself (default: a fresh database on its server)"


def add_run_options(
    parser: argparse.ArgumentParser,
    note_help: str | None = NOTE_HELP,
    shared_help: str | None = SHARED_DATABASE_HELP,
) -> None:
    """Adds the options of a run in `run_in_database`: ``--note`` (a line kept with the results) and
    ``--shared-database`` (work in CB_DATABASE_URL itself, not in a fresh database); their help texts are
    ``note_help`` and ``shared_help``."""
    parser.add_argument("--note", default="", help=note_help)
    parser.add_argument("--shared-database", action="store_true", help=shared_help)


def run_in_database(
    run: Callable[[argparse.Namespace, str], int], arguments: argparse.Namespace, prefix: str
) -> int:
    """Runs ``run(arguments, stamp)`` in a fresh database named ``<prefix>_<stamp>`` on the server of
    ``CB_DATABASE_URL`` (dropped afterwards), or in ``CB_DATABASE_URL`` itself with ``--shared-database``;
    the service processes and the in-process parts read the URL from the environment."""
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    if arguments.shared_database:
        return run(arguments, stamp)
    with fresh_database(Settings().database_url, f"{prefix}_{stamp.lower()}") as url:
        os.environ["CB_DATABASE_URL"] = url
        return run(arguments, stamp)


def main() -> int:
    return run_in_database(run, parse_arguments(), "memory_bench")


def run(arguments: argparse.Namespace, stamp: str) -> int:
    """The measurements (see the module doc) against ``CB_DATABASE_URL``."""
    observations_only = arguments.observations_only
    note = arguments.note
    settings = Settings()
    debian_ns, vault_ns = f"bench-debian-{stamp}", f"bench-vault-{stamp}"
    results: dict[str, Any] = {
        "time": stamp,
        "machine": machine(),
        "embedding_provider": settings.embedding_provider,
        "note": note,
        "change_feed": arguments.change_feed,
        "database": "shared (CB_DATABASE_URL as is)"
        if arguments.shared_database
        else "fresh (created for the run)",
    }
    observations = debian_observations(debian_ns)
    documents = [read_document(path, VAULT, namespace=vault_ns) for path in find_documents(VAULT)]
    searches = distinctive_sentences(QUERIES)
    questions = [json.loads(line) for line in (UPLOADS / "asof-dev.jsonl").read_text("utf-8").splitlines()]

    with services() as (ingest_address, query_address):
        ingest = grpc.insecure_channel(ingest_address, options=[("grpc.max_send_message_length", 64 << 20)])
        query = grpc.insecure_channel(query_address, options=[("grpc.max_receive_message_length", 64 << 20)])
        observe = observation_service_pb2_grpc.ObservationServiceStub(ingest)
        # Strictly sequential first (the baseline), then as `cb observe` sends, each into a fresh namespace.
        sequential = load_observations(observe, debian_observations(f"{debian_ns}-seq"), concurrency=1)
        results["observations_sequential"] = sequential
        print(
            f"observations, sequential: {sequential['seconds']} s ({sequential['per_second']}/s)", flush=True
        )
        cli_load = load_observations(observe, observations, concurrency=DEFAULT_OBSERVE_CONCURRENCY)
        cli_load["ratio_to_sequential"] = round(sequential["seconds"] / cli_load["seconds"], 2)
        floor = set_based_floor(settings.database_url, debian_ns)
        floor["per_second"] = round(len(observations) / floor["seconds"], 1)
        cli_load["set_based_floor"] = floor
        cli_load["ratio_to_floor"] = round(cli_load["seconds"] / floor["seconds"], 2)
        results["observations"] = cli_load
        print(
            f"observations, set-based floor: {floor['seconds']} s ({floor['per_second']}/s, {floor['rows']} rows);"
            f" cb observe is {cli_load['ratio_to_floor']}x the floor",
            flush=True,
        )
        seconds = sequential["seconds"]
        print(
            f"observations, cb observe (concurrency {DEFAULT_OBSERVE_CONCURRENCY}): {cli_load['seconds']} s"
            f" ({cli_load['per_second']}/s), {cli_load['ratio_to_sequential']}x sequential",
            flush=True,
        )
        # The episode chunks of both loads are embedded in the background: how long after the loads
        # until the service reports no backlog (all namespaces).
        results["observations"]["embedding"] = wait_for_embeddings(observe, "")
        print(f"episode embeddings: {results['observations']['embedding']}", flush=True)
        results["load_average"] = os.getloadavg()
        if observations_only:
            write_json(results)
            print(json.dumps(results, indent=2))
            return 0

        # The same corpus in another namespace from 16 concurrent clients, each holding the uploads of
        # its own packages (so supersession chains stay within a client), in batches of 50.
        streams: list[list[knowledge_pb2.Observation]] = [[] for _ in range(16)]
        for observation in debian_observations(f"{debian_ns}-c16"):
            streams[zlib.crc32(observation.subject.id.encode()) % 16].append(observation)

        def client(stream: list[knowledge_pb2.Observation]) -> int:
            stub = observation_service_pb2_grpc.ObservationServiceStub(grpc.insecure_channel(ingest_address))
            done = 0
            for offset in range(0, len(stream), 50):
                response = stub.RecordObservations(
                    observation_service_pb2.RecordObservationsRequest(
                        observations=stream[offset : offset + 50]
                    ),
                    timeout=600,
                )
                done += sum(result.created for result in response.results)
            return done

        start = time.perf_counter()
        with ThreadPoolExecutor(max_workers=16) as pool:
            created16 = sum(pool.map(client, streams))
        seconds16 = time.perf_counter() - start
        results["observations_16_clients"] = {
            "count": len(observations),
            "created": created16,
            "seconds": round(seconds16, 2),
            "per_second": round(len(observations) / seconds16, 1),
            "ratio_to_1_client": round(seconds / seconds16, 2),  # to the sequential client
        }
        print(
            f"observations, 16 clients: {seconds16:.1f} s ({len(observations) / seconds16:.0f}/s)", flush=True
        )

        documents_stub = document_service_pb2_grpc.DocumentServiceStub(ingest)
        start = time.perf_counter()
        chunks = 0
        for request in documents:
            chunks += documents_stub.Retain(request, timeout=600).chunk_count
        seconds = time.perf_counter() - start
        results["documents"] = {
            "documents": len(documents),
            "chunks": chunks,
            "seconds": round(seconds, 2),
            "chunks_per_second": round(chunks / seconds, 1),
        }
        print(
            f"documents: {len(documents)} ({chunks} chunks) in {seconds:.1f} s ({chunks / seconds:.0f} chunks/s)",
            flush=True,
        )

        search = retrieval_service_pb2_grpc.RetrievalServiceStub(query)
        search_requests = [
            retrieval_service_pb2.SearchRequest(namespace=vault_ns, query=q, top_k=10) for q in searches
        ]
        search.Search(search_requests[0], timeout=120)  # warm-up: the query model loads on first use
        results["search_grpc"] = percentiles(
            timed([lambda r=r: search.Search(r, timeout=30) for r in search_requests])
        )

        facts = fact_query_service_pb2_grpc.FactQueryServiceStub(query)
        fact_requests = []
        for question in (questions * 2)[:QUERIES]:
            as_of = timestamp_pb2.Timestamp()
            as_of.FromJsonString(question["as_of"])
            fact_requests.append(
                fact_query_service_pb2.ListFactsRequest(
                    namespace=debian_ns,
                    subject=question["subject"],
                    predicate=question["predicate"],
                    as_of=as_of,
                )
            )
        results["list_facts_grpc"] = percentiles(
            timed([lambda r=r: facts.ListFacts(r, timeout=30) for r in fact_requests])
        )

        context = context_service_pb2_grpc.ContextServiceStub(query)
        context_requests = [
            context_service_pb2.CompileContextRequest(namespace=vault_ns, query=q, token_budget=1500)
            for q in searches
        ]
        results["compile_context_grpc"] = percentiles(
            timed([lambda r=r: context.CompileContext(r, timeout=60) for r in context_requests])
        )

    raw = raw_search(settings, vault_ns, searches)
    results["search_raw_sql"] = raw["concurrent"]
    results["search_raw_sql_sequential"] = raw["sequential"]
    results["search_concurrent_vs_sequential_p95"] = round(
        raw["concurrent"]["p95_ms"] / raw["sequential"]["p95_ms"], 2
    )
    results["search_grpc_vs_raw_p50"] = round(
        results["search_grpc"]["p50_ms"] / results["search_raw_sql"]["p50_ms"], 2
    )
    write_results(results)
    print(json.dumps(results, indent=2))
    return 0


def raw_search(settings: Settings, namespace: str, searches: list[str]) -> dict[str, dict[str, float]]:
    """The same searches in-process: query embedding + candidate SQL + fusion, without gRPC or the service,
    as the service runs them (rankings concurrent) and with the rankings one after another (the
    baseline), alternating per query so that both see the same load."""
    from dataclasses import replace

    from common.storage.database import Database
    from common.storage.schema import migrations
    from common.text_models.embeddings.factory import build_embedding_provider
    from query_service.retrieval.hybrid_search import HybridSearcher
    from query_service.retrieval.hybrid_search import SearchQuery
    from query_service.retrieval.hybrid_search import search_preset

    provider = build_embedding_provider(settings)
    database = Database(settings, embedding_model=provider.model_id, prepare=migrations.apply)
    engine = HybridSearcher(database, provider, search_preset("default"))
    variants = {
        "concurrent": search_preset("default"),
        "sequential": replace(search_preset("default"), concurrent_rankings=False),
    }
    samples: dict[str, list[float]] = {name: [] for name in variants}
    engine.search(SearchQuery(namespace=namespace, query=searches[0], top_k=10))
    for index, query in enumerate(searches):
        names = list(variants) if index % 2 == 0 else list(variants)[::-1]
        for name in names:
            request = SearchQuery(namespace=namespace, query=query, top_k=10)
            samples[name].extend(timed([lambda r=request, n=name: engine.search(r, settings=variants[n])]))
    database.close()
    return {name: percentiles(values) for name, values in samples.items()}


if __name__ == "__main__":
    sys.exit(main())

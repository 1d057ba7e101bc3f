"""Cost of EraseSubject: erase one person among N observations of the debian corpus.

In a fresh database (`run_bench.run_in_database`) an in-process ingest service (real gRPC, real
embedder) records ``--copies`` copies of the debian corpus in one namespace, each copy with its person
ids made distinct (so a person of one copy is one subject among N = copies x 5,415 observations), then
erases one person of median activity with EraseSubject: first a preview (``validate_only``, rolled back),
then for real; it reports the wall time of each, the rows touched (the receipt's counts), and checks with
a scan of every text column of every table that the person's id is gone. Then it exports the namespace
(ExportNamespace) and imports the archive twice into a new database through a second ingest service
(ImportNamespace; the second import writes nothing), reporting MB/s of each, and asks 420 as-of
questions (the corpus's 180 dev questions and 240 more at the start of stored facts' intervals) of a
query service on each database: the fact ids must be the same. Writes
bench/results/erasure-<UTC time>.json.

Usage: .venv/bin/python bench/bench_erasure.py [--copies N] [--note TEXT] [--shared-database] [--erase-only]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import psycopg
import psycopg.conninfo
import psycopg.sql

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import grpc  # noqa: E402
from google.protobuf import json_format  # noqa: E402

from bench.run_bench import add_run_options  # noqa: E402
from bench.run_bench import run_in_database  # noqa: E402
from common.kernel.config import Settings  # noqa: E402
from ingest_service.main import create_ingest_host  # noqa: E402
from memory_service_grpc_client import wait_for_serving  # noqa: E402
from memory_service_grpc_client.memory.v1 import data_protection_service_pb2 as dp  # noqa: E402
from memory_service_grpc_client.memory.v1 import data_protection_service_pb2_grpc  # noqa: E402
from memory_service_grpc_client.memory.v1 import fact_query_service_pb2  # noqa: E402
from memory_service_grpc_client.memory.v1 import fact_query_service_pb2_grpc  # noqa: E402
from memory_service_grpc_client.memory.v1 import observation_service_pb2  # noqa: E402
from memory_service_grpc_client.memory.v1 import observation_service_pb2_grpc  # noqa: E402
from query_service.main import create_query_host  # noqa: E402
from tests.e2e.data_protection_helpers import DEBIAN  # noqa: E402
from tests.e2e.data_protection_helpers import columns_scanned  # noqa: E402
from tests.e2e.data_protection_helpers import residue  # noqa: E402

PERSON = re.compile(r"person-([0-9a-f]{4})\b")


def parse_arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--copies", type=int, default=4, help="copies of the debian corpus (5,415 each)")
    add_run_options(parser, "a note stored with the result", shared_help="use CB_DATABASE_URL itself")
    parser.add_argument(
        "--erase-only", action="store_true", help="skip export, import and the as-of comparison (large N)"
    )
    return parser.parse_args()


def corpus(namespace: str, copies: int) -> tuple[list[dict[str, Any]], str]:
    """The observations of ``copies`` copies (person ids suffixed per copy) and the subject's id."""
    lines = DEBIAN.read_text().splitlines()
    records: list[dict[str, Any]] = []
    for copy in range(copies):
        for line in lines:
            record = json.loads(PERSON.sub(rf"person-c{copy}-\1", line))
            record["namespace"] = namespace
            record["source"]["external_id"] = f"c{copy}/{record['source']['external_id']}"
            records.append(record)
    people = Counter(r["actor"]["id"] for r in records if r["actor"]["id"].startswith("person-c0-"))
    counts = sorted(people.values())
    median = counts[len(counts) // 2]
    subject = next(p for p, n in people.items() if n == median)
    return records, subject


AS_OF_DEV = DEBIAN.parent / "asof-dev.jsonl"
GENERATED_QUESTIONS = 240


def as_of_questions(settings: Settings, namespace: str) -> list[tuple[str, str, str]]:
    """(subject, predicate, as-of instant): the dev questions, then the first facts by id at their start."""
    questions = [
        (q["subject"], q["predicate"], q["as_of"])
        for q in (json.loads(line) for line in AS_OF_DEV.read_text().splitlines() if line.strip())
    ]
    with psycopg.connect(settings.database_url, autocommit=True) as conn:
        rows = conn.execute(
            "SELECT subject_key, predicate, valid_from FROM facts WHERE namespace = %s ORDER BY fact_id LIMIT %s",
            (namespace, GENERATED_QUESTIONS),
        ).fetchall()
    return questions + [(str(s), str(p), v.strftime("%Y-%m-%dT%H:%M:%SZ")) for s, p, v in rows]


def as_of_answers(settings: Settings, namespace: str, questions: list[tuple[str, str, str]]) -> list[list[str]]:
    """The fact ids ListFacts answers to each question, through a query service on ``settings``' database."""
    host = create_query_host(settings, address="127.0.0.1:0", metrics_port=0)
    host.start()
    try:
        assert wait_for_serving(f"127.0.0.1:{host.port}", timeout=120)
        with grpc.insecure_channel(f"127.0.0.1:{host.port}") as channel:
            facts = fact_query_service_pb2_grpc.FactQueryServiceStub(channel)
            answers = []
            for subject, predicate, instant in questions:
                request = fact_query_service_pb2.ListFactsRequest(
                    namespace=namespace, subject=subject, predicate=predicate, page_size=200
                )
                request.as_of.FromJsonString(instant)
                answers.append(sorted(f.fact_id for f in facts.ListFacts(request, timeout=60).facts))
            return answers
    finally:
        host.stop(5)


def import_into_fresh_database(
    settings: Settings, namespace: str, archive: bytes, questions: list[tuple[str, str, str]]
) -> dict[str, Any]:
    """Imports ``archive`` twice into a new database through its own ingest service; the seconds of each,
    and the as-of answers of the imported namespace."""
    piece = 256 * 1024

    def messages() -> Any:
        for start in range(0, len(archive), piece):
            yield dp.ImportNamespaceRequest(namespace=namespace if start == 0 else "", data=archive[start : start + piece])

    name = str(psycopg.conninfo.conninfo_to_dict(settings.database_url)["dbname"]) + "_import"
    url = psycopg.conninfo.make_conninfo(settings.database_url, dbname=name)
    with psycopg.connect(settings.database_url, autocommit=True) as admin:
        admin.execute(psycopg.sql.SQL("CREATE DATABASE {}").format(psycopg.sql.Identifier(name)))
    target = settings.model_copy(update={"database_url": url})
    host = create_ingest_host(target, address="127.0.0.1:0", metrics_port=0)
    host.start()
    timings: dict[str, float] = {}
    try:
        assert wait_for_serving(f"127.0.0.1:{host.port}", timeout=120)
        with grpc.insecure_channel(f"127.0.0.1:{host.port}") as channel:
            stub = data_protection_service_pb2_grpc.DataProtectionServiceStub(channel)
            for name in ("import_seconds", "reimport_seconds"):
                started = time.perf_counter()
                stub.ImportNamespace(messages(), timeout=3600)
                timings[name] = time.perf_counter() - started
        timings["imported_answers"] = as_of_answers(target, namespace, questions)
    finally:
        host.stop(5)
        with psycopg.connect(settings.database_url, autocommit=True) as admin:
            admin.execute(psycopg.sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(psycopg.sql.Identifier(name)))
    return timings


def run(arguments: argparse.Namespace, stamp: str) -> int:
    settings = Settings()
    namespace = f"bench-erasure-{stamp.lower()}"
    records, person = corpus(namespace, arguments.copies)
    host = create_ingest_host(settings, address="127.0.0.1:0", metrics_port=0)
    host.start()
    try:
        address = f"127.0.0.1:{host.port}"
        assert wait_for_serving(address, timeout=120)
        channel = grpc.insecure_channel(address)
        recorder = observation_service_pb2_grpc.ObservationServiceStub(channel)
        batches = [records[i : i + 250] for i in range(0, len(records), 250)]

        def send(batch: list[dict[str, Any]]) -> None:
            request = json_format.ParseDict({"observations": batch}, observation_service_pb2.RecordObservationsRequest())
            recorder.RecordObservations(request, timeout=900)

        started = time.perf_counter()
        with ThreadPoolExecutor(2) as pool:
            list(pool.map(send, batches))
        load_seconds = time.perf_counter() - started
        print(f"loaded {len(records)} observations in {load_seconds:.0f} s", flush=True)
        protection = data_protection_service_pb2_grpc.DataProtectionServiceStub(channel)
        key = f"person:{person}"
        timings: dict[str, float] = {}
        started = time.perf_counter()
        preview = protection.EraseSubject(
            dp.EraseSubjectRequest(namespace=namespace, node_key=key, validate_only=True), timeout=1800
        ).receipt
        timings["preview_seconds"] = time.perf_counter() - started
        started = time.perf_counter()
        receipt = protection.EraseSubject(
            dp.EraseSubjectRequest(namespace=namespace, node_key=key, confirm=True), timeout=1800
        ).receipt
        timings["erase_seconds"] = time.perf_counter() - started
        started = time.perf_counter()
        again = protection.EraseSubject(
            dp.EraseSubjectRequest(namespace=namespace, node_key=key, confirm=True), timeout=1800
        ).receipt
        timings["repeat_erase_seconds"] = time.perf_counter() - started
        archive, questions, source_answers, imported_answers = b"", [], [], []
        if not arguments.erase_only:
            started = time.perf_counter()
            archive = b"".join(
                m.data for m in protection.ExportNamespace(dp.ExportNamespaceRequest(namespace=namespace), timeout=3600)
            )
            timings["export_seconds"] = time.perf_counter() - started
            questions = as_of_questions(settings, namespace)
            source_answers = as_of_answers(settings, namespace, questions)
            imported = import_into_fresh_database(settings, namespace, archive, questions)
            imported_answers = imported.pop("imported_answers")
            timings.update(imported)
        with psycopg.connect(settings.database_url, autocommit=True) as conn:
            left = residue(conn, settings.graph_name, person)
            scanned = columns_scanned(conn, settings.graph_name)
            sizes = conn.execute("SELECT pg_database_size(current_database())").fetchone()
        channel.close()
    finally:
        host.stop(5)
    counts = dict(receipt.counts)
    result = {
        "benchmark": "erasure",
        "time": stamp,
        "note": arguments.note,
        "observations": len(records),
        "subject_observations": counts.get("observations_redacted", 0),
        "load_seconds": round(load_seconds, 1),
        **{k: round(v, 3) for k, v in timings.items()},
        "rows_touched": sum(counts.values()),
        "counts": counts,
        "preview_matches_erase": dict(preview.counts) == counts,
        "repeat_counts_nonzero": {k: v for k, v in again.counts.items() if v},
        **(
            {}
            if arguments.erase_only
            else {
                "archive_megabytes": round(len(archive) / 1e6, 2),
                "export_megabytes_per_second": round(len(archive) / 1e6 / timings["export_seconds"], 2),
                "import_megabytes_per_second": round(len(archive) / 1e6 / timings["import_seconds"], 2),
                "reimport_megabytes_per_second": round(len(archive) / 1e6 / timings["reimport_seconds"], 2),
                "as_of_questions": len(questions),
                "as_of_questions_answered": sum(1 for answer in source_answers if answer),
                "as_of_answers_identical_after_import": sum(
                    a == b for a, b in zip(source_answers, imported_answers, strict=True)
                ),
            }
        ),
        "residue_columns_scanned": scanned,
        "residue": left,
        "database_bytes": int(sizes[0]) if sizes else 0,
        "load_average": os.getloadavg(),
        "cores": os.cpu_count(),
    }
    out = ROOT / "bench" / "results" / f"erasure-{stamp}.json"
    out.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))
    identical = arguments.erase_only or result["as_of_answers_identical_after_import"] == len(questions)
    return 0 if not left and result["preview_matches_erase"] and identical else 1


if __name__ == "__main__":
    raise SystemExit(run_in_database(run, parse_arguments(), "erasure_bench"))

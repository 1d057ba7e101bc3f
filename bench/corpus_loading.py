"""The real corpora of the benchmarks and loading them: the debian upload stream moved to a namespace,
distinctive sentences of the docs vault (queries that one document answers), a load of observations the
way `cb observe` sends it, and the wait until the embedding backlog is empty."""

from __future__ import annotations

import json
import random
import re
import time
from pathlib import Path
from typing import Any

from google.protobuf import json_format

from common.kernel.identifiers import fact_id
from common.kernel.identifiers import parse_instant
from memory_service_grpc_client.memory.v1 import knowledge_pb2
from memory_service_grpc_client.memory.v1 import observation_service_pb2
from memory_service_grpc_client.memory.v1 import observation_service_pb2_grpc
from memory_service_tools.markdown_vault import find_documents
from memory_service_tools.observation_file import ParsedObservation
from memory_service_tools.observation_loader import record_observations

ROOT = Path(__file__).resolve().parents[1]
CORPORA = ROOT.parent / "shared" / "corpora"
UPLOADS = CORPORA / "debian-uploads"
VAULT = CORPORA / "docs-vault"
SENTENCE = re.compile(r"[^.!?\n]{40,220}[.!?]")


def debian_observations(namespace: str) -> list[knowledge_pb2.Observation]:
    """The corpus moved to ``namespace``, with each `supersedes` recomputed for it
    (docs/explanation/knowledge-model.md formula)."""
    records = [json.loads(line) for line in (UPLOADS / "observations.jsonl").read_text("utf-8").splitlines()]
    remap: dict[str, str] = {}
    for record in records:
        record["namespace"] = namespace
        for assertion in record["assertions"]:
            fact = assertion.get("fact")
            if fact is None:
                continue
            original = fact_id(
                "debian",
                f"{fact['subject']['type']}:{fact['subject']['id']}",
                fact["predicate"],
                f"{fact['object']['type']}:{fact['object']['id']}",
                parse_instant(fact["valid_from"]),
            )
            remap[original] = fact_id(
                namespace,
                f"{fact['subject']['type']}:{fact['subject']['id']}",
                fact["predicate"],
                f"{fact['object']['type']}:{fact['object']['id']}",
                parse_instant(fact["valid_from"]),
            )
    for record in records:
        for assertion in record["assertions"]:
            fact = assertion.get("fact")
            if fact and "supersedes" in fact:
                fact["supersedes"] = remap[fact["supersedes"]]
    return [json_format.ParseDict(record, knowledge_pb2.Observation()) for record in records]


def distinctive_sentences(count: int) -> list[str]:
    texts = [path.read_text("utf-8") for path in find_documents(VAULT)]
    rng = random.Random(7)
    chosen: list[str] = []
    for index in rng.sample(range(len(texts)), len(texts)):
        for sentence in SENTENCE.findall(texts[index].split("\n---\n", 1)[-1]):
            sentence = sentence.strip()
            if len(sentence.split()) >= 8 and sum(sentence in other for other in texts) == 1:
                chosen.append(sentence)
                break
        if len(chosen) == count:
            break
    return chosen


def load_observations(
    stub: observation_service_pb2_grpc.ObservationServiceStub,
    observations: list[knowledge_pb2.Observation],
    *,
    concurrency: int,
) -> dict[str, Any]:
    """Sends ``observations`` in batches of 200 through `record_observations` (what `cb observe`
    runs) with ``concurrency`` calls in flight; wall time from the first call to the last answer."""
    items = [ParsedObservation(line, observation) for line, observation in enumerate(observations, 1)]
    start = time.perf_counter()
    created = failed = 0
    for outcome in record_observations(stub, items, batch_size=200, concurrency=concurrency):
        if outcome.error is not None or outcome.response is None:
            raise RuntimeError(f"batch at line {outcome.batch[0].line} failed: {outcome.error}")
        created += sum(result.created for result in outcome.response.results)
        failed += sum(result.status == "failed" for result in outcome.response.results)
    seconds = time.perf_counter() - start
    return {
        "count": len(observations),
        "created": created,
        "failed": failed,
        "concurrency": concurrency,
        "seconds": round(seconds, 2),
        "per_second": round(len(observations) / seconds, 1),
        "target_seconds": 60,
    }


def wait_for_embeddings(
    stub: observation_service_pb2_grpc.ObservationServiceStub, namespace: str, *, limit_seconds: float = 600
) -> dict[str, Any]:
    """Polls ``GetEmbeddingBacklog`` every 0.2 s until the namespace ("": all) has no chunk waiting for
    its embedding, or ``limit_seconds`` passed; the wait in seconds, the backlog when it began and what
    was left (0 unless the limit was reached)."""
    request = observation_service_pb2.GetEmbeddingBacklogRequest(namespace=namespace)
    start = time.perf_counter()
    first = pending = stub.GetEmbeddingBacklog(request, timeout=60).pending_chunks
    while pending and time.perf_counter() - start < limit_seconds:
        time.sleep(0.2)
        pending = stub.GetEmbeddingBacklog(request, timeout=60).pending_chunks
    seconds = time.perf_counter() - start
    return {
        "backlog_at_end_of_load": first,
        "seconds_until_embedded": round(seconds, 2),
        "left_pending": pending,
        "embedded_per_second": round((first - pending) / seconds, 1) if seconds else 0.0,
    }

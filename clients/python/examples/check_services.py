"""Calls the running services with memory-service-grpc-client alone and prints what it saw as one JSON object.

Run by tests/e2e/test_python_client_package.py from a fresh virtual environment that holds only this
package and its three dependencies (no memory-service). Environment (the names the services and ``cb``
use): ``CB_INGEST_ADDR``, ``CB_QUERY_ADDR``, ``CB_TOKEN``; the namespace is the first argument. Exits 1
on the first failed check.
"""

from __future__ import annotations

import json
import os
import sys

from google.protobuf import struct_pb2
from google.protobuf import timestamp_pb2

from memory_service_grpc_client import ClientSecurity
from memory_service_grpc_client import ConsistencyTokens
from memory_service_grpc_client import InvalidArgument
from memory_service_grpc_client import MemoryClient
from memory_service_grpc_client import NotFound
from memory_service_grpc_client import Unauthenticated
from memory_service_grpc_client.memory.v1 import document_service_pb2
from memory_service_grpc_client.memory.v1 import fact_query_service_pb2
from memory_service_grpc_client.memory.v1 import knowledge_pb2
from memory_service_grpc_client.memory.v1 import observation_service_pb2
from memory_service_grpc_client.memory.v1 import retrieval_service_pb2
from memory_service_grpc_client.memory.v1 import source_service_pb2


def check(condition: bool, what: str) -> None:
    if not condition:
        sys.exit(f"check failed: {what}")


def main() -> None:
    namespace = sys.argv[1]
    ingest_addr = os.environ.get("CB_INGEST_ADDR", "127.0.0.1:50051")
    query_addr = os.environ.get("CB_QUERY_ADDR", "127.0.0.1:50052")
    tokens = ConsistencyTokens()  # every read after a write sees that write, on a replica too
    seen: dict[str, object] = {}
    with MemoryClient(
        ingest_addr, query_addr, security=ClientSecurity.from_env(), interceptors=(tokens,)
    ) as client:
        seen["health"] = client.health()
        recorded = client.record_observations(
            observation_service_pb2.RecordObservationsRequest(
                observations=[
                    knowledge_pb2.Observation(
                        namespace=namespace,
                        source=knowledge_pb2.ObservationSource(
                            system="python", stream="e2e", external_id="py-1"
                        ),
                        kind="note",
                        occurred_at=timestamp_pb2.Timestamp(seconds=1_793_527_200),  # 2026-11-01T10:00:00Z
                        subject=knowledge_pb2.Participant(type="service", id="checkout"),
                        content="Checkout depends on Quokkapay and on the ledger.",
                        assertions=[
                            knowledge_pb2.Assertion(
                                fact=knowledge_pb2.FactAssertion(
                                    subject=struct_pb2.Value(string_value="service:checkout"),
                                    predicate="DEPENDS_ON",
                                    object=struct_pb2.Value(string_value=target),
                                )
                            )
                            for target in ("service:quokkapay", "service:ledger")
                        ],
                    )
                ]
            )
        )
        seen["facts_created"] = recorded.results[0].facts_created
        check(bool(tokens.token), "the write's consistency token was kept")
        retained = client.retain(
            document_service_pb2.RetainRequest(
                namespace=namespace,
                natural_key="doc:py-runbook",
                title="Checkout runbook",
                content="# Checkout\n\nRestart the Quokkapay adapter before the checkout service.\n",
            )
        )
        seen["retained_created"] = retained.created
        hits = client.search(
            retrieval_service_pb2.SearchRequest(namespace=namespace, query="Quokkapay adapter", top_k=5)
        ).hits
        seen["first_hit"] = hits[0].node_key if hits else ""
        pages = fact_query_service_pb2.ListFactsRequest(
            namespace=namespace, subject="service:checkout", page_size=1
        )
        seen["facts"] = sorted(fact.object for fact in client.iter_facts(pages))
        try:
            client.get_source(
                source_service_pb2.GetSourceRequest(namespace=namespace, natural_key="doc:none")
            )
        except NotFound as exc:
            seen["missing"] = exc.code.name
        try:
            client.record_observations(
                observation_service_pb2.RecordObservationsRequest(
                    observations=[knowledge_pb2.Observation(namespace=namespace, kind="note")]
                )
            )
        except InvalidArgument as exc:
            seen["violations"] = sorted({violation.field for violation in exc.violations})
    with MemoryClient(ingest_addr, query_addr) as anonymous:
        try:
            anonymous.search(retrieval_service_pb2.SearchRequest(namespace=namespace, query="x"))
        except Unauthenticated as exc:
            seen["refused"] = exc.code.name
    print(json.dumps(seen, sort_keys=True))


if __name__ == "__main__":
    main()

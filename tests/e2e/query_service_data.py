"""What the query service tests write through the real ingest service: an article retained as a document,
and package uploads with a superseded version and conflicting maintainers recorded as observations."""

from __future__ import annotations

from datetime import UTC
from datetime import datetime
from typing import Any

import grpc
from google.protobuf import json_format
from google.protobuf import struct_pb2
from google.protobuf import timestamp_pb2

from common.kernel.identifiers import fact_id
from memory_service_grpc_client.memory.v1 import document_service_pb2
from memory_service_grpc_client.memory.v1 import document_service_pb2_grpc
from memory_service_grpc_client.memory.v1 import fact_service_pb2
from memory_service_grpc_client.memory.v1 import fact_service_pb2_grpc
from memory_service_grpc_client.memory.v1 import knowledge_pb2
from memory_service_grpc_client.memory.v1 import observation_service_pb2
from memory_service_grpc_client.memory.v1 import observation_service_pb2_grpc

ARTICLE = """---
title: "OpenSSL on bookworm"
natural_key: "doc:openssl/bookworm"
---
# OpenSSL on bookworm

Bookworm ships openssl 3.0.11. Security updates arrive through bookworm-security;
run `apt full-upgrade` to install them.

## glibc

The C library libc6 is at version 2.36-9+deb12u4 after the last point release.
"""


def struct_of(value: dict[str, Any]) -> struct_pb2.Struct:
    message = struct_pb2.Struct()
    message.update(value)
    return message


def timestamp_of(text: str) -> timestamp_pb2.Timestamp:
    message = timestamp_pb2.Timestamp()
    message.FromJsonString(text)
    return message


def retain(channel: grpc.Channel, namespace: str, key: str, content: str, **fields: Any) -> Any:
    stub = document_service_pb2_grpc.DocumentServiceStub(channel)
    for name in ("provenance", "meta"):
        if name in fields:
            fields[name] = struct_of(fields[name])
    return stub.Retain(
        document_service_pb2.RetainRequest(namespace=namespace, natural_key=key, content=content, **fields),
        timeout=120,
    )


def put_chunks(
    channel: grpc.Channel, namespace: str, key: str, *chunks: document_service_pb2.ChunkInput, **fields: Any
) -> Any:
    """PutChunks of ``chunks`` as the node ``key``; ``fields`` are the request's other fields."""
    stub = document_service_pb2_grpc.DocumentServiceStub(channel)
    request = document_service_pb2.PutChunksRequest(
        namespace=namespace, natural_key=key, chunks=list(chunks), **fields
    )
    return stub.PutChunks(request, timeout=120)


def observe(channel: grpc.Channel, observations: list[dict[str, Any]]) -> list[Any]:
    stub = observation_service_pb2_grpc.ObservationServiceStub(channel)
    request = observation_service_pb2.RecordObservationsRequest(
        observations=[json_format.ParseDict(item, knowledge_pb2.Observation()) for item in observations]
    )
    results = list(stub.RecordObservations(request, timeout=120).results)
    assert [r.status for r in results] == ["processed"] * len(observations), [r.error for r in results]
    return results


def assert_facts(
    channel: grpc.Channel, namespace: str, facts: list[Any], timeout: float = 60
) -> list[fact_service_pb2.AssertFactResult]:
    """AssertFacts of ``facts`` (JSON dicts or FactAssertion messages); the result of each."""
    stub = fact_service_pb2_grpc.FactServiceStub(channel)
    messages = [json_format.ParseDict(f, knowledge_pb2.FactAssertion()) if isinstance(f, dict) else f for f in facts]
    request = fact_service_pb2.AssertFactsRequest(namespace=namespace, facts=messages)
    return list(stub.AssertFacts(request, timeout=timeout).results)


def upload(namespace: str, package: str, version: str, when: str, supersedes: str = "") -> dict[str, Any]:
    fact: dict[str, Any] = {
        "subject": {"type": "package", "id": package},
        "predicate": "HAS_VERSION",
        "object": {"type": "version", "id": f"{package}@{version}"},
        "valid_from": when,
        "evidence": "asserted",
        "confidence": 1.0,
    }
    if supersedes:
        fact["supersedes"] = supersedes
    return {
        "namespace": namespace,
        "source": {
            "system": "debian",
            "stream": f"changelog/{package}",
            "external_id": f"{package}/{version}",
        },
        "kind": "package.uploaded",
        "occurred_at": when,
        "subject": {"type": "package", "id": package},
        "content": f"{package} {version} uploaded",
        "provenance": {"uri": f"debian-changelog:{package}/{version}"},
        "assertions": [{"fact": fact}],
    }


def _maintainers(namespace: str) -> dict[str, Any]:
    def fact(person: str, confidence: float, evidence: str) -> dict[str, Any]:
        return {
            "fact": {
                "subject": "package:openssl",
                "predicate": "MAINTAINED_BY",
                "object": f"person:{person}",
                "valid_from": "2024-02-01T00:00:00Z",
                "evidence": evidence,
                "confidence": confidence,
            }
        }

    return {
        "namespace": namespace,
        "source": {"system": "tracker", "stream": "maintainers", "external_id": "m-1"},
        "kind": "maintainer.changed",
        "occurred_at": "2024-02-01T00:00:00Z",
        "assertions": [fact("alice", 0.9, "asserted"), fact("bob", 0.4, "inferred")],
    }


def load_facts(ingest_channel: grpc.Channel, namespace: str) -> tuple[str, str]:
    """openssl 3.0.9 (2024-01-01) superseded by 3.0.11 (2024-06-01); two conflicting maintainers;
    libcurl (named only in a chunk) at 8.5.0. Returns the two openssl HAS_VERSION fact ids."""
    first = fact_id(
        namespace, "package:openssl", "HAS_VERSION", "version:openssl@3.0.9", datetime(2024, 1, 1, tzinfo=UTC)
    )
    second = fact_id(
        namespace,
        "package:openssl",
        "HAS_VERSION",
        "version:openssl@3.0.11",
        datetime(2024, 6, 1, tzinfo=UTC),
    )
    observe(
        ingest_channel,
        [
            upload(namespace, "openssl", "3.0.9", "2024-01-01T00:00:00Z"),
            upload(namespace, "openssl", "3.0.11", "2024-06-01T00:00:00Z", supersedes=first),
            _maintainers(namespace),
            upload(namespace, "libcurl", "8.5.0", "2024-03-01T00:00:00Z"),
        ],
    )
    return first, second

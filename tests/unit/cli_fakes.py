"""Fake servicers and observation lines of the CLI's unit tests (`tests/unit/test_cli_commands.py`,
`tests/unit/test_cli_polish.py`), served with the `serve` fixture of tests/unit/conftest.py."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable

import grpc

from common.kernel.errors import InvalidArgument
from common.kernel.errors import Unavailable
from memory_service_grpc_client.memory.v1 import document_service_pb2
from memory_service_grpc_client.memory.v1 import document_service_pb2_grpc
from memory_service_grpc_client.memory.v1 import knowledge_pb2
from memory_service_grpc_client.memory.v1 import observation_service_pb2
from memory_service_grpc_client.memory.v1 import observation_service_pb2_grpc

OBSERVATION = {
    "namespace": "debian",
    "source": {"system": "debian", "stream": "changelog/time", "external_id": "time/1.7-5"},
    "kind": "package.uploaded",
    "occurred_at": "1999-10-02T20:00:28Z",
    "actor": {"type": "person", "id": "person-a084"},
    "subject": {"type": "package", "id": "time"},
    "scopes": [],
    "content": "  * debian/rules: Adapted to use /usr/share/",
    "data": {"version": "1.7-5", "urgency": "low"},
    "provenance": {"uri": "debian-changelog:time/1.7-5"},
    "assertions": [
        {"entity": {"key": {"type": "package", "id": "time"}, "title": "time"}},
        {
            "fact": {
                "subject": {"type": "package", "id": "time"},
                "predicate": "HAS_VERSION",
                "object": "version:time@1.7-5",
                "valid_from": "1999-10-02T20:00:28Z",
                "confidence": 1.0,
            }
        },
    ],
}


def observation_line(**changes: object) -> str:
    """`OBSERVATION` with ``changes`` as one JSONL line."""
    return json.dumps({**OBSERVATION, **changes}, ensure_ascii=False)


class FakeObservations(observation_service_pb2_grpc.ObservationServiceServicer):  # type: ignore[misc]
    """created for kind "package.uploaded", duplicate for "dup", failed for "bad"; optional outages."""

    def __init__(self, outages: int = 0) -> None:
        self.outages = outages
        self.calls = 0
        self.received: list[knowledge_pb2.Observation] = []
        self.lock = threading.Lock()

    def RecordObservations(
        self, request: observation_service_pb2.RecordObservationsRequest, context: grpc.ServicerContext
    ) -> observation_service_pb2.RecordObservationsResponse:
        with self.lock:
            self.calls += 1
            if self.outages > 0:
                self.outages -= 1
                raise Unavailable("database unavailable")
            self.received.extend(request.observations)
        results = []
        for number, observation in enumerate(request.observations):
            oid = f"obs-{len(self.received)}-{number}"
            if observation.kind == "bad":
                results.append(
                    observation_service_pb2.ObservationResult(
                        observation_id=oid,
                        status="failed",
                        error="kind: must not be 'bad'",
                        field_violations=["kind: must not be 'bad'", "content: too short"],
                    )
                )
            elif observation.kind == "dup":
                results.append(
                    observation_service_pb2.ObservationResult(observation_id=oid, status="processed")
                )
            else:
                results.append(
                    observation_service_pb2.ObservationResult(
                        observation_id=oid, created=True, status="processed"
                    )
                )
        return observation_service_pb2.RecordObservationsResponse(results=results)


def observation_server(
    serve: Callable[[Callable[[grpc.Server], list[str]]], str], fake: FakeObservations
) -> str:
    def register(server: grpc.Server) -> list[str]:
        observation_service_pb2_grpc.add_ObservationServiceServicer_to_server(fake, server)
        return ["memory.v1.ObservationService"]

    return serve(register)


def document_server(serve: Callable[[Callable[[grpc.Server], list[str]]], str], fake: FakeDocuments) -> str:
    def register(server: grpc.Server) -> list[str]:
        document_service_pb2_grpc.add_DocumentServiceServicer_to_server(fake, server)
        return ["memory.v1.DocumentService"]

    return serve(register)


class FakeDocuments(document_service_pb2_grpc.DocumentServiceServicer):  # type: ignore[misc]
    def __init__(self) -> None:
        self.received: list[document_service_pb2.RetainRequest] = []
        self.lock = threading.Lock()

    def Retain(
        self, request: document_service_pb2.RetainRequest, context: grpc.ServicerContext
    ) -> document_service_pb2.RetainResponse:
        if "reject" in request.natural_key:
            raise InvalidArgument.single("natural_key", "rejected by the test")
        with self.lock:
            self.received.append(request)
            known = {r.natural_key for r in self.received}
        linked = [link for link in request.links if link in known]
        missing = [link for link in request.links if link not in known]
        return document_service_pb2.RetainResponse(
            natural_key=request.natural_key, created=True, chunk_count=2, linked=linked, missing_links=missing
        )

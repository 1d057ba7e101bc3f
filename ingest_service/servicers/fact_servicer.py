"""FactService transport: proto <-> domain mapping only (docs/explanation/architecture.md)."""

from __future__ import annotations

import grpc

from common.grpc.proto_mapping import fact_assertion_to_dict
from common.grpc.proto_mapping import fact_to_proto
from common.grpc.proto_mapping import optional_instant
from ingest_service.facts.assertions import FactAsserter
from memory_service_grpc_client.memory.v1 import fact_service_pb2
from memory_service_grpc_client.memory.v1 import fact_service_pb2_grpc


class FactServicer(fact_service_pb2_grpc.FactServiceServicer):  # type: ignore[misc]
    """memory.v1.FactService; domain errors are mapped to status codes by the server's interceptor."""

    def __init__(self, asserter: FactAsserter) -> None:
        self.asserter = asserter

    def AssertFacts(
        self, request: fact_service_pb2.AssertFactsRequest, context: grpc.ServicerContext
    ) -> fact_service_pb2.AssertFactsResponse:
        raw = [fact_assertion_to_dict(fact) for fact in request.facts]
        results = self.asserter.assert_facts(request.namespace, raw, source_path=request.source_path)
        return fact_service_pb2.AssertFactsResponse(
            results=[
                fact_service_pb2.AssertFactResult(
                    fact_id=result.fact_id,
                    created=result.created,
                    error=result.error,
                    field_violations=result.field_violations,
                )
                for result in results
            ]
        )

    def CloseFact(
        self, request: fact_service_pb2.CloseFactRequest, context: grpc.ServicerContext
    ) -> fact_service_pb2.CloseFactResponse:
        closed = self.asserter.close_fact(
            request.namespace,
            request.fact_id,
            valid_to=optional_instant(request, "valid_to"),
            reason=request.reason,
        )
        return fact_service_pb2.CloseFactResponse(fact=fact_to_proto(closed.fact, conflict=closed.conflict))

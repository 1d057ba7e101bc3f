"""FactService (ingest_service) and FactQueryService (query_service), with the paging helpers of ListFacts."""

from __future__ import annotations

from collections.abc import Iterator

from memory_service_grpc_client.memory.v1 import (
    fact_query_service_pb2,
    fact_query_service_pb2_grpc,
    fact_service_pb2,
    fact_service_pb2_grpc,
    knowledge_pb2,
)
from memory_service_grpc_client.pagination import iter_pages
from memory_service_grpc_client.service_calls import ServiceCalls

__all__ = ["FactCalls"]


class FactCalls(ServiceCalls):
    """The calls of FactService and FactQueryService on `MemoryClient`."""

    def assert_facts(
        self, request: fact_service_pb2.AssertFactsRequest
    ) -> fact_service_pb2.AssertFactsResponse:
        """FactService.AssertFacts."""
        stub = fact_service_pb2_grpc.FactServiceStub(self.ingest_channel)
        return self._write(stub.AssertFacts, request, idempotent=False)

    def close_fact(self, request: fact_service_pb2.CloseFactRequest) -> fact_service_pb2.CloseFactResponse:
        """FactService.CloseFact."""
        stub = fact_service_pb2_grpc.FactServiceStub(self.ingest_channel)
        return self._write(stub.CloseFact, request, idempotent=False)

    def list_facts(
        self, request: fact_query_service_pb2.ListFactsRequest
    ) -> fact_query_service_pb2.ListFactsResponse:
        """FactQueryService.ListFacts: one page (see `iter_facts` and `list_every_fact`)."""
        stub = fact_query_service_pb2_grpc.FactQueryServiceStub(self.query_channel)
        return self._read(stub.ListFacts, request)

    def iter_facts(
        self, request: fact_query_service_pb2.ListFactsRequest, *, limit: int | None = None
    ) -> Iterator[knowledge_pb2.Fact]:
        """Every fact of a ListFacts query, page after page (``page_size`` of ``request``), following
        ``next_page_token`` until it is empty (or repeats); stops after ``limit`` facts when given.
        ``request`` is not changed."""
        return iter_pages(self.list_facts, request, lambda page: page.facts, limit=limit)

    def list_every_fact(
        self, request: fact_query_service_pb2.ListFactsRequest
    ) -> fact_query_service_pb2.ListFactsResponse:
        """Every page of a ListFacts query collected into one response (no ``next_page_token``)."""
        return fact_query_service_pb2.ListFactsResponse(facts=list(self.iter_facts(request)))

"""The calls over the knowledge itself: memory records, observations, facts, documents and their
sources, search, context and traces (one mixin a service, or a write service with its query service)."""

from __future__ import annotations

from collections.abc import Callable
from collections.abc import Iterator

from memory_service_grpc_client.memory.v1 import context_service_pb2
from memory_service_grpc_client.memory.v1 import context_service_pb2_grpc
from memory_service_grpc_client.memory.v1 import document_service_pb2
from memory_service_grpc_client.memory.v1 import document_service_pb2_grpc
from memory_service_grpc_client.memory.v1 import fact_query_service_pb2
from memory_service_grpc_client.memory.v1 import fact_query_service_pb2_grpc
from memory_service_grpc_client.memory.v1 import fact_service_pb2
from memory_service_grpc_client.memory.v1 import fact_service_pb2_grpc
from memory_service_grpc_client.memory.v1 import knowledge_pb2
from memory_service_grpc_client.memory.v1 import memory_query_service_pb2
from memory_service_grpc_client.memory.v1 import memory_query_service_pb2_grpc
from memory_service_grpc_client.memory.v1 import memory_service_pb2
from memory_service_grpc_client.memory.v1 import memory_service_pb2_grpc
from memory_service_grpc_client.memory.v1 import observation_query_service_pb2
from memory_service_grpc_client.memory.v1 import observation_query_service_pb2_grpc
from memory_service_grpc_client.memory.v1 import observation_service_pb2
from memory_service_grpc_client.memory.v1 import observation_service_pb2_grpc
from memory_service_grpc_client.memory.v1 import retrieval_service_pb2
from memory_service_grpc_client.memory.v1 import retrieval_service_pb2_grpc
from memory_service_grpc_client.memory.v1 import source_service_pb2
from memory_service_grpc_client.memory.v1 import source_service_pb2_grpc
from memory_service_grpc_client.memory.v1 import trace_service_pb2
from memory_service_grpc_client.memory.v1 import trace_service_pb2_grpc
from memory_service_grpc_client.pagination import iter_pages
from memory_service_grpc_client.service_calls import ServiceCalls

__all__ = ["DocumentCalls", "FactCalls", "MemoryCalls", "ObservationCalls", "RetrievalCalls"]


class MemoryCalls(ServiceCalls):
    """The calls of MemoryService and MemoryQueryService on `MemoryClient`."""

    def add_memories(
        self, request: memory_service_pb2.AddMemoriesRequest, *, project_id: str = ""
    ) -> memory_service_pb2.AddMemoriesResponse:
        """MemoryService.AddMemories (idempotent per item: retried on UNAVAILABLE)."""
        stub = memory_service_pb2_grpc.MemoryServiceStub(self.ingest_channel)
        return self._write(stub.AddMemories, request, idempotent=True, project_id=project_id)

    def update_memory(
        self, request: memory_service_pb2.UpdateMemoryRequest, *, project_id: str = ""
    ) -> memory_service_pb2.UpdateMemoryResponse:
        """MemoryService.UpdateMemory (sent once: a retried update would count its version twice)."""
        stub = memory_service_pb2_grpc.MemoryServiceStub(self.ingest_channel)
        return self._write(stub.UpdateMemory, request, idempotent=False, project_id=project_id)

    def delete_memory(
        self, request: memory_service_pb2.DeleteMemoryRequest, *, project_id: str = ""
    ) -> memory_service_pb2.DeleteMemoryResponse:
        """MemoryService.DeleteMemory."""
        stub = memory_service_pb2_grpc.MemoryServiceStub(self.ingest_channel)
        return self._write(stub.DeleteMemory, request, idempotent=False, project_id=project_id)

    def summarize_memories(
        self, request: memory_service_pb2.SummarizeMemoriesRequest, *, project_id: str = ""
    ) -> memory_service_pb2.SummarizeMemoriesResponse:
        """MemoryService.SummarizeMemories (idempotent per group: retried on UNAVAILABLE)."""
        stub = memory_service_pb2_grpc.MemoryServiceStub(self.ingest_channel)
        return self._write(stub.SummarizeMemories, request, idempotent=True, project_id=project_id)

    def recall_memories(
        self, request: memory_query_service_pb2.RecallMemoriesRequest, *, project_id: str = ""
    ) -> memory_query_service_pb2.RecallMemoriesResponse:
        """MemoryQueryService.RecallMemories."""
        stub = memory_query_service_pb2_grpc.MemoryQueryServiceStub(self.query_channel)
        return self._read(stub.RecallMemories, request, project_id=project_id)

    def get_memory(
        self, request: memory_query_service_pb2.GetMemoryRequest, *, project_id: str = ""
    ) -> memory_query_service_pb2.GetMemoryResponse:
        """MemoryQueryService.GetMemory."""
        stub = memory_query_service_pb2_grpc.MemoryQueryServiceStub(self.query_channel)
        return self._read(stub.GetMemory, request, project_id=project_id)

    def list_memories(
        self, request: memory_query_service_pb2.ListMemoriesRequest, *, project_id: str = ""
    ) -> memory_query_service_pb2.ListMemoriesResponse:
        """MemoryQueryService.ListMemories (one page; follow ``next_page_token``)."""
        stub = memory_query_service_pb2_grpc.MemoryQueryServiceStub(self.query_channel)
        return self._read(stub.ListMemories, request, project_id=project_id)


class ObservationCalls(ServiceCalls):
    """The calls of ObservationService and ObservationQueryService on `MemoryClient`."""

    def record_observations(
        self,
        request: observation_service_pb2.RecordObservationsRequest,
        *,
        on_retry: Callable[[str], None] | None = None,
    ) -> observation_service_pb2.RecordObservationsResponse:
        """ObservationService.RecordObservations (idempotent: retried on UNAVAILABLE)."""
        stub = observation_service_pb2_grpc.ObservationServiceStub(self.ingest_channel)
        return self._write(stub.RecordObservations, request, idempotent=True, on_retry=on_retry)

    def redact_observation(
        self, request: observation_service_pb2.RedactObservationRequest
    ) -> observation_service_pb2.RedactObservationResponse:
        """ObservationService.RedactObservation."""
        stub = observation_service_pb2_grpc.ObservationServiceStub(self.ingest_channel)
        return self._write(stub.RedactObservation, request, idempotent=False)

    def purge_observation(
        self, request: observation_service_pb2.PurgeObservationRequest
    ) -> observation_service_pb2.PurgeObservationResponse:
        """ObservationService.PurgeObservation."""
        stub = observation_service_pb2_grpc.ObservationServiceStub(self.ingest_channel)
        return self._write(stub.PurgeObservation, request, idempotent=False)

    def get_embedding_backlog(
        self, request: observation_service_pb2.GetEmbeddingBacklogRequest
    ) -> observation_service_pb2.GetEmbeddingBacklogResponse:
        """ObservationService.GetEmbeddingBacklog: episode chunks still waiting for their embedding (a
        read of ingest_service; poll it until ``pending_chunks`` is 0 to know vector search sees them)."""
        stub = observation_service_pb2_grpc.ObservationServiceStub(self.ingest_channel)
        return self._read(stub.GetEmbeddingBacklog, request)

    def get_observation(
        self, request: observation_query_service_pb2.GetObservationRequest
    ) -> observation_query_service_pb2.GetObservationResponse:
        """ObservationQueryService.GetObservation."""
        stub = observation_query_service_pb2_grpc.ObservationQueryServiceStub(self.query_channel)
        return self._read(stub.GetObservation, request)


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


class DocumentCalls(ServiceCalls):
    """The calls of DocumentService and SourceService on `MemoryClient`."""

    def retain(
        self,
        request: document_service_pb2.RetainRequest,
        *,
        on_retry: Callable[[str], None] | None = None,
    ) -> document_service_pb2.RetainResponse:
        """DocumentService.Retain (an upsert: retried on UNAVAILABLE)."""
        stub = document_service_pb2_grpc.DocumentServiceStub(self.ingest_channel)
        return self._write(stub.Retain, request, idempotent=True, on_retry=on_retry)

    def put_chunks(
        self, request: document_service_pb2.PutChunksRequest
    ) -> document_service_pb2.PutChunksResponse:
        """DocumentService.PutChunks."""
        stub = document_service_pb2_grpc.DocumentServiceStub(self.ingest_channel)
        return self._write(stub.PutChunks, request, idempotent=False)

    def delete_node(
        self, request: document_service_pb2.DeleteNodeRequest
    ) -> document_service_pb2.DeleteNodeResponse:
        """DocumentService.DeleteNode (sent once: a repeated delete is NOT_FOUND)."""
        stub = document_service_pb2_grpc.DocumentServiceStub(self.ingest_channel)
        return self._write(stub.DeleteNode, request, idempotent=False)

    def get_source(
        self, request: source_service_pb2.GetSourceRequest
    ) -> source_service_pb2.GetSourceResponse:
        """SourceService.GetSource."""
        stub = source_service_pb2_grpc.SourceServiceStub(self.query_channel)
        return self._read(stub.GetSource, request)


class RetrievalCalls(ServiceCalls):
    """The calls of RetrievalService, ContextService and TraceService on `MemoryClient`."""

    def search(self, request: retrieval_service_pb2.SearchRequest) -> retrieval_service_pb2.SearchResponse:
        """RetrievalService.Search."""
        stub = retrieval_service_pb2_grpc.RetrievalServiceStub(self.query_channel)
        return self._read(stub.Search, request)

    def compile_context(
        self, request: context_service_pb2.CompileContextRequest
    ) -> context_service_pb2.CompileContextResponse:
        """ContextService.CompileContext."""
        stub = context_service_pb2_grpc.ContextServiceStub(self.query_channel)
        return self._read(stub.CompileContext, request)

    def compile_typed_context(
        self, request: context_service_pb2.CompileTypedContextRequest
    ) -> context_service_pb2.CompileTypedContextResponse:
        """ContextService.CompileTypedContext."""
        stub = context_service_pb2_grpc.ContextServiceStub(self.query_channel)
        return self._read(stub.CompileTypedContext, request)

    def get_trace(self, request: trace_service_pb2.GetTraceRequest) -> trace_service_pb2.GetTraceResponse:
        """TraceService.GetTrace."""
        stub = trace_service_pb2_grpc.TraceServiceStub(self.query_channel)
        return self._read(stub.GetTrace, request)

"""ObservationService (ingest_service) and ObservationQueryService (query_service)."""

from __future__ import annotations

from collections.abc import Callable

from memory_service_grpc_client.memory.v1 import (
    observation_query_service_pb2,
    observation_query_service_pb2_grpc,
    observation_service_pb2,
    observation_service_pb2_grpc,
)
from memory_service_grpc_client.service_calls import ServiceCalls

__all__ = ["ObservationCalls"]


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

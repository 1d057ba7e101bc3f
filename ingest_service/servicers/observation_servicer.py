"""ObservationService transport: proto <-> domain mapping only (docs/explanation/architecture.md)."""

from __future__ import annotations

import grpc

from common.grpc.proto_mapping import json_form
from common.grpc.proto_mapping import observation_to_proto
from common.grpc.proto_mapping import timestamp
from ingest_service.embedding.episodes import EpisodeEmbedder
from ingest_service.observations.recorder import ObservationRecorder
from ingest_service.observations.removal import ObservationRemover
from memory_service_grpc_client.memory.v1 import observation_service_pb2
from memory_service_grpc_client.memory.v1 import observation_service_pb2_grpc


class ObservationServicer(observation_service_pb2_grpc.ObservationServiceServicer):
    """memory.v1.ObservationService; domain errors are mapped to status codes by the server's interceptor."""

    def __init__(
        self, recorder: ObservationRecorder, remover: ObservationRemover, embedder: EpisodeEmbedder
    ) -> None:
        self.recorder = recorder
        self.remover = remover
        self.embedder = embedder

    def RecordObservations(
        self, request: observation_service_pb2.RecordObservationsRequest, context: grpc.ServicerContext
    ) -> observation_service_pb2.RecordObservationsResponse:
        # json_form: an out-of-range Timestamp fails its item (a field violation), not the batch.
        raw = [json_form(observation)[0] for observation in request.observations]
        results = self.recorder.record_batch(raw)
        return observation_service_pb2.RecordObservationsResponse(
            results=[
                observation_service_pb2.ObservationResult(
                    observation_id=result.observation_id,
                    created=result.created,
                    status=result.status,
                    error=result.error,
                    field_violations=result.field_violations,
                    entities_upserted=result.entities_upserted,
                    facts_created=result.facts_created,
                    facts_strengthened=result.facts_strengthened,
                    text_fragments=result.text_fragments,
                    episode_key=result.episode_key,
                )
                for result in results
            ]
        )

    def RedactObservation(
        self, request: observation_service_pb2.RedactObservationRequest, context: grpc.ServicerContext
    ) -> observation_service_pb2.RedactObservationResponse:
        outcome = self.remover.redact(
            request.namespace, request.observation_id, request.reason, trace_id=request.trace_id
        )
        return observation_service_pb2.RedactObservationResponse(
            observation=observation_to_proto(outcome.observation),
            facts_affected=outcome.facts_affected,
            facts_evidence_lost=outcome.facts_evidence_lost,
        )

    def PurgeObservation(
        self, request: observation_service_pb2.PurgeObservationRequest, context: grpc.ServicerContext
    ) -> observation_service_pb2.PurgeObservationResponse:
        outcome = self.remover.purge(
            request.namespace, request.observation_id, request.reason, trace_id=request.trace_id
        )
        return observation_service_pb2.PurgeObservationResponse(
            observation_id=outcome.observation_id,
            facts_affected=outcome.facts_affected,
            facts_evidence_lost=outcome.facts_evidence_lost,
            nodes_deleted=outcome.nodes_deleted,
            chunks_deleted=outcome.chunks_deleted,
        )

    def GetEmbeddingBacklog(
        self, request: observation_service_pb2.GetEmbeddingBacklogRequest, context: grpc.ServicerContext
    ) -> observation_service_pb2.GetEmbeddingBacklogResponse:
        backlog = self.embedder.backlog(request.namespace or None)
        response = observation_service_pb2.GetEmbeddingBacklogResponse(pending_chunks=backlog.pending)
        if backlog.oldest_written_at is not None:
            response.oldest_pending_written_at.CopyFrom(timestamp(backlog.oldest_written_at))
        return response

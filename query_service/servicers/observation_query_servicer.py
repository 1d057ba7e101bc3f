"""ObservationQueryService transport: proto <-> domain mapping only (docs/explanation/architecture.md); the reading is
`query_service.readers.observations`."""

from __future__ import annotations

import grpc

from common.grpc.proto_mapping import observation_to_proto
from memory_service_grpc_client.memory.v1 import observation_query_service_pb2
from memory_service_grpc_client.memory.v1 import observation_query_service_pb2_grpc
from query_service.readers.observations import ObservationReader
from query_service.servicers.read_transport import caller_pii_policy
from query_service.servicers.read_transport import caller_visibility


class ObservationQueryServicer(observation_query_service_pb2_grpc.ObservationQueryServiceServicer):  # type: ignore[misc]
    """memory.v1.ObservationQueryService over an `ObservationReader`; domain errors are mapped to status
    codes by the server's interceptor."""

    def __init__(self, reader: ObservationReader) -> None:
        self.reader = reader

    def GetObservation(
        self, request: observation_query_service_pb2.GetObservationRequest, context: grpc.ServicerContext
    ) -> observation_query_service_pb2.GetObservationResponse:
        view = self.reader.get_observation(
            request.namespace,
            request.observation_id,
            visibility=caller_visibility(),
            pii=caller_pii_policy(
                self.reader.database.settings, "/memory.v1.ObservationQueryService/GetObservation"
            ),
        )
        return observation_query_service_pb2.GetObservationResponse(observation=observation_to_proto(view))

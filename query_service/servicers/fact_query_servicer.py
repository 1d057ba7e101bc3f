"""FactQueryService transport: proto <-> domain mapping only (docs/explanation/architecture.md); the reading is
`query_service.readers.facts`."""

from __future__ import annotations

import grpc

from common.grpc.proto_mapping import fact_to_proto
from common.grpc.proto_mapping import optional_instant
from common.storage.fact_rows import FactQuery
from memory_service_grpc_client.memory.v1 import fact_query_service_pb2
from memory_service_grpc_client.memory.v1 import fact_query_service_pb2_grpc
from query_service.readers.facts import FactReader
from query_service.servicers.read_transport import caller_pii_policy
from query_service.servicers.read_transport import caller_visibility


class FactQueryServicer(fact_query_service_pb2_grpc.FactQueryServiceServicer):  # type: ignore[misc]
    """memory.v1.FactQueryService over a `FactReader`; domain errors are mapped to status codes by the
    server's interceptor."""

    def __init__(self, reader: FactReader) -> None:
        self.reader = reader

    def ListFacts(
        self, request: fact_query_service_pb2.ListFactsRequest, context: grpc.ServicerContext
    ) -> fact_query_service_pb2.ListFactsResponse:
        page = self.reader.list_facts(
            FactQuery(
                namespace=request.namespace,
                subject=request.subject,
                predicate=request.predicate,
                object=request.object,
                as_of=optional_instant(request, "as_of"),
                include_history=request.include_history,
                include_lost=request.include_lost,
                page_size=request.page_size,
                page_token=request.page_token,
                visibility=caller_visibility(),
            ),
            pii=caller_pii_policy(self.reader.database.settings, "/memory.v1.FactQueryService/ListFacts"),
        )
        return fact_query_service_pb2.ListFactsResponse(
            facts=[fact_to_proto(row, conflict=row.fact_id in page.conflicts) for row in page.facts],
            next_page_token=page.next_page_token,
        )

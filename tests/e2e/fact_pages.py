"""Every fact of a predicate through ListFacts, page after page (`memory_service_grpc_client.iter_pages`), for
the e2e tests that compare what the service lists with what they wrote."""

from __future__ import annotations

import grpc

from memory_service_grpc_client import iter_pages
from memory_service_grpc_client.memory.v1 import fact_query_service_pb2
from memory_service_grpc_client.memory.v1 import fact_query_service_pb2_grpc
from memory_service_grpc_client.memory.v1 import knowledge_pb2


def every_fact(
    channel: grpc.Channel, namespace: str, predicate: str, *, include_history: bool = True
) -> list[knowledge_pb2.Fact]:
    """Every fact of ``predicate`` in ``namespace`` (history included unless ``include_history`` is False),
    in the order ListFacts pages give them."""
    stub = fact_query_service_pb2_grpc.FactQueryServiceStub(channel)
    request = fact_query_service_pb2.ListFactsRequest(
        namespace=namespace, predicate=predicate, include_history=include_history, page_size=1000
    )
    return list(iter_pages(lambda page: stub.ListFacts(page, timeout=60), request, lambda page: page.facts))

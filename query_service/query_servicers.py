"""Read-side transport: RetrievalService, FactQueryService, SourceService, ContextService,
ObservationQueryService (DESIGN §1-2).

Servicers only map proto <-> domain; validation and logic live in the domain modules, and their
`common.errors` exceptions become gRPC statuses (with BadRequest field violations) in the server's error
interceptor.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import grpc
from memory.v1 import (
    context_service_pb2,
    context_service_pb2_grpc,
    fact_query_service_pb2,
    fact_query_service_pb2_grpc,
    knowledge_pb2,
    observation_query_service_pb2,
    observation_query_service_pb2_grpc,
    retrieval_service_pb2,
    retrieval_service_pb2_grpc,
    source_service_pb2,
    source_service_pb2_grpc,
)

from common.auth.principals import current_principal
from common.kernel.config import Settings
from common.grpc.proto_mapping import dict_to_struct, fact_to_proto, instant, observation_to_proto, struct_to_dict
from common.storage.visibility import Visibility, visibility_for
from query_service.context_compiler import ContextCompiler, ContextItem, ContextRequest
from query_service.fact_reader import FactListRequest, FactReader
from query_service.hybrid_search import HybridSearcher, SearchHit, SearchQuery
from query_service.observation_reader import ObservationReader
from query_service.pii_output import PiiPolicy
from query_service.sources import SourceReader
from query_service.typed_context import TypedContextCompiler, TypedContextRequest, TypedItem

SERVICE_NAMES = (
    "memory.v1.RetrievalService",
    "memory.v1.FactQueryService",
    "memory.v1.SourceService",
    "memory.v1.ContextService",
    "memory.v1.ObservationQueryService",
    "memory.v1.TraceService",
)


def caller_visibility() -> Visibility:
    """The visibility scopes of the RPC's caller (`common.storage.visibility.visibility_for`): a token's
    scopes plus its own ``principal:<name>``; development mode (auth off) sees everything."""
    return visibility_for(current_principal())


def caller_pii_policy(settings: Settings, method: str) -> PiiPolicy:
    """The personal data policy of the RPC's caller (`query_service.pii_output.PiiPolicy`): masked output
    unless the token has PII clearance, when ``CB_PII_PROTECTION`` is on. ``method`` names the RPC in the
    ``pii_access`` audit event."""
    return PiiPolicy.for_caller(current_principal(), settings, method)


def _provenance(
    *,
    node_key: str,
    source_path: str,
    observation_ids: tuple[str, ...] | list[str] = (),
    fact_id: str = "",
    chunk_order: int = 0,
    metadata: Mapping[str, Any] | None = None,
) -> knowledge_pb2.Provenance:
    return knowledge_pb2.Provenance(
        node_key=node_key,
        source_path=source_path,
        observation_ids=list(observation_ids),
        fact_id=fact_id,
        chunk_order=chunk_order,
        metadata=dict_to_struct(metadata or {}),
    )


def _hit_to_proto(hit: SearchHit) -> retrieval_service_pb2.SearchHit:
    chunk = hit.chunk
    return retrieval_service_pb2.SearchHit(
        node_key=chunk.node_key,
        chunk_order=chunk.chunk_order,
        title=chunk.title,
        heading=chunk.heading,
        text=chunk.text,
        source_path=chunk.source_path,
        score=hit.score,
        vector_score=hit.vector_score,
        text_score=hit.text_score,
        trigram_score=hit.trigram_score,
        node_type=chunk.node_type,
        provenance=_provenance(
            node_key=hit.provenance.node_key,
            source_path=hit.provenance.source_path,
            observation_ids=hit.provenance.observation_ids,
            chunk_order=hit.provenance.chunk_order,
            metadata=hit.provenance.metadata,
        ),
    )


def _item_to_proto(item: ContextItem) -> context_service_pb2.ContextItem:
    p = item.provenance
    return context_service_pb2.ContextItem(
        kind=item.kind,
        text=item.text,
        score=item.score,
        conflict=item.conflict,
        token_count=item.token_count,
        provenance=_provenance(
            node_key=p.node_key,
            source_path=p.source_path,
            observation_ids=p.observation_ids,
            fact_id=p.fact_id,
            chunk_order=p.chunk_order,
            metadata=p.metadata,
        ),
    )


def _typed_item_to_proto(item: TypedItem) -> context_service_pb2.TypedContextItem:
    p = item.provenance
    return context_service_pb2.TypedContextItem(
        kind=item.kind,
        text=item.text,
        score=item.score,
        conflict=item.conflict,
        token_count=item.token_count,
        natural_key=item.natural_key,
        node_type=item.node_type,
        depth=item.depth,
        anchor=item.anchor,
        relation=item.relation,
        path=[
            context_service_pb2.TypedPathStep(
                fact_id=step.fact_id, relation=step.relation, direction=step.direction, node_key=step.node_key
            )
            for step in item.path
        ],
        provenance=_provenance(
            node_key=p.node_key,
            source_path=p.source_path,
            observation_ids=p.observation_ids,
            fact_id=p.fact_id,
            metadata=p.metadata,
        ),
    )


class RetrievalService(retrieval_service_pb2_grpc.RetrievalServiceServicer):  # type: ignore[misc]
    """memory.v1.RetrievalService over a `HybridSearcher`."""

    def __init__(self, searcher: HybridSearcher) -> None:
        self.searcher = searcher

    def Search(
        self, request: retrieval_service_pb2.SearchRequest, context: grpc.ServicerContext
    ) -> retrieval_service_pb2.SearchResponse:
        hits = self.searcher.search(
            SearchQuery(
                namespace=request.namespace,
                query=request.query,
                top_k=request.top_k,
                node_types=tuple(request.types),
                meta=struct_to_dict(request.meta),
                node_keys=tuple(request.node_keys),
                visibility=caller_visibility(),
                pii=caller_pii_policy(self.searcher.database.settings, "/memory.v1.RetrievalService/Search"),
            )
        )
        return retrieval_service_pb2.SearchResponse(hits=[_hit_to_proto(hit) for hit in hits])


class FactQueryService(fact_query_service_pb2_grpc.FactQueryServiceServicer):  # type: ignore[misc]
    """memory.v1.FactQueryService over a `FactReader`."""

    def __init__(self, reader: FactReader) -> None:
        self.reader = reader

    def ListFacts(
        self, request: fact_query_service_pb2.ListFactsRequest, context: grpc.ServicerContext
    ) -> fact_query_service_pb2.ListFactsResponse:
        page = self.reader.list_facts(
            FactListRequest(
                namespace=request.namespace,
                subject=request.subject,
                predicate=request.predicate,
                object=request.object,
                as_of=instant(request.as_of) if request.HasField("as_of") else None,
                include_history=request.include_history,
                include_lost=request.include_lost,
                page_size=request.page_size,
                page_token=request.page_token,
                visibility=caller_visibility(),
                pii=caller_pii_policy(self.reader.database.settings, "/memory.v1.FactQueryService/ListFacts"),
            )
        )
        return fact_query_service_pb2.ListFactsResponse(
            facts=[fact_to_proto(row, conflict=row.fact_id in page.conflicts) for row in page.facts],
            next_page_token=page.next_page_token,
        )


class SourceService(source_service_pb2_grpc.SourceServiceServicer):  # type: ignore[misc]
    """memory.v1.SourceService over a `SourceReader`."""

    def __init__(self, reader: SourceReader) -> None:
        self.reader = reader

    def GetSource(
        self, request: source_service_pb2.GetSourceRequest, context: grpc.ServicerContext
    ) -> source_service_pb2.GetSourceResponse:
        view = self.reader.get_source(
            request.namespace,
            request.natural_key,
            visibility=caller_visibility(),
            pii=caller_pii_policy(self.reader.database.settings, "/memory.v1.SourceService/GetSource"),
        )
        return source_service_pb2.GetSourceResponse(
            source=source_service_pb2.Source(
                natural_key=view.natural_key,
                title=view.title,
                content=view.content,
                content_source=view.content_source,
                type=view.node_type,
                chunk_count=view.chunk_count,
                provenance=_provenance(
                    node_key=view.natural_key,
                    source_path=view.source_path,
                    observation_ids=view.observation_ids,
                    metadata=view.provenance,
                ),
            )
        )


class ContextService(context_service_pb2_grpc.ContextServiceServicer):  # type: ignore[misc]
    """memory.v1.ContextService over a `ContextCompiler` and a `TypedContextCompiler`."""

    def __init__(self, compiler: ContextCompiler, typed: TypedContextCompiler) -> None:
        self.compiler = compiler
        self.typed = typed

    def CompileContext(
        self, request: context_service_pb2.CompileContextRequest, context: grpc.ServicerContext
    ) -> context_service_pb2.CompileContextResponse:
        pack = self.compiler.compile(
            ContextRequest(
                namespace=request.namespace,
                query=request.query,
                anchors=tuple(request.anchors),
                as_of=instant(request.as_of) if request.HasField("as_of") else None,
                token_budget=request.token_budget,
                trace_id=request.trace_id,
                visibility=caller_visibility(),
                pii=caller_pii_policy(
                    self.compiler.database.settings, "/memory.v1.ContextService/CompileContext"
                ),
            )
        )
        return context_service_pb2.CompileContextResponse(
            pack=context_service_pb2.ContextPack(
                items=[_item_to_proto(item) for item in pack.items],
                text=pack.text,
                token_count=pack.token_count,
                trace_id=pack.trace_id,
                token_budget=pack.token_budget,
                dropped_count=pack.dropped_count,
            )
        )

    def CompileTypedContext(
        self, request: context_service_pb2.CompileTypedContextRequest, context: grpc.ServicerContext
    ) -> context_service_pb2.CompileTypedContextResponse:
        pack = self.typed.compile(
            TypedContextRequest(
                namespace=request.namespace,
                query=request.query,
                anchors=tuple(request.anchors),
                as_of=instant(request.as_of) if request.HasField("as_of") else None,
                token_budget=request.token_budget,
                max_depth=request.max_depth,
                relations=tuple(request.relations),
                trace_id=request.trace_id,
                visibility=caller_visibility(),
                pii=caller_pii_policy(
                    self.typed.database.settings, "/memory.v1.ContextService/CompileTypedContext"
                ),
            )
        )
        return context_service_pb2.CompileTypedContextResponse(
            pack=context_service_pb2.TypedContextPack(
                items=[_typed_item_to_proto(item) for item in pack.items],
                text=pack.text,
                token_count=pack.token_count,
                trace_id=pack.trace_id,
                token_budget=pack.token_budget,
                dropped_count=pack.dropped_count,
                anchors=[
                    context_service_pb2.ResolvedAnchor(
                        input=anchor.input,
                        natural_key=anchor.natural_key,
                        source=anchor.source,
                        found=anchor.found,
                    )
                    for anchor in pack.anchors
                ],
                max_depth=pack.max_depth,
                relations=pack.relations,
                truncated=pack.truncated,
            )
        )


class ObservationQueryService(observation_query_service_pb2_grpc.ObservationQueryServiceServicer):  # type: ignore[misc]
    """memory.v1.ObservationQueryService over an `ObservationReader`."""

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

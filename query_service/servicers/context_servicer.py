"""ContextService transport: proto <-> domain mapping only (docs/explanation/architecture.md); CompileContext is
`query_service.context.compiler`, CompileTypedContext `query_service.context.typed_context`."""

from __future__ import annotations

from typing import Any

import grpc

from common.grpc.proto_mapping import optional_instant
from common.kernel.config import Settings
from memory_service_grpc_client.memory.v1 import context_service_pb2
from memory_service_grpc_client.memory.v1 import context_service_pb2_grpc
from query_service.context.compiler import ContextCompiler
from query_service.context.pack.items import ContextItem
from query_service.context.pack.items import ContextPack
from query_service.context.pack.items import DroppedCandidate
from query_service.context.pack.items import Selection
from query_service.context.pack.request import ContextRequest
from query_service.context.typed_context import TypedContextCompiler
from query_service.context.typed_context import TypedContextRequest
from query_service.context.typed_context import TypedItem
from query_service.servicers.read_transport import caller_pii_policy
from query_service.servicers.read_transport import caller_visibility
from query_service.servicers.read_transport import provenance_to_proto


def _item_fields(item: ContextItem) -> dict[str, Any]:
    """The fields memory.v1.ContextItem and memory.v1.TypedContextItem share."""
    return {
        "kind": item.kind,
        "text": item.text,
        "score": item.score,
        "conflict": item.conflict,
        "token_count": item.token_count,
        "provenance": provenance_to_proto(item.provenance),
    }


def _selection_to_proto(selection: Selection | None) -> context_service_pb2.ItemSelection | None:
    if selection is None:
        return None
    return context_service_pb2.ItemSelection(
        rule=selection.rule,
        reason=selection.reason,
        score_components=dict(selection.components),
        also=list(selection.also),
    )


def _item_to_proto(item: ContextItem) -> context_service_pb2.ContextItem:
    return context_service_pb2.ContextItem(
        **_item_fields(item), selection=_selection_to_proto(item.selection), group=item.group
    )


def _dropped_to_proto(dropped: DroppedCandidate) -> context_service_pb2.DroppedCandidate:
    return context_service_pb2.DroppedCandidate(
        kind=dropped.kind,
        text=dropped.text,
        score=dropped.score,
        provenance=provenance_to_proto(dropped.provenance),
        selection=_selection_to_proto(dropped.selection),
        drop_reason=dropped.drop_reason,
        token_count=dropped.token_count,
    )


def _pack_fields(pack: ContextPack) -> dict[str, Any]:
    """The fields memory.v1.ContextPack and memory.v1.TypedContextPack share, items aside."""
    return {
        "text": pack.text,
        "token_count": pack.token_count,
        "trace_id": pack.trace_id,
        "token_budget": pack.token_budget,
        "dropped_count": pack.dropped_count,
    }


def _request_fields(
    request: context_service_pb2.CompileContextRequest | context_service_pb2.CompileTypedContextRequest,
    settings: Settings,
    method: str,
) -> dict[str, Any]:
    """The `ContextRequest` fields of either request message, with the caller's visibility and PII policy
    (``method`` names the RPC in the ``pii_access`` audit event)."""
    return {
        "namespace": request.namespace,
        "query": request.query,
        "anchors": tuple(request.anchors),
        "as_of": optional_instant(request, "as_of"),
        "token_budget": request.token_budget,
        "trace_id": request.trace_id,
        "visibility": caller_visibility(),
        "pii": caller_pii_policy(settings, method),
    }


def _typed_item_to_proto(item: TypedItem) -> context_service_pb2.TypedContextItem:
    return context_service_pb2.TypedContextItem(
        **_item_fields(item),
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
    )


class ContextServicer(context_service_pb2_grpc.ContextServiceServicer):  # type: ignore[misc]
    """memory.v1.ContextService over a `ContextCompiler` and a `TypedContextCompiler`; domain errors are
    mapped to status codes by the server's interceptor."""

    def __init__(self, compiler: ContextCompiler, typed: TypedContextCompiler) -> None:
        self.compiler = compiler
        self.typed = typed

    def CompileContext(
        self, request: context_service_pb2.CompileContextRequest, context: grpc.ServicerContext
    ) -> context_service_pb2.CompileContextResponse:
        settings = self.compiler.database.settings
        pack = self.compiler.compile(
            ContextRequest(
                **_request_fields(request, settings, "/memory.v1.ContextService/CompileContext"),
                dropped_limit=request.dropped_limit,
            )
        )
        return context_service_pb2.CompileContextResponse(
            pack=context_service_pb2.ContextPack(
                items=[_item_to_proto(item) for item in pack.items],
                **_pack_fields(pack),
                dropped=[_dropped_to_proto(dropped) for dropped in pack.dropped],
            )
        )

    def CompileTypedContext(
        self, request: context_service_pb2.CompileTypedContextRequest, context: grpc.ServicerContext
    ) -> context_service_pb2.CompileTypedContextResponse:
        settings = self.typed.database.settings
        pack = self.typed.compile(
            TypedContextRequest(
                **_request_fields(request, settings, "/memory.v1.ContextService/CompileTypedContext"),
                max_depth=request.max_depth,
                relations=tuple(request.relations),
            )
        )
        return context_service_pb2.CompileTypedContextResponse(
            pack=context_service_pb2.TypedContextPack(
                items=[_typed_item_to_proto(item) for item in pack.items],
                **_pack_fields(pack),
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

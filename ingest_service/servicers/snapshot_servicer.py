"""SnapshotService transport: proto <-> domain mapping only (docs/explanation/architecture.md)."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import asdict
from typing import Any

import grpc
from google.protobuf import json_format

from common.grpc.proto_mapping import fact_assertion_to_dict
from common.grpc.proto_mapping import optional_instant
from common.kernel.errors import ViolationCollector
from ingest_service.servicers.client_stream import ClientStream
from ingest_service.servicers.client_stream import stream_header
from ingest_service.snapshots.model import ReconcileResult
from ingest_service.snapshots.model import SnapshotHeader
from ingest_service.snapshots.model import SnapshotPart
from ingest_service.snapshots.reconciler import SnapshotReconciler
from memory_service_grpc_client.memory.v1 import snapshot_service_pb2
from memory_service_grpc_client.memory.v1 import snapshot_service_pb2_grpc


def _result_fields(result: ReconcileResult) -> dict[str, Any]:
    """The fields ReconcileResponse and ReconcileStreamResponse share: all of theirs."""
    return {
        "snapshot_id": result.snapshot_id,
        "counts": snapshot_service_pb2.ReconcileCounts(**asdict(result.counts)),
        "unchanged": result.unchanged,
        "previous_snapshot_id": result.previous_snapshot_id,
    }


class SnapshotServicer(snapshot_service_pb2_grpc.SnapshotServiceServicer):  # type: ignore[misc]
    """memory.v1.SnapshotService (Reconcile, ReconcileStream); domain errors are mapped to status codes by
    the server's interceptor."""

    def __init__(self, reconciler: SnapshotReconciler) -> None:
        self.reconciler = reconciler

    def Reconcile(
        self, request: snapshot_service_pb2.ReconcileRequest, context: grpc.ServicerContext
    ) -> snapshot_service_pb2.ReconcileResponse:
        result = self.reconciler.reconcile(
            request.namespace,
            request.source,
            request.scope,
            request.snapshot_id,
            optional_instant(request, "snapshot_time"),
            [
                json_format.MessageToDict(entity, preserving_proto_field_name=True)
                for entity in request.entities
            ],
            [fact_assertion_to_dict(fact) for fact in request.facts],
            allow_mass_sweep=request.allow_mass_sweep,
        )
        return snapshot_service_pb2.ReconcileResponse(**_result_fields(result))

    def ReconcileStream(
        self,
        request_iterator: Iterator[snapshot_service_pb2.ReconcileStreamRequest],
        context: grpc.ServicerContext,
    ) -> snapshot_service_pb2.ReconcileStreamResponse:
        """The header, then the parts as `SnapshotPart`s, consumed lazily by the reconciler (one message
        in memory at a time), then the end message; a broken stream surfaces inside the run (`_parts`),
        which rolls it back."""
        header = stream_header(request_iterator)
        result = self.reconciler.reconcile_stream(
            SnapshotHeader(
                header.namespace,
                header.source,
                header.scope,
                header.snapshot_id,
                optional_instant(header, "snapshot_time"),
                header.allow_mass_sweep,
            ),
            _parts(request_iterator),
        )
        return snapshot_service_pb2.ReconcileStreamResponse(**_result_fields(result))


def _parts(messages: Iterator[snapshot_service_pb2.ReconcileStreamRequest]) -> Iterator[SnapshotPart]:
    """Messages 2.. of a ReconcileStream as parts; returns normally only after the end message, with the
    numbers of items that arrived, and the close of the stream (so the run commits only then).

    The end message is what tells a complete snapshot from a broken stream: when a client cancels, the
    server's request iterator may simply stop, like a normal close.

    Raises:
        InvalidArgument: a later message carries a header, a message follows the end, the end message
            is missing, or its numbers differ from what arrived.
        Unavailable: the stream broke (cancelled, deadline exceeded, connection lost); the run is
            rolled back.
    """
    stream = ClientStream(messages, "items", consequence="nothing was written")
    entities, facts = 0, 0
    for part in stream.parts():
        entities += len(part.entities)
        facts += len(part.facts)
        yield SnapshotPart(
            [json_format.MessageToDict(entity, preserving_proto_field_name=True) for entity in part.entities],
            [fact_assertion_to_dict(fact) for fact in part.facts],
        )
    end = stream.end
    check = ViolationCollector()
    if end.entity_count != entities:
        check.add("end.entity_count", f"{end.entity_count} entities announced, {entities} arrived")
    if end.fact_count != facts:
        check.add("end.fact_count", f"{end.fact_count} facts announced, {facts} arrived")
    check.raise_if_any()

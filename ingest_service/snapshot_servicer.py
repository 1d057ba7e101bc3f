"""SnapshotService transport: proto <-> domain mapping only (DESIGN §1)."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import asdict

import grpc
from google.protobuf import json_format
from memory.v1 import snapshot_service_pb2, snapshot_service_pb2_grpc

from common.errors import FieldViolation, InvalidArgument, Unavailable
from common.proto_mapping import fact_assertion_to_dict, instant
from ingest_service.snapshots import SnapshotHeader, SnapshotPart, SnapshotReconciler


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
            instant(request.snapshot_time) if request.HasField("snapshot_time") else None,
            [
                json_format.MessageToDict(entity, preserving_proto_field_name=True)
                for entity in request.entities
            ],
            [fact_assertion_to_dict(fact) for fact in request.facts],
        )
        return snapshot_service_pb2.ReconcileResponse(
            snapshot_id=result.snapshot_id,
            counts=snapshot_service_pb2.ReconcileCounts(**asdict(result.counts)),
            unchanged=result.unchanged,
            previous_snapshot_id=result.previous_snapshot_id,
        )

    def ReconcileStream(
        self,
        request_iterator: Iterator[snapshot_service_pb2.ReconcileStreamRequest],
        context: grpc.ServicerContext,
    ) -> snapshot_service_pb2.ReconcileStreamResponse:
        """The header, then the parts as `SnapshotPart`s, consumed lazily by the reconciler (one message
        in memory at a time). A broken stream surfaces as UNAVAILABLE inside the run, which rolls back."""
        first = next(request_iterator, None)
        if first is None or first.WhichOneof("part") != "header":
            raise InvalidArgument(
                [FieldViolation("header", "the first message of the stream must carry the header")]
            )
        header = first.header
        result = self.reconciler.reconcile_stream(
            SnapshotHeader(
                header.namespace,
                header.source,
                header.scope,
                header.snapshot_id,
                instant(header.snapshot_time) if header.HasField("snapshot_time") else None,
            ),
            _parts(request_iterator, context),
        )
        return snapshot_service_pb2.ReconcileStreamResponse(
            snapshot_id=result.snapshot_id,
            counts=snapshot_service_pb2.ReconcileCounts(**asdict(result.counts)),
            unchanged=result.unchanged,
            previous_snapshot_id=result.previous_snapshot_id,
        )


def _parts(
    messages: Iterator[snapshot_service_pb2.ReconcileStreamRequest], context: grpc.ServicerContext
) -> Iterator[SnapshotPart]:
    """Messages 2.. of a ReconcileStream as parts.

    Raises:
        InvalidArgument: a later message carries a header, or neither header nor items.
        Unavailable: the stream broke (cancelled, deadline exceeded, connection lost) before the client
            closed it; the run is rolled back.
    """
    index = 1
    try:
        for index, message in enumerate(messages, start=1):
            which = message.WhichOneof("part")
            if which != "items":
                description = "only the first message carries the header" if which else "items required"
                raise InvalidArgument(
                    [FieldViolation("items", f"message {index} of the stream: {description}")]
                )
            yield SnapshotPart(
                [
                    json_format.MessageToDict(entity, preserving_proto_field_name=True)
                    for entity in message.items.entities
                ],
                [fact_assertion_to_dict(fact) for fact in message.items.facts],
            )
    except grpc.RpcError as error:
        raise Unavailable(
            f"the stream broke after {index} messages, before the client closed it; nothing was written",
            reason="STREAM_BROKEN",
        ) from error
    if not context.is_active():
        raise Unavailable("the stream was cancelled; nothing was written", reason="STREAM_BROKEN")

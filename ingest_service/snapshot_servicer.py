"""SnapshotService transport: proto <-> domain mapping only (DESIGN §1)."""

from __future__ import annotations

from dataclasses import asdict

import grpc
from google.protobuf import json_format
from memory.v1 import snapshot_service_pb2, snapshot_service_pb2_grpc

from common.proto_mapping import fact_assertion_to_dict, instant
from ingest_service.snapshots import SnapshotReconciler


class SnapshotServicer(snapshot_service_pb2_grpc.SnapshotServiceServicer):  # type: ignore[misc]
    """memory.v1.SnapshotService; domain errors are mapped to status codes by the server's interceptor."""

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

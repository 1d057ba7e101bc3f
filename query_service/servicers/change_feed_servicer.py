"""ChangeFeedService transport: proto <-> domain mapping only; the stream is
`query_service.change_feed.watcher.ChangeWatcher`."""

from __future__ import annotations

from collections.abc import Iterator

import grpc

from common.grpc.proto_mapping import change_filter
from common.grpc.proto_mapping import dict_to_struct
from common.grpc.proto_mapping import timestamp
from common.kernel.consistency import encode_token
from common.storage.change_feed.outbox import ChangeRow
from memory_service_grpc_client.memory.v1 import change_feed_service_pb2
from memory_service_grpc_client.memory.v1 import change_feed_service_pb2_grpc
from query_service.change_feed.watcher import ChangeBatch
from query_service.change_feed.watcher import ChangeWatcher
from query_service.change_feed.watcher import WatchRequest
from query_service.servicers.read_transport import caller_pii_policy
from query_service.servicers.read_transport import caller_visibility

_METHOD = "/memory.v1.ChangeFeedService/WatchChanges"


class ChangeFeedServicer(change_feed_service_pb2_grpc.ChangeFeedServiceServicer):  # type: ignore[misc]
    """memory.v1.ChangeFeedService over a `ChangeWatcher`; domain errors are mapped to status codes by the
    server's interceptor."""

    def __init__(self, watcher: ChangeWatcher) -> None:
        self.watcher = watcher

    def WatchChanges(
        self, request: change_feed_service_pb2.WatchChangesRequest, context: grpc.ServicerContext
    ) -> Iterator[change_feed_service_pb2.WatchChangesResponse]:
        stream = self.watcher.watch(
            WatchRequest(
                namespace=request.namespace,
                resume_after=request.resume_after,
                filters=change_filter(request),
                heartbeat_seconds=request.heartbeat_seconds,
            ),
            visibility=caller_visibility(),
            pii=caller_pii_policy(self.watcher.database.settings, _METHOD),
            active=context.is_active,
        )
        for item in stream:
            if isinstance(item, ChangeBatch):
                token = encode_token(item.position)
                for change in item.changes:
                    yield change_feed_service_pb2.WatchChangesResponse(change=change_to_proto(change, token))
            else:
                yield change_feed_service_pb2.WatchChangesResponse(
                    heartbeat=change_feed_service_pb2.Heartbeat(cursor=item.cursor, time=timestamp(item.time))
                )


def change_to_proto(change: ChangeRow, token: str) -> change_feed_service_pb2.ChangeEvent:
    """memory.v1.ChangeEvent of ``change`` (``token``: the consistency token of its page)."""
    return change_feed_service_pb2.ChangeEvent(
        event_id=str(change.event_id),
        cursor=change.cursor,
        namespace=change.namespace,
        event_type=change.event_type,
        item_key=change.item_key,
        subject_key=change.subject_key,
        predicate=change.predicate,
        object_key=change.object_key,
        scopes=list(change.scopes),
        payload=dict_to_struct(change.payload),
        commit_time=timestamp(change.committed_at),
        consistency_token=token,
    )

"""Write-side visibility scopes on the real services (docs/explanation/knowledge-model.md;
`common.domain.write_access`).

Both services run with a tokens file. ``alpha`` writes with ``workspace:alpha``; ``plain`` writes with no
scopes; readers ``reader-alpha`` (``workspace:alpha``) and ``reader-plain`` (none). For every write path:
a scope the writer does not hold is refused (PERMISSION_DENIED for single-target RPCs, a failed item with
a field violation in batches), and a writer cannot overwrite, extend, delete, redact, purge or close an
item it cannot see (NOT_FOUND, like a missing one). Each refusal changes nothing. A deletion's audit
event is as visible as the deleted node was.
"""

from __future__ import annotations

import functools
import uuid
from collections.abc import Callable
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest
from google.protobuf import json_format

from common.auth.principals import Right
from common.kernel.config import Settings
from memory_service_grpc_client import RpcFailure
from memory_service_grpc_client import rpc_failure
from memory_service_grpc_client.memory.v1 import audit_service_pb2
from memory_service_grpc_client.memory.v1 import audit_service_pb2_grpc
from memory_service_grpc_client.memory.v1 import document_service_pb2
from memory_service_grpc_client.memory.v1 import document_service_pb2_grpc
from memory_service_grpc_client.memory.v1 import fact_query_service_pb2
from memory_service_grpc_client.memory.v1 import fact_query_service_pb2_grpc
from memory_service_grpc_client.memory.v1 import fact_service_pb2
from memory_service_grpc_client.memory.v1 import fact_service_pb2_grpc
from memory_service_grpc_client.memory.v1 import knowledge_pb2
from memory_service_grpc_client.memory.v1 import observation_service_pb2
from memory_service_grpc_client.memory.v1 import observation_service_pb2_grpc
from memory_service_grpc_client.memory.v1 import snapshot_service_pb2
from memory_service_grpc_client.memory.v1 import snapshot_service_pb2_grpc
from memory_service_grpc_client.memory.v1 import source_service_pb2
from memory_service_grpc_client.memory.v1 import source_service_pb2_grpc
from memory_service_grpc_client.memory.v1 import trace_service_pb2
from memory_service_grpc_client.memory.v1 import trace_service_pb2_grpc
from tests.e2e.conftest import TokenChannels
from tests.e2e.conftest import token_secured_services
from tests.e2e.isolation_world import read_observation
from tests.e2e.query_service_data import assert_facts
from tests.e2e.token_grants import grant

pytestmark = pytest.mark.e2e

SECRET = "doc:alpha-secret"
SECRET_TEXT = "Alpha secret: the merger closes in May."


class World(TokenChannels):
    def __init__(self, tokens_file: Path) -> None:
        self.ns = "wsc-" + uuid.uuid4().hex[:12]
        alpha = ["workspace:alpha"]
        self.alpha = grant(tokens_file, "alpha", Right.WRITE, [self.ns], scopes=alpha)
        self.plain = grant(tokens_file, "plain", Right.WRITE, [self.ns])
        self.reader_alpha = grant(tokens_file, "reader-alpha", Right.READ, [self.ns], scopes=alpha)
        self.reader_plain = grant(tokens_file, "reader-plain", Right.READ, [self.ns])
        self.ingest_addr = self.query_addr = ""
        self.secret_observation = ""
        self.secret_fact = ""


def _failure(call: Callable[[], Any]) -> RpcFailure:
    with pytest.raises(grpc.RpcError) as raised:
        call()
    return rpc_failure(raised.value)


def _observation(namespace: str, external_id: str, scopes: list[str], assertions: list[Any]) -> Any:
    return json_format.ParseDict(
        {
            "namespace": namespace,
            "source": {"system": "wsc", "stream": "notes", "external_id": external_id},
            "kind": "note",
            "occurred_at": "2024-05-01T10:00:00Z",
            "scopes": scopes,
            "content": f"note {external_id}",
            "assertions": assertions,
        },
        knowledge_pb2.Observation(),
    )


def _fact(subject: str, predicate: str, obj: str, **extra: Any) -> knowledge_pb2.FactAssertion:
    return json_format.ParseDict(
        {
            "subject": subject,
            "predicate": predicate,
            "object": obj,
            "valid_from": "2024-05-01T00:00:00Z",
            **extra,
        },
        knowledge_pb2.FactAssertion(),
    )


@pytest.fixture(scope="module")
def world(settings: Settings, tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    tokens_file = tmp_path_factory.mktemp("write-scopes") / "tokens.yaml"
    world = World(tokens_file)
    with token_secured_services(settings, tokens_file) as (world.ingest_addr, world.query_addr):
        with world.ingest(world.alpha) as channel:
            document_service_pb2_grpc.DocumentServiceStub(channel).Retain(
                document_service_pb2.RetainRequest(
                    namespace=world.ns, natural_key=SECRET, content=SECRET_TEXT, scopes=["workspace:alpha"]
                ),
                timeout=120,
            )
            result = (
                observation_service_pb2_grpc.ObservationServiceStub(channel)
                .RecordObservations(
                    observation_service_pb2.RecordObservationsRequest(
                        observations=[
                            _observation(
                                world.ns,
                                "secret-1",
                                ["workspace:alpha"],
                                [
                                    {
                                        "fact": {
                                            "subject": "person:ivan",
                                            "predicate": "WORKS_ON",
                                            "object": "project:merger",
                                            "valid_from": "2024-05-01T00:00:00Z",
                                        }
                                    }
                                ],
                            )
                        ]
                    ),
                    timeout=120,
                )
                .results[0]
            )
            assert result.status == "processed", result.error
            world.secret_observation = result.observation_id
        with world.query(world.reader_alpha) as channel:
            facts = (
                fact_query_service_pb2_grpc.FactQueryServiceStub(channel)
                .ListFacts(
                    fact_query_service_pb2.ListFactsRequest(
                        namespace=world.ns, subject="person:ivan", predicate="WORKS_ON"
                    ),
                    timeout=60,
                )
                .facts
            )
            world.secret_fact = facts[0].fact_id
        yield world


def _secret_unchanged(world: World) -> None:
    with world.query(world.reader_alpha) as channel:
        source = source_service_pb2_grpc.SourceServiceStub(channel).GetSource(
            source_service_pb2.GetSourceRequest(namespace=world.ns, natural_key=SECRET), timeout=60
        )
        assert source.source.content == SECRET_TEXT
        observation = read_observation(channel, world.ns, world.secret_observation)
        assert observation.status == "processed" and observation.content == "note secret-1"
        facts = (
            fact_query_service_pb2_grpc.FactQueryServiceStub(channel)
            .ListFacts(
                fact_query_service_pb2.ListFactsRequest(
                    namespace=world.ns, subject="person:ivan", predicate="WORKS_ON", include_history=True
                ),
                timeout=60,
            )
            .facts
        )
        # The secret fact stays open; the only other version is the outsider's pending supersession of it
        # (recorded, never applied to a fact its writer cannot see).
        by_id = {f.fact_id: f for f in facts}
        assert not by_id[world.secret_fact].HasField("valid_to")
        assert all(f.fact_id == world.secret_fact or f.supersedes == world.secret_fact for f in facts)


def test_scopes_outside_the_token_are_refused_on_every_write_path(world: World) -> None:
    ns = world.ns
    with world.ingest(world.alpha) as channel:
        documents = document_service_pb2_grpc.DocumentServiceStub(channel)
        for call in (
            functools.partial(
                documents.Retain,
                document_service_pb2.RetainRequest(
                    namespace=ns, natural_key="doc:beta", content="x", scopes=["task:T-1", "workspace:beta"]
                ),
                timeout=60,
            ),
            functools.partial(
                documents.PutChunks,
                document_service_pb2.PutChunksRequest(
                    namespace=ns,
                    natural_key="doc:beta",
                    scopes=["principal:someone-else"],
                    chunks=[document_service_pb2.ChunkInput(chunk_order=0, text="x")],
                ),
                timeout=60,
            ),
            functools.partial(
                audit_service_pb2_grpc.AuditServiceStub(channel).RecordAuditEvent,
                audit_service_pb2.RecordAuditEventRequest(
                    namespace=ns, action="export", scopes=["workspace:beta"]
                ),
                timeout=60,
            ),
            functools.partial(
                snapshot_service_pb2_grpc.SnapshotServiceStub(channel).Reconcile,
                json_format.ParseDict(
                    {
                        "namespace": ns,
                        "source": "hr",
                        "scope": "team",
                        "snapshot_id": "s-1",
                        "snapshot_time": "2024-06-01T00:00:00Z",
                        "facts": [
                            {
                                "subject": "person:ivan",
                                "predicate": "MEMBER_OF",
                                "object": "team:beta",
                                "scopes": ["workspace:beta"],
                            }
                        ],
                    },
                    snapshot_service_pb2.ReconcileRequest(),
                ),
                timeout=60,
            ),
        ):
            failure = _failure(call)
            assert failure.code == grpc.StatusCode.PERMISSION_DENIED and failure.reason == "SCOPE_NOT_ALLOWED"
        # Batches: the item fails with a field violation (a batch with nothing valid is INVALID_ARGUMENT).
        recorded = _failure(
            lambda: observation_service_pb2_grpc.ObservationServiceStub(channel).RecordObservations(
                observation_service_pb2.RecordObservationsRequest(
                    observations=[_observation(ns, "beta-1", ["workspace:beta"], [])]
                ),
                timeout=60,
            )
        )
        assert recorded.code == grpc.StatusCode.INVALID_ARGUMENT
        assert [v.field for v in recorded.violations] == ["observations[0].scopes[0]"]
        asserted = assert_facts(
            channel,
            ns,
            [
                _fact("person:ivan", "LIKES", "drink:tea", scopes=["workspace:beta"]),
                _fact("person:ivan", "LIKES", "drink:coffee", scopes=["workspace:alpha", "principal:alpha"]),
            ],
        )
        assert asserted[0].field_violations == [
            "facts[0].scopes[0]: scope 'workspace:beta' is not among the scopes this token may write"
        ]
        assert not asserted[1].error  # its own workspace and its own principal are allowed
        # Nothing of the refused writes exists.
        with world.query(world.reader_alpha) as query:
            missing = _failure(
                lambda: source_service_pb2_grpc.SourceServiceStub(query).GetSource(
                    source_service_pb2.GetSourceRequest(namespace=ns, natural_key="doc:beta"), timeout=60
                )
            )
            assert missing.code == grpc.StatusCode.NOT_FOUND
            likes = (
                fact_query_service_pb2_grpc.FactQueryServiceStub(query)
                .ListFacts(
                    fact_query_service_pb2.ListFactsRequest(
                        namespace=ns, subject="person:ivan", predicate="LIKES"
                    ),
                    timeout=60,
                )
                .facts
            )
            assert [f.object for f in likes] == ["drink:coffee"]


def test_hidden_items_cannot_be_touched(world: World) -> None:
    ns = world.ns
    with world.ingest(world.plain) as channel:
        documents = document_service_pb2_grpc.DocumentServiceStub(channel)
        observations = observation_service_pb2_grpc.ObservationServiceStub(channel)
        not_found_calls = {
            "Retain": functools.partial(
                documents.Retain,
                document_service_pb2.RetainRequest(namespace=ns, natural_key=SECRET, content="overwritten"),
                timeout=60,
            ),
            "PutChunks": functools.partial(
                documents.PutChunks,
                document_service_pb2.PutChunksRequest(
                    namespace=ns,
                    natural_key=SECRET,
                    chunks=[document_service_pb2.ChunkInput(text="overwritten")],
                ),
                timeout=60,
            ),
            "DeleteNode": functools.partial(
                documents.DeleteNode,
                document_service_pb2.DeleteNodeRequest(namespace=ns, natural_key=SECRET),
                timeout=60,
            ),
            "RedactObservation": functools.partial(
                observations.RedactObservation,
                observation_service_pb2.RedactObservationRequest(
                    namespace=ns, observation_id=world.secret_observation
                ),
                timeout=60,
            ),
            "PurgeObservation": functools.partial(
                observations.PurgeObservation,
                observation_service_pb2.PurgeObservationRequest(
                    namespace=ns, observation_id=world.secret_observation
                ),
                timeout=60,
            ),
            "CloseFact": functools.partial(
                fact_service_pb2_grpc.FactServiceStub(channel).CloseFact,
                fact_service_pb2.CloseFactRequest(namespace=ns, fact_id=world.secret_fact),
                timeout=60,
            ),
            "RecordAuditEvent": functools.partial(
                audit_service_pb2_grpc.AuditServiceStub(channel).RecordAuditEvent,
                audit_service_pb2.RecordAuditEventRequest(namespace=ns, action="export", target_key=SECRET),
                timeout=60,
            ),
            "Reconcile": functools.partial(
                snapshot_service_pb2_grpc.SnapshotServiceStub(channel).Reconcile,
                json_format.ParseDict(
                    {
                        "namespace": ns,
                        "source": "crm",
                        "scope": "all",
                        "snapshot_id": "s-hidden",
                        "snapshot_time": "2024-06-01T00:00:00Z",
                        "entities": [{"key": SECRET, "title": "overwritten"}],
                    },
                    snapshot_service_pb2.ReconcileRequest(),
                ),
                timeout=60,
            ),
        }
        for name, call in not_found_calls.items():
            assert _failure(call).code == grpc.StatusCode.NOT_FOUND, name
        # Extending a hidden node or fact (same identity) fails the item, "not found".
        hidden_extensions = [
            _fact("person:plain", "READS", SECRET),
            _fact("person:ivan", "WORKS_ON", "project:merger"),
            _fact("person:ivan", "WORKS_ON", "project:other", supersedes=world.secret_fact),
            _fact("person:plain", "READS", "doc:public"),
        ]
        asserted = assert_facts(channel, ns, hidden_extensions)
        assert [list(r.field_violations) for r in asserted] == [
            [f"facts[0].object: node '{SECRET}' not found"],
            [f"facts[1]: fact {world.secret_fact} not found"],
            # A hidden superseded fact answers like one that has not arrived yet (a pending supersession,
            # docs/explanation/knowledge-model.md): no violation, and `_secret_unchanged` shows it stays open.
            [],
            [],
        ]
        result = observations.RecordObservations(
            observation_service_pb2.RecordObservationsRequest(
                observations=[
                    _observation(ns, "plain-1", [], [{"entity": {"key": SECRET, "title": "overwritten"}}])
                ]
            ),
            timeout=60,
        ).results[0]
        assert result.status == "partially_processed"
        assert list(result.field_violations) == [f"assertions[0].entity: node '{SECRET}' not found"]
    _secret_unchanged(world)


def test_deletion_audit_is_as_visible_as_the_node(world: World) -> None:
    ns = world.ns
    key = "doc:alpha-disposable"
    trace_id = "wsc-del-" + uuid.uuid4().hex
    with world.ingest(world.alpha) as channel:
        documents = document_service_pb2_grpc.DocumentServiceStub(channel)
        documents.Retain(
            document_service_pb2.RetainRequest(
                namespace=ns,
                natural_key=key,
                title="Alpha plan",
                content="disposable",
                scopes=["workspace:alpha"],
            ),
            timeout=120,
        )
        deleted = documents.DeleteNode(
            document_service_pb2.DeleteNodeRequest(namespace=ns, natural_key=key, trace_id=trace_id),
            timeout=60,
        )
    assert deleted.type == "document"
    request = trace_service_pb2.GetTraceRequest(namespace=ns, trace_id=trace_id)
    with world.query(world.reader_alpha) as channel:
        trace = trace_service_pb2_grpc.TraceServiceStub(channel).GetTrace(request, timeout=60).trace
    [event] = [entry.audit_event for entry in trace.entries]
    assert event.principal == "alpha" and list(event.scopes) == ["workspace:alpha"]
    assert json_format.MessageToDict(event.details)["title"] == "Alpha plan"
    with world.query(world.reader_plain) as channel:
        stub = trace_service_pb2_grpc.TraceServiceStub(channel)
        assert (
            _failure(functools.partial(stub.GetTrace, request, timeout=60)).code == grpc.StatusCode.NOT_FOUND
        )

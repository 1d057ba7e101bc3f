"""CompileContext values a participant link (``episode:<id> SUBJECT service:payments-api``) by what it adds
(docs/explanation/context-compilation.md): real servers, real database, real embedding model.

What a user saw: with the anchor ``service:payments-api``, half the anchor facts of a 1,200-token pack were
such links, scored 1.0, repeating episodes the pack already held and pushing a postmortem's action items
out.
"""

from __future__ import annotations

import time
from typing import Any

import grpc
import pytest
from google.protobuf import json_format

from memory_service_grpc_client.memory.v1 import document_service_pb2
from memory_service_grpc_client.memory.v1 import document_service_pb2_grpc
from memory_service_grpc_client.memory.v1 import knowledge_pb2
from memory_service_grpc_client.memory.v1 import observation_service_pb2
from memory_service_grpc_client.memory.v1 import observation_service_pb2_grpc
from tests.e2e.context_packs import compile_pack

pytestmark = pytest.mark.e2e

UPDATES = [
    ("2026-11-03T09:02:00Z", "BILL-42: payments-api error rate at 12 %, invoices are created twice."),
    ("2026-11-03T09:20:00Z", "BILL-42: the retry storm comes from the payments-api client, rolled back 4.18."),
    ("2026-11-03T10:05:00Z", "BILL-42: payments-api error rate back to normal, duplicate invoices refunded."),
]
POSTMORTEM = """# Postmortem BILL-42: duplicate invoices from payments-api

On 3 November payments-api created invoices twice for 40 minutes after a client retried every timeout.

## Action items

1. Idempotency keys on invoice creation in payments-api, so a retried request creates nothing new.
2. Retries in the payments-api client with exponential backoff and jitter, at most three attempts.
3. An alert on the share of duplicate invoices, paging the billing on-call above 0.1 %.
4. A refund runbook for duplicate charges, owned by the billing team.
"""


def _update(namespace: str, index: int) -> dict[str, Any]:
    occurred_at, text = UPDATES[index]
    return {
        "namespace": namespace,
        "source": {"system": "pager", "stream": "bill-42", "external_id": f"u{index}"},
        "kind": "incident.update",
        "occurred_at": occurred_at,
        "actor": {"type": "person", "id": "oncall"},
        "subject": {"type": "service", "id": "payments-api"},
        "content": text,
    }


def _wait_for_embeddings(ingest_channel: grpc.Channel, namespace: str) -> None:
    stub = observation_service_pb2_grpc.ObservationServiceStub(ingest_channel)
    request = observation_service_pb2.GetEmbeddingBacklogRequest(namespace=namespace)
    for _ in range(600):
        if stub.GetEmbeddingBacklog(request, timeout=30).pending_chunks == 0:
            return
        time.sleep(0.2)
    raise AssertionError("episodes not embedded")


def _is_participant_link(item: Any) -> bool:
    return item.kind == "fact" and item.provenance.node_key.startswith("episode:") and (
        " SUBJECT " in item.text or " ACTOR " in item.text
    )


def test_participant_links_of_episodes_in_the_pack_give_way_to_the_postmortem(
    ingest_channel: grpc.Channel, query_channel: grpc.Channel, namespace: str
) -> None:
    observe = observation_service_pb2_grpc.ObservationServiceStub(ingest_channel)
    observe.RecordObservations(
        observation_service_pb2.RecordObservationsRequest(
            observations=[
                json_format.ParseDict(_update(namespace, index), knowledge_pb2.Observation())
                for index in range(len(UPDATES))
            ]
        ),
        timeout=120,
    )
    document_service_pb2_grpc.DocumentServiceStub(ingest_channel).Retain(
        document_service_pb2.RetainRequest(
            namespace=namespace,
            natural_key="doc:postmortem-bill-42",
            content=POSTMORTEM,
            links=["service:payments-api"],
        ),
        timeout=120,
    )
    _wait_for_embeddings(ingest_channel, namespace)

    question = "what are the action items of the payments-api outage BILL-42"
    anchors = ["service:payments-api"]
    pack = compile_pack(
        query_channel, namespace, query=question, anchors=anchors, token_budget=1200, dropped_limit=50
    )
    episodes_in_pack = {item.provenance.node_key for item in pack.items if item.kind == "chunk"}
    assert len([key for key in episodes_in_pack if key.startswith("episode:")]) == len(UPDATES)
    links = [item for item in pack.items if _is_participant_link(item)]
    assert not [item.text for item in links if item.provenance.node_key in episodes_in_pack]
    assert "Idempotency keys on invoice creation" in pack.text
    assert "A refund runbook for duplicate charges" in pack.text
    redundant = [d for d in pack.dropped if d.drop_reason.startswith("adds nothing: its episode")]
    assert len(redundant) == len(UPDATES)  # each update's SUBJECT link (about the anchor), 60 tokens each

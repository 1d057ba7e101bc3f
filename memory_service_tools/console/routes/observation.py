"""An observation: its fields, its status, and what its projection produced."""

from __future__ import annotations

from typing import Any

from google.protobuf import json_format

from memory_service_grpc_client.memory.v1 import fact_query_service_pb2
from memory_service_grpc_client.memory.v1 import observation_query_service_pb2
from memory_service_tools.console.page_view import PageView
from memory_service_tools.console.views import from_timestamp
from memory_service_tools.console.views import instant_text

FACT_PAGE = 200


def build(view: PageView) -> dict[str, Any]:
    """Values of observation.html: the observation, its assertions as sent, and the facts that cite it."""
    observation_id = view.param("id")
    ns = view.address.namespace
    values: dict[str, Any] = {"title": "Observation", "observation_id": observation_id, "observation": None}
    if not (observation_id and ns):
        return values
    response = view.gateway.call_rpc(
        view.gateway.client.get_observation,
        observation_query_service_pb2.GetObservationRequest(namespace=ns, observation_id=observation_id),
    )
    if response is None:
        return values
    observation = response.observation
    as_dict = json_format.MessageToDict(observation)
    # What the projection produced: facts whose evidence names this observation, found among the facts of
    # the subjects its fact assertions name (and of its own subject).
    subjects = {f"{observation.subject.type}:{observation.subject.id}"} if observation.subject.id else set()
    for assertion in as_dict.get("assertions", []):
        subject = assertion.get("fact", {}).get("subject")
        if isinstance(subject, str):
            subjects.add(subject)
        elif isinstance(subject, dict) and "type" in subject and "id" in subject:
            subjects.add(f"{subject['type']}:{subject['id']}")
    produced = {}
    for subject in sorted(subjects):
        facts = view.gateway.call_rpc(
            view.gateway.client.list_facts,
            fact_query_service_pb2.ListFactsRequest(
                namespace=ns, subject=subject, include_history=True, include_lost=True, page_size=FACT_PAGE
            ),
        )
        for fact in facts.facts if facts else []:
            if observation_id in fact.observation_ids:
                produced[fact.fact_id] = fact
    return {
        **values,
        "title": f"Observation {observation_id}",
        "observation": observation,
        "fields": as_dict,
        "occurred": instant_text(from_timestamp(observation.occurred_at)),
        "received": instant_text(from_timestamp(observation.received_time)),
        "assertions": as_dict.get("assertions", []),
        "produced": list(produced.values()),
    }

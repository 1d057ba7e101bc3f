"""The MCP tool that records observations (ObservationService.RecordObservations)."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from typing import Annotated, Any

from google.protobuf import json_format
from mcp.server.mcpserver import Context
from memory_service_grpc_client.memory.v1 import knowledge_pb2, observation_service_pb2
from pydantic import Field

from common.kernel.identifiers import canonical_instant
from memory_service_tools.mcp.arguments import (
    FactInput,
    Instant,
    Namespace,
    instant_argument,
    participant_argument,
)
from memory_service_tools.mcp.results import as_json, failure_block, refused_items
from memory_service_tools.mcp.tool_calls import ToolCalls

__all__ = ["observation_tools"]


def observation_tools(calls: ToolCalls) -> list[Callable[..., Any]]:
    """The tools that record what happened: ``record_observation``."""

    def record_observation(
        ctx: Context,
        namespace: Namespace,
        content: Annotated[str, Field(description="what happened or was said, as plain text (searchable)")],
        kind: Annotated[
            str, Field(description="kind of event, e.g. note, decision, meeting, deploy")
        ] = "note",
        subject: Annotated[
            str | None, Field(description="natural key the observation is about, e.g. service:billing")
        ] = None,
        actor: Annotated[
            str | None, Field(description="natural key of who reported it, e.g. agent:planner")
        ] = None,
        occurred_at: Instant = None,
        facts: Annotated[
            list[FactInput] | None, Field(description="facts this observation states (optional)")
        ] = None,
        external_id: Annotated[
            str | None,
            Field(description="your id of this event; the same id again is a duplicate that changes nothing"),
        ] = None,
        source_system: Annotated[str, Field(description="system that reported it")] = "mcp",
        source_stream: Annotated[str, Field(description="stream of that system")] = "agent",
        scopes: Annotated[
            list[str] | None,
            Field(description="visibility scopes, e.g. workspace:team-a; default visible to the namespace"),
        ] = None,
    ) -> dict[str, Any]:
        """Remember something: record one observation (immutable evidence) in a namespace.

        The content becomes a searchable episode; facts given here become temporal facts backed by this
        observation (evidence "asserted"). Recording the same observation again (same external_id, or
        the same content, kind, time and participants) is a duplicate and changes nothing.
        Returns observation_id, created (false for a duplicate), status, episode_key and what was
        projected (entities_upserted, facts_created, facts_strengthened).
        """
        when = instant_argument(occurred_at, "occurred_at") or canonical_instant(datetime.now(UTC))
        observation: dict[str, Any] = {
            "namespace": namespace,
            "source": {"system": source_system, "stream": source_stream},
            "kind": kind,
            "occurred_at": when,
            "content": content,
        }
        if external_id:
            observation["source"]["external_id"] = external_id
        for field, key in (("actor", actor), ("subject", subject)):
            participant = participant_argument(key, field)
            if participant is not None:
                observation[field] = participant
        if scopes:
            observation["scopes"] = scopes
        assertions = []
        for number, fact in enumerate(facts or []):
            entry: dict[str, Any] = {
                "subject": fact.subject,
                "predicate": fact.predicate,
                "object": fact.object,
            }
            for name in ("valid_from", "valid_to"):
                value = instant_argument(getattr(fact, name), f"facts[{number}].{name}")
                if value is not None:
                    entry[name] = value
            if fact.supersedes:
                entry["supersedes"] = fact.supersedes
            assertions.append({"fact": entry})
        if assertions:
            observation["assertions"] = assertions
        request = observation_service_pb2.RecordObservationsRequest(
            observations=[json_format.ParseDict(observation, knowledge_pb2.Observation())]
        )
        response = calls.call(ctx, "record_observations", request)
        result = response.results[0]
        if result.status == "failed" or result.field_violations:
            # Partly refused (partially_processed: an assertion failed) is a tool error too (the isError
            # rule). The SDK passes a CallToolResult through as it is (the declared dict stays the
            # output schema).
            return refused_items(  # type: ignore[return-value]
                as_json(result),
                [failure_block(f"error: INVALID_ARGUMENT: {result.error}", list(result.field_violations))],
            )
        return as_json(result)

    return [record_observation]

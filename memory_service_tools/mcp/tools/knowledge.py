"""The MCP tools over the knowledge of a namespace: ``record_observation`` (ObservationService), ``search`` and
``compile_context`` (RetrievalService, ContextService), ``list_facts`` (FactQueryService, every page up to a
limit) and ``read_source`` (SourceService)."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC
from datetime import datetime
from typing import Annotated
from typing import Any

from google.protobuf import json_format
from mcp.server.mcpserver import Context
from mcp.server.mcpserver.exceptions import ToolError
from pydantic import Field

from common.grpc.proto_mapping import timestamp
from common.kernel.identifiers import canonical_instant
from common.kernel.identifiers import parse_instant
from memory_service_grpc_client import ServiceError
from memory_service_grpc_client.memory.v1 import context_service_pb2
from memory_service_grpc_client.memory.v1 import fact_query_service_pb2
from memory_service_grpc_client.memory.v1 import knowledge_pb2
from memory_service_grpc_client.memory.v1 import observation_service_pb2
from memory_service_grpc_client.memory.v1 import retrieval_service_pb2
from memory_service_grpc_client.memory.v1 import source_service_pb2
from memory_service_tools.cli.terminal import error_lines
from memory_service_tools.mcp.arguments import FactInput
from memory_service_tools.mcp.arguments import Instant
from memory_service_tools.mcp.arguments import Namespace
from memory_service_tools.mcp.arguments import bad_argument
from memory_service_tools.mcp.arguments import instant_argument
from memory_service_tools.mcp.arguments import participant_argument
from memory_service_tools.mcp.results import as_json
from memory_service_tools.mcp.results import failure_block
from memory_service_tools.mcp.results import refused_items
from memory_service_tools.mcp.tool_calls import ToolCalls

__all__ = ["knowledge_tools"]


def knowledge_tools(calls: ToolCalls) -> list[Callable[..., Any]]:
    """The tools over a namespace's knowledge, in order: ``record_observation``, ``search``,
    ``compile_context``, ``list_facts``, ``read_source``."""

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

    def search(
        ctx: Context,
        namespace: Namespace,
        query: Annotated[
            str, Field(description="words, a question, or an exact identifier such as PROJ-1234")
        ],
        top_k: Annotated[int, Field(ge=1, le=100, description="how many passages to return")] = 10,
        types: Annotated[
            list[str] | None, Field(description="keep only these node types, e.g. ['document', 'episode']")
        ] = None,
    ) -> dict[str, Any]:
        """Find passages (document chunks and recorded observations) that match a query.

        Hybrid search: meaning (multilingual vectors), words (full text) and exact identifiers
        (trigrams), fused. Returns hits, best first, each with node_key (use it with read_source),
        title, heading, text, source_path, score and its vector/text/trigram components.
        """
        request = retrieval_service_pb2.SearchRequest(
            namespace=namespace, query=query, top_k=top_k, types=types or []
        )
        return as_json(calls.call(ctx, "search", request))

    def compile_context(
        ctx: Context,
        namespace: Namespace,
        query: Annotated[str, Field(description="the task or question you need context for")] = "",
        anchors: Annotated[
            list[str] | None,
            Field(
                description="natural keys the task is about, e.g. ['person:alice'] (their facts rank first)"
            ),
        ] = None,
        token_budget: Annotated[
            int, Field(ge=1, le=100000, description="most tokens the pack may use (cl100k tokens)")
        ] = 2000,
        as_of: Instant = None,
        trace_id: Annotated[str | None, Field(description="your id to find this compilation later")] = None,
        dropped_limit: Annotated[
            int,
            Field(
                ge=0,
                le=100,
                description="also list this many of the best candidates left out, with why (0: none)",
            ),
        ] = 0,
        task: Annotated[
            str | None, Field(description="deprecated: the former name of query, accepted for one release")
        ] = None,
    ) -> dict[str, Any]:
        """Prepare context for a task: the passages and facts most worth reading, within a token budget.

        Call this first when starting work on a question. The pack ranks search hits, the turns next to
        them, recent observations, current facts about the anchors, their neighbours and what the hits
        mention; conflicting facts are flagged. Returns pack.text (ready to read, fits token_budget),
        pack.items (kind, text, score, provenance: where each item came from, selection: the rule that
        brought it and its score components, conflict), pack.token_count, pack.trace_id and, with
        dropped_limit, pack.dropped (the best candidates left out and why).
        """
        if task is not None and query and task != query:
            raise bad_argument("task", "query and its deprecated name task differ: pass query only")
        query = query or task or ""
        if not query:
            raise bad_argument("query", "required (the task or question you need context for)")
        when = instant_argument(as_of, "as_of")
        request = context_service_pb2.CompileContextRequest(
            namespace=namespace,
            query=query,
            anchors=anchors or [],
            token_budget=token_budget,
            trace_id=trace_id or "",
            as_of=timestamp(parse_instant(when)) if when else None,
            dropped_limit=dropped_limit,
        )
        return as_json(calls.call(ctx, "compile_context", request))

    def list_facts(
        ctx: Context,
        namespace: Namespace,
        subject: Annotated[
            str | None, Field(description="natural key of the subject, e.g. person:alice")
        ] = None,
        predicate: Annotated[str | None, Field(description="relation, e.g. WORKS_ON")] = None,
        object: Annotated[str | None, Field(description="natural key of the object")] = None,
        as_of: Instant = None,
        include_history: Annotated[
            bool, Field(description="also facts that were closed or superseded (with their validity)")
        ] = False,
        limit: Annotated[int, Field(ge=1, le=1000, description="most facts to return")] = 100,
    ) -> dict[str, Any]:
        """List temporal facts by subject, predicate and/or object: what was true at an instant.

        Without as_of: the facts valid now. Each fact has fact_id, subject, predicate, object,
        valid_from, valid_to (absent while it holds), evidence and confidence, the observation_ids
        backing it, supersedes / superseded_by, and conflict (another fact contradicts it).
        Returns {"facts": [...], "truncated": true when more than limit facts matched}.
        """
        when = instant_argument(as_of, "as_of")
        request = fact_query_service_pb2.ListFactsRequest(
            namespace=namespace,
            subject=subject or "",
            predicate=predicate or "",
            object=object or "",
            include_history=include_history,
            page_size=min(limit + 1, 1000),
            as_of=timestamp(parse_instant(when)) if when else None,
        )
        client = calls.client_for(ctx)
        try:
            found = list(client.iter_facts(request, limit=limit + 1))
        except ServiceError as exc:
            raise ToolError("\n".join(error_lines(exc))) from exc
        return {"facts": [as_json(fact) for fact in found[:limit]], "truncated": len(found) > limit}

    def read_source(
        ctx: Context,
        namespace: Namespace,
        natural_key: Annotated[
            str, Field(description="key of the document or node, e.g. doc:ledger (from search)")
        ],
    ) -> dict[str, Any]:
        """Read a whole source: the original text of a document (or its chunks re-assembled) and where
        it came from. Returns source.natural_key, title, type, content, content_source ("original" or
        "chunks") and provenance (source_path, metadata)."""
        request = source_service_pb2.GetSourceRequest(namespace=namespace, natural_key=natural_key)
        return as_json(calls.call(ctx, "get_source", request))

    return [record_observation, search, compile_context, list_facts, read_source]

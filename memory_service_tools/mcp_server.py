"""The MCP server: the memory as tools for agents (official ``mcp`` SDK), over stdio or streamable HTTP.

It is a gRPC client of the two services (`memory_service_grpc_client.MemoryClient`), never a second
path to the database, so every access rule of the services holds for an agent too:

* over **stdio** (a local agent starts ``cb mcp``) every call carries the process's token (``--token``
  or ``CB_TOKEN``);
* over **streamable HTTP** (one server shared by many agents, ``cb mcp --transport http``) every call
  carries the token of the HTTP request that asked for it (``Authorization: Bearer <token>``), and
  nothing else: a request without one reaches the services without a token and is refused there
  (UNAUTHENTICATED) when they check tokens. The server's own ``CB_TOKEN`` is never used in this mode.

Tools (`TOOL_NAMES`, the names of the registered tools): ``record_observation``, ``search``,
``compile_context``, ``list_facts``, ``read_source``, and for memory records ``add_memories`` and
``recall_memories`` (their scope is the token's user; ``project`` becomes the ``x-project-id``
metadata). Each returns the proto3 JSON of the service's response (field names as in the protos,
snake_case).

One rule for ``isError`` (docs/reference/mcp-tools.md): a tool call whose request was refused, wholly or
in part, is a tool error (``isError: true``); every other call is not.

* A refused call (the service answered an error status, or an argument failed the tool's own checks) has
  text only: the gRPC code, the message and one line per field violation (``error: INVALID_ARGUMENT:
  ...`` / ``  - field: problem``).
* A batch the service answered item by item (``record_observation``, ``add_memories``) with at least one
  item failed is a tool error too (`refused_items`): its text starts with one such error block per
  failed item, followed by the JSON of the whole response, which is also the structured content, so the
  agent sees which items were stored and which were not.

A call with an argument the tool's input schema does not name (``additionalProperties: false``, also in
nested objects) is a tool error naming it, before any service is called. ``initialize`` answers
``serverInfo.version`` with the installed version of the memory-service distribution.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from importlib import metadata
from typing import Annotated, Any, Literal

from google.protobuf import json_format
from google.protobuf.message import Message
from mcp.server import MCPServer
from mcp.server.mcpserver import Context
from mcp.server.mcpserver.exceptions import ToolError
from mcp.server.mcpserver.tools import Tool
from mcp_types import CallToolResult, TextContent
from memory_service_grpc_client import MemoryClient, ServiceError
from memory_service_grpc_client.memory.v1 import (
    context_service_pb2,
    fact_query_service_pb2,
    knowledge_pb2,
    memory_query_service_pb2,
    memory_record_pb2,
    memory_service_pb2,
    observation_service_pb2,
    retrieval_service_pb2,
    source_service_pb2,
)
from pydantic import BaseModel, ConfigDict, Field

from common.grpc.proto_mapping import timestamp
from common.kernel.identifiers import canonical_instant, parse_instant
from memory_service_tools.cli.terminal import error_lines

__all__ = [
    "DISTRIBUTION",
    "TOOL_NAMES",
    "build_mcp_server",
    "memory_tools",
    "refused_items",
    "server_version",
]

DISTRIBUTION = "memory-service"  # whose version ``initialize`` reports (pyproject.toml [project].name)

INSTRUCTIONS = """\
Long-term memory of this team: observations (immutable records of what happened), temporal facts
(subject -[PREDICATE]-> object, valid from/to, each backed by evidence), and documents (searchable
chunks with their original text). Everything lives in a namespace: pass the namespace the user works
in to every tool. Keys of things are natural keys "type:id" (person:alice, service:billing,
doc:runbooks/deploy). To prepare for a task, call compile_context first (it ranks chunks and facts and
fits them into a token budget); use search for passages, list_facts for what is true at an instant,
read_source for a whole document, record_observation to remember something new.
Personal memories of the user you act for (preferences, incidents, decisions) need no namespace: call
recall_memories at the start of a turn and add_memories for what is worth remembering about the user."""

Namespace = Annotated[str, Field(description="namespace to use, e.g. 'example' (the user's project or team)")]
Instant = Annotated[
    str | None,
    Field(description="ISO 8601 instant such as 2026-09-01T00:00:00Z; without an offset it is UTC"),
]


class FactInput(BaseModel):
    """A fact the observation asserts: subject -[predicate]-> object."""

    model_config = ConfigDict(extra="forbid")

    subject: str = Field(description="natural key of the subject, e.g. person:alice")
    predicate: str = Field(description="relation in UPPER_SNAKE, e.g. WORKS_ON")
    object: str = Field(description="natural key of the object, e.g. project:billing")
    valid_from: str | None = Field(None, description="ISO 8601 instant the fact starts; default occurred_at")
    valid_to: str | None = Field(None, description="ISO 8601 instant the fact ends; default open")
    supersedes: str | None = Field(None, description="fact_id this fact replaces (that one is closed)")


def _bad_argument(field: str, problem: str) -> ToolError:
    """An argument the tool's own checks refuse, in the documented ``error: CODE: message`` form."""
    return ToolError(_failure_block(f"error: INVALID_ARGUMENT: {field}: {problem}", [f"{field}: {problem}"]))


def _instant(text: str | None, field: str) -> str | None:
    if text is None or not text.strip():
        return None
    try:
        return canonical_instant(parse_instant(text, assume_utc=True))
    except (ValueError, OverflowError) as exc:  # OverflowError: an offset past year 1 or 9999 in UTC
        raise _bad_argument(
            field, f"{text!r} is not an ISO 8601 instant in years 1..9999 UTC (e.g. 2026-09-01T00:00:00Z)"
        ) from exc


def _participant(key: str | None, field: str) -> dict[str, str] | None:
    if key is None or not key.strip():
        return None
    type_, sep, id_ = key.partition(":")
    if not sep or not type_ or not id_:
        raise _bad_argument(field, f"{key!r} is not a natural key type:id (e.g. person:alice)")
    return {"type": type_, "id": id_}


def _as_json(message: Message) -> dict[str, Any]:
    # Every field, defaults included (created: false says "duplicate"; an absent key would say nothing).
    result: dict[str, Any] = json_format.MessageToDict(
        message, preserving_proto_field_name=True, always_print_fields_with_no_presence=True
    )
    return result


Project = Annotated[str, Field(description="project of the user's memories, if the application has several")]


class MemoryItem(BaseModel):
    """One memory for add_memories."""

    model_config = ConfigDict(extra="forbid")

    text: str = Field(description="the memory, one or two self-contained sentences")
    key: str = Field(
        "", description="idempotency key, e.g. the message or ticket id (a retry stores nothing)"
    )
    tags: list[str] = Field(default_factory=list, description="labels such as 'preference' or 'incident'")
    importance: float | None = Field(None, ge=0, le=1, description="0..1; default 0.5")
    ttl_seconds: int | None = Field(None, ge=1, description="forget after this many seconds")
    source: str = Field("", description="where it came from, e.g. 'chat'; default 'mcp'")


def server_version() -> str:
    """The installed version of the `DISTRIBUTION` (``serverInfo.version`` of ``initialize``)."""
    return metadata.version(DISTRIBUTION)


def refused_items(response: dict[str, Any], failures: Sequence[str]) -> CallToolResult:
    """The result of a batch with failed items: a tool error (``isError: true``) whose text is the error
    block of every failed item (``failures``) followed by the JSON of the whole ``response``, which is
    also its structured content."""
    text = "\n".join([*failures, json.dumps(response, ensure_ascii=False, indent=2)])
    return CallToolResult(
        content=[TextContent(type="text", text=text)], structured_content=response, is_error=True
    )


def _failure_block(head: str, violations: Sequence[str]) -> str:
    return "\n".join([head, *(f"  - {violation}" for violation in violations)])


class _Tools:
    """The tool functions, bound to one client and to where each call's token comes from."""

    def __init__(self, client: MemoryClient | None, *, token_from_request: bool) -> None:
        self._client = client
        self._token_from_request = token_from_request

    def client_for(self, ctx: Context) -> MemoryClient:
        """The client a tool call uses: over HTTP a view carrying the request's bearer token (or none)."""
        if self._client is None:
            raise ToolError("error: the server has no client")
        if not self._token_from_request:
            return self._client
        headers = ctx.headers or {}
        authorization = next((value for key, value in headers.items() if key.lower() == "authorization"), "")
        scheme, _, token = authorization.strip().partition(" ")
        return self._client.with_token(token.strip() if scheme.lower() == "bearer" else "")

    def call(self, ctx: Context, method_name: str, request: Message, **options: Any) -> Any:
        client = self.client_for(ctx)
        try:
            return getattr(client, method_name)(request, **options)
        except ServiceError as exc:
            raise ToolError("\n".join(error_lines(exc))) from exc


def build_mcp_server(client: MemoryClient, *, token_from_request: bool) -> MCPServer:
    """The MCP server with the memory tools, calling the services through ``client``.

    Args:
        client: the services' client; over stdio it carries the process's token.
        token_from_request: True for streamable HTTP: each call carries the ``Authorization`` bearer
            token of its HTTP request instead (none when the request has none).

    Returns:
        An `MCPServer`; run it with ``run("stdio")`` or serve ``streamable_http_app()``.
    """
    return MCPServer(
        "memory-service",
        version=server_version(),
        instructions=INSTRUCTIONS,
        tools=memory_tools(client, token_from_request=token_from_request),
    )


def memory_tools(client: MemoryClient | None, *, token_from_request: bool) -> list[Tool]:
    """The tools, in order, bound to ``client`` (None: only to read their names and schemas)."""
    tools = _Tools(client, token_from_request=token_from_request)
    functions: list[Callable[..., Any]] = []

    def tool(function: Callable[..., Any]) -> Callable[..., Any]:
        functions.append(function)
        return function

    @tool
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
        when = _instant(occurred_at, "occurred_at") or canonical_instant(datetime.now(UTC))
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
            participant = _participant(key, field)
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
                value = _instant(getattr(fact, name), f"facts[{number}].{name}")
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
        response = tools.call(ctx, "record_observations", request)
        result = response.results[0]
        if result.status == "failed" or result.field_violations:
            # Partly refused (partially_processed: an assertion failed) is a tool error too (the isError
            # rule). The SDK passes a CallToolResult through as it is (the declared dict stays the
            # output schema).
            return refused_items(  # type: ignore[return-value]
                _as_json(result),
                [_failure_block(f"error: INVALID_ARGUMENT: {result.error}", list(result.field_violations))],
            )
        return _as_json(result)

    @tool
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
        return _as_json(tools.call(ctx, "search", request))

    @tool
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
            raise _bad_argument("task", "query and its deprecated name task differ: pass query only")
        query = query or task or ""
        if not query:
            raise _bad_argument("query", "required (the task or question you need context for)")
        when = _instant(as_of, "as_of")
        request = context_service_pb2.CompileContextRequest(
            namespace=namespace,
            query=query,
            anchors=anchors or [],
            token_budget=token_budget,
            trace_id=trace_id or "",
            as_of=timestamp(parse_instant(when)) if when else None,
            dropped_limit=dropped_limit,
        )
        return _as_json(tools.call(ctx, "compile_context", request))

    @tool
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
        when = _instant(as_of, "as_of")
        request = fact_query_service_pb2.ListFactsRequest(
            namespace=namespace,
            subject=subject or "",
            predicate=predicate or "",
            object=object or "",
            include_history=include_history,
            page_size=min(limit + 1, 1000),
            as_of=timestamp(parse_instant(when)) if when else None,
        )
        client = tools.client_for(ctx)
        try:
            found = list(client.iter_facts(request, limit=limit + 1))
        except ServiceError as exc:
            raise ToolError("\n".join(error_lines(exc))) from exc
        return {"facts": [_as_json(fact) for fact in found[:limit]], "truncated": len(found) > limit}

    @tool
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
        return _as_json(tools.call(ctx, "get_source", request))

    @tool
    def add_memories(
        ctx: Context,
        memories: Annotated[
            list[MemoryItem], Field(min_length=1, max_length=100, description="the memories to store")
        ],
        project: Project = "",
    ) -> dict[str, Any]:
        """Remember short facts about the user you act for: preferences, incidents, decisions.

        Each memory is one self-contained sentence or two ("User prefers concise replies and dark mode").
        Give an idempotency key (e.g. the ticket or message id) so a retry never stores it twice, an
        importance in [0, 1] for what matters most, and a ttl_seconds for what is only true for a while.
        Returns one result per memory: memory_id, created (false for a retry) and any field violations.
        """
        request = memory_service_pb2.AddMemoriesRequest()
        for item in memories:
            message = request.memories.add(
                text=item.text, idempotency_key=item.key, source=item.source or "mcp", tags=item.tags
            )
            if item.importance is not None:
                message.importance = item.importance
            if item.ttl_seconds is not None:
                message.ttl.seconds = item.ttl_seconds
        response = tools.call(ctx, "add_memories", request, project_id=project)
        failures = [
            _failure_block(
                f"error: {result.error_code or 'FAILED'}: memories[{index}] was not stored",
                list(result.field_violations),
            )
            for index, result in enumerate(response.results)
            if result.status == "failed"
        ]
        if failures:
            # The SDK passes a CallToolResult through as it is (the declared dict stays the output schema).
            return refused_items(_as_json(response), failures)  # type: ignore[return-value]
        return _as_json(response)

    @tool
    def recall_memories(
        ctx: Context,
        query: Annotated[
            str, Field(description="the user's message or what you need to know about the user")
        ],
        top_k: Annotated[int, Field(ge=1, le=50, description="how many memories to return")] = 5,
        include_older: Annotated[
            bool, Field(description="also search memories not used for weeks (warm and cold tiers)")
        ] = False,
        project: Project = "",
    ) -> dict[str, Any]:
        """Recall what you remember about the user you act for, most relevant first.

        Call it at the start of a turn with the user's message. Ranked by similarity to the query,
        recency and importance; expired memories never come back. Returns memories with text, tags,
        importance, memory_id and the score components; a summary's originals are under "expanded".
        """
        tiers = [memory_record_pb2.MEMORY_TIER_HOT]
        if include_older:
            tiers += [memory_record_pb2.MEMORY_TIER_WARM, memory_record_pb2.MEMORY_TIER_COLD]
        request = memory_query_service_pb2.RecallMemoriesRequest(
            query=query,
            top_k=top_k,
            filter=memory_record_pb2.MemoryFilter(tiers=tiers),
            expand_summaries=True,
        )
        return _as_json(tools.call(ctx, "recall_memories", request, project_id=project))

    return [_closed(Tool.from_function(function)) for function in functions]


"""The registered tools' names (``cb mcp --help`` lists them)."""


def _closed(tool: Tool) -> Tool:
    """``tool`` refusing arguments it does not have: its input schema says ``additionalProperties:
    false`` and the SDK's argument model (pydantic, which the SDK validates every call with) forbids
    extra inputs, so a call with an unknown or misspelt argument is a tool error naming it (``Extra
    inputs are not permitted``) instead of running without it. The nested models (`FactInput`,
    `MemoryItem`) forbid them the same way."""
    loose = tool.fn_metadata.arg_model
    closed = type(
        loose.__name__,
        (loose,),
        {
            "model_config": ConfigDict(**{**loose.model_config, "extra": "forbid"}),
            "__module__": loose.__module__,
        },
    )
    tool.fn_metadata.arg_model = closed
    tool.parameters = closed.model_json_schema(by_alias=True)
    return tool


TOOL_NAMES = tuple(tool.name for tool in memory_tools(None, token_from_request=False))
"""The registered tools' names, in order (``cb mcp --help`` lists them)."""

Transport = Literal["stdio", "http"]


def run_mcp_server(
    client: MemoryClient, *, transport: Transport, host: str = "127.0.0.1", port: int = 8765
) -> None:
    """Runs the MCP server until it is stopped: over stdio (the process's token) or over streamable HTTP
    on ``http://host:port/mcp`` (each request's bearer token)."""
    server = build_mcp_server(client, token_from_request=transport == "http")
    if transport == "stdio":
        server.run("stdio")
    else:
        server.run("streamable-http", host=host, port=port)

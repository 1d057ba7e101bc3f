"""The MCP tools refuse arguments their input schema does not name (also inside nested objects), with a
tool error naming the argument, before any service is called (the client points at a closed port)."""

from __future__ import annotations

from typing import Any

import anyio
import pytest
from mcp.server.mcpserver.exceptions import ToolError

from memory_service_grpc_client import MemoryClient
from memory_service_tools.mcp import TOOL_NAMES
from memory_service_tools.mcp import build_mcp_server


def _server() -> Any:
    return build_mcp_server(MemoryClient("127.0.0.1:1", "127.0.0.1:1"), token_from_request=False)


def test_every_input_schema_is_closed() -> None:
    tools = anyio.run(_server().list_tools)
    assert sorted(tool.name for tool in tools) == sorted(TOOL_NAMES)
    for tool in tools:
        schema = tool.input_schema
        assert schema["additionalProperties"] is False, tool.name
        assert "ctx" not in schema["properties"], tool.name
        for name, nested in schema.get("$defs", {}).items():
            assert nested["additionalProperties"] is False, (tool.name, name)


@pytest.mark.parametrize(
    ("tool", "arguments", "named"),
    [
        ("search", {"namespace": "x", "query": "q", "colour": "red"}, "colour"),
        ("read_source", {"namespace": "x", "natural_key": "doc:a", "naturalKey": "doc:a"}, "naturalKey"),
        (
            "record_observation",
            {
                "namespace": "x",
                "content": "c",
                "facts": [{"subject": "a:b", "predicate": "P", "object": "c:d", "since": "x"}],
            },
            "facts.0.since",
        ),
        ("add_memories", {"memories": [{"text": "t", "ttl": 5}]}, "memories.0.ttl"),
    ],
)
def test_an_unknown_argument_is_an_error_naming_it(tool: str, arguments: dict[str, Any], named: str) -> None:
    server = _server()
    with pytest.raises(ToolError) as refused:
        anyio.run(server.call_tool, tool, arguments)
    text = str(refused.value)
    assert f"\n{named}\n  Extra inputs are not permitted" in text, text


def test_compile_context_takes_query_as_the_proto_names_it_and_task_as_a_deprecated_alias() -> None:
    tools = {tool.name: tool for tool in anyio.run(_server().list_tools)}
    properties = tools["compile_context"].input_schema["properties"]
    assert "query" in properties and "deprecated" in properties["task"]["description"]
    server = _server()
    for arguments, said in (
        ({"namespace": "x"}, "query: required"),
        ({"namespace": "x", "query": "a", "task": "b"}, "query and its deprecated name task differ"),
    ):
        with pytest.raises(ToolError) as refused:
            anyio.run(server.call_tool, "compile_context", arguments)
        assert said in str(refused.value)

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

The package: `server` (the server, `TOOL_NAMES`, `run_mcp_server`), `tools` (the tool functions by
feature), `arguments` (input types and the tools' own checks), `results` (answers and refusals) and
`tool_calls` (the client of each call).
"""

from memory_service_tools.mcp.results import refused_items
from memory_service_tools.mcp.server import DISTRIBUTION
from memory_service_tools.mcp.server import TOOL_NAMES
from memory_service_tools.mcp.server import build_mcp_server
from memory_service_tools.mcp.server import memory_tools
from memory_service_tools.mcp.server import run_mcp_server
from memory_service_tools.mcp.server import server_version

__all__ = [
    "DISTRIBUTION",
    "TOOL_NAMES",
    "build_mcp_server",
    "memory_tools",
    "refused_items",
    "run_mcp_server",
    "server_version",
]

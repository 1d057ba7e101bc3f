"""The MCP tools grouped by feature: each module's function returns its tool functions, bound to a
`memory_service_tools.mcp.tool_calls.ToolCalls`; `memory_service_tools.mcp.server.memory_tools` puts them in order."""

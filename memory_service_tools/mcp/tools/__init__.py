"""The MCP tools grouped by feature: `knowledge` (a namespace's observations, facts and documents) and
`memories` (the memories of the user the agent acts for). Each module's function returns its tool
functions, bound to a `memory_service_tools.mcp.tool_calls.ToolCalls`; `memory_service_tools.mcp.server.memory_tools`
puts them in order."""

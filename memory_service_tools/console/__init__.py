"""The web console: server-rendered pages over both services' read RPCs, called with the visitor's token.

A client like any other (`memory_service_grpc_client.MemoryClient`): it never opens the database, so namespaces,
scopes and personal-data masking hold exactly as for the CLI. See docs/how-to/console.md.
"""

from memory_service_tools.console.app import create_app
from memory_service_tools.console.page_view import ConsoleConfig

__all__ = ["ConsoleConfig", "create_app"]

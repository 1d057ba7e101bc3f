"""The ``cb`` command line (docs/explanation/architecture.md): `app` is the console script and ``python -m
memory_service_tools.cli``.

Commands, one module per group:

* `database_commands`: ``cb db up|down|status`` (the embedded development database,
  `memory_service_tools.embedded_db`) and ``cb init-db`` (create or upgrade the schema explicitly).
* `service_commands`: ``cb serve ingest|query`` (one service in the foreground) and ``cb up`` (database,
  both services as child processes, wait for SERVING, stop all on Ctrl-C/SIGTERM: `supervisor`).
* `write_commands`: ``cb observe --file F.jsonl`` (RecordObservations, `memory_service_tools.observation_loader`),
  ``cb reconcile --file S.jsonl`` (SnapshotService.ReconcileStream with a progress bar), ``cb retain DIR``
  (every Markdown file of a vault with DocumentService.Retain), ``cb delete KEY``.
* `read_commands`: ``cb search``, ``cb facts``, ``cb source``, ``cb trace``; `context_commands`:
  ``cb context``, ``cb typed-context``. ``--json`` prints the proto3 JSON of the response
  (`rpc_output.call_and_print`, the one way a command calls an RPC and prints it).
* `pack_commands`: ``cb pack register|enable``; `token_commands`: ``cb token create|list`` (bearer tokens
  of the tokens file: hashes only, the token is printed once).
* `health_commands`: ``cb health`` (both services and the database; exit code by state);
  `mcp_commands`: ``cb mcp`` (the MCP server for agents, `memory_service_tools.mcp`).

Global options (`app`) ``--ingest-addr`` / ``--query-addr`` default to ``CB_INGEST_ADDR`` /
``CB_QUERY_ADDR``; ``--token`` (default ``CB_TOKEN``) is sent as ``authorization: Bearer <token>`` on
every call, and TLS files come from ``CB_TLS_CA_FILE`` / ``CB_TLS_CLIENT_CERT_FILE`` /
``CB_TLS_CLIENT_KEY_FILE`` (every command calls the services through `cli_state.CliState.client`, a
`memory_service_grpc_client.MemoryClient` whose channels come from `memory_service_grpc_client.make_channel`).
``cb --version`` prints the version. Server errors print as ``error: CODE: message`` plus one line per
field violation, exit code 1 (`terminal`). Heavy modules (database, services, embedded database) are
imported inside the commands that use them.
"""

import os

# Before anything imports numpy: OpenBLAS's idle worker threads spin for 2^28 cycles (about 0.1 s) after
# each BLAS call before they sleep. A service embeds in short calls beside its writes, so on 2 cores that
# spin took 10.7 of the ingest process's 26.9 CPU-seconds during a debian load (bench/RESULTS.md (git history)
# "OpenBLAS"); at 2^4 cycles the workers sleep at once (also faster for the model alone: 116.6 against 104.0
# vault chunks/s at 2 threads). Set in the environment to override.
os.environ.setdefault("OPENBLAS_THREAD_TIMEOUT", "4")

from memory_service_tools.cli.app import app

__all__ = ["app"]

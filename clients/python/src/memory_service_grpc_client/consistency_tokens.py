"""Read-after-write for clients: carry the consistency token of the last write to the next read.

Every write RPC of ingest_service answers with a token (field ``consistency_token`` and trailing metadata
``x-consistency-token``); a read of query_service that sends it (metadata ``x-consistency-token``) is
answered only from a database that has that write (docs/how-to/read-replicas.md). `ConsistencyTokens` does both
halves as a gRPC client interceptor: put the same object on the ingest and the query channel,

    tokens = ConsistencyTokens()
    ingest = grpc.intercept_channel(make_channel(ingest_addr), tokens)
    query = grpc.intercept_channel(make_channel(query_addr), tokens)

and every read after a write sees that write (``ConsistencyTokens(attach=False)`` only records). The
newest token wins (tokens of one database compare like their WAL positions). With ``path`` the token also
survives the process: the CLI keeps it in `default_token_file` so ``cb search --consistent`` after
``cb observe`` reads its own write.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc

from memory_service_grpc_client.channels import CallDetails

__all__ = ["CONSISTENCY_TOKEN_METADATA", "TOKEN_FILE_ENV", "ConsistencyTokens", "default_token_file"]

# The metadata key of the contract (docs/how-to/read-replicas.md); the services name it the same.
CONSISTENCY_TOKEN_METADATA = "x-consistency-token"

TOKEN_FILE_ENV = "CB_CONSISTENCY_TOKEN_FILE"


def default_token_file() -> Path:
    """``$CB_CONSISTENCY_TOKEN_FILE``, else ``${XDG_STATE_HOME:-~/.local/state}/memory-service/consistency-token``."""
    explicit = os.environ.get(TOKEN_FILE_ENV, "")
    if explicit:
        return Path(explicit)
    state = os.environ.get("XDG_STATE_HOME", "")
    base = Path(state) if state and os.path.isabs(state) else Path.home() / ".local" / "state"
    return base / "memory-service" / "consistency-token"


class ConsistencyTokens(grpc.UnaryUnaryClientInterceptor, grpc.StreamUnaryClientInterceptor):  # type: ignore[misc]
    """Records the token of every write answered through it and sends the newest one with each call.

    Args:
        attach: send the newest token (metadata ``x-consistency-token``) with every call; False only
            records (reads are then as fresh as the replica they land on).
        path: a file that keeps the newest token across processes (read at start, written on change).
    """

    def __init__(self, *, attach: bool = True, path: Path | None = None) -> None:
        self.attach = attach
        self.path = path
        self._lock = threading.Lock()
        self._token = ""
        if path is not None:
            try:
                self._token = path.read_text(encoding="ascii").strip()
            except (OSError, UnicodeDecodeError):
                self._token = ""

    @property
    def token(self) -> str:
        """The newest token seen (empty before any write)."""
        with self._lock:
            return self._token

    def record(self, token: str) -> None:
        """Keeps ``token`` when it is newer than the one held (and writes it to ``path``)."""
        if not token:
            return
        with self._lock:
            if len(token) == len(self._token) and token <= self._token:
                return
            self._token = token
            if self.path is not None:
                self.path.parent.mkdir(parents=True, exist_ok=True)
                self.path.write_text(token + "\n", encoding="ascii")

    def _details(self, details: grpc.ClientCallDetails) -> grpc.ClientCallDetails:
        token = self.token
        if not self.attach or not token:
            return details
        metadata = tuple(
            (key, value) for key, value in (details.metadata or ()) if key != CONSISTENCY_TOKEN_METADATA
        )
        return CallDetails(details, (*metadata, (CONSISTENCY_TOKEN_METADATA, token)))

    def _after(self, outcome: Any) -> Any:
        # A callback, so that a future call (``.future()``) is not waited for here.
        outcome.add_done_callback(self._record_from)
        return outcome

    def _record_from(self, call: Any) -> None:
        try:
            trailing = call.trailing_metadata() or ()
        except Exception:  # noqa: BLE001 - a failed or cancelled call has no token to record
            return
        for key, value in trailing:
            if key == CONSISTENCY_TOKEN_METADATA:
                self.record(str(value))

    def intercept_unary_unary(
        self,
        continuation: Callable[[grpc.ClientCallDetails, Any], Any],
        details: grpc.ClientCallDetails,
        request: Any,
    ) -> Any:
        """Sends the newest token with the call and records the token of its answer."""
        return self._after(continuation(self._details(details), request))

    def intercept_stream_unary(
        self,
        continuation: Callable[[grpc.ClientCallDetails, Iterator[Any]], Any],
        details: grpc.ClientCallDetails,
        request_iterator: Iterator[Any],
    ) -> Any:
        """As `intercept_unary_unary`, for client-streaming calls (ReconcileStream)."""
        return self._after(continuation(self._details(details), request_iterator))

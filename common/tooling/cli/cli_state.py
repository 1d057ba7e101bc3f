"""What the global options (``--ingest-addr``, ``--query-addr``, ``--token``) set up for every command.

`CliState` is stored on the root typer context by the app's callback (`common.tooling.cli.app`); a
command reaches it with `cli_state`. Every command calls the services through `CliState.client`, a
`common.tooling.memory_client.MemoryClient` with the addresses, the token and the TLS files of the
settings and the `common.tooling.consistency_tokens.ConsistencyTokens` of the run (``--consistent``)
on its channels; `CliState.channel` opens a channel the same way.
"""

from __future__ import annotations

import dataclasses

import grpc
import typer

from common.kernel.config import Settings
from common.tooling.cli.terminal import fail
from common.tooling.client import ClientSecurity, make_channel
from common.tooling.consistency_tokens import ConsistencyTokens, default_token_file
from common.tooling.memory_client import MemoryClient


@dataclasses.dataclass
class CliState:
    """The global options of one ``cb`` run and the settings they override (read once, on first use)."""

    ingest_addr: str | None = None
    query_addr: str | None = None
    token: str | None = None
    consistent: bool = False
    _settings: Settings | None = None
    _tokens: ConsistencyTokens | None = None

    def settings(self) -> Settings:
        """Settings from the environment, with the addresses given on the command line applied.

        Exits 1 (``error: invalid settings: ...``) when the environment holds invalid settings.
        """
        if self._settings is None:
            try:
                settings = Settings()
            except ValueError as exc:  # pydantic.ValidationError
                fail([f"error: invalid settings: {exc}"])
            update = {}
            if self.ingest_addr:
                update["ingest_addr"] = self.ingest_addr
            if self.query_addr:
                update["query_addr"] = self.query_addr
            self._settings = settings.model_copy(update=update) if update else settings
        return self._settings

    def ingest(self) -> str:
        """``host:port`` of ingest_service: ``--ingest-addr``, else ``CB_INGEST_ADDR`` or its default."""
        return self.ingest_addr or self.settings().ingest_addr

    def query(self) -> str:
        """``host:port`` of query_service: ``--query-addr``, else ``CB_QUERY_ADDR`` or its default."""
        return self.query_addr or self.settings().query_addr

    def security(self) -> ClientSecurity:
        """Token (``--token`` or ``CB_TOKEN``) and TLS files every channel of the CLI uses."""
        return ClientSecurity.from_settings(self.settings(), token=self.token)

    def channel(self, address: str) -> grpc.Channel:
        """A channel to ``address`` with the CLI's token and TLS settings (exits 1 on bad TLS files)."""
        try:
            channel = make_channel(address, security=self.security())
        except ValueError as exc:
            fail([f"error: {exc}"])
        return grpc.intercept_channel(channel, self.consistency_tokens())

    def consistency_tokens(self) -> ConsistencyTokens:
        """Every write's token is kept (`default_token_file`); with ``--consistent`` reads send it."""
        if self._tokens is None:
            self._tokens = ConsistencyTokens(attach=self.consistent, path=default_token_file())
        return self._tokens

    def client(self) -> MemoryClient:
        """A `MemoryClient` of both services with the CLI's addresses, token and TLS settings.

        Reads are sent once (an unreachable service is reported at once); idempotent writes are retried
        on UNAVAILABLE (`common.tooling.call_policy`). Exits 1 on bad TLS files.
        """
        security = self.security()
        try:
            security.channel_credentials()
        except ValueError as exc:
            fail([f"error: {exc}"])
        return MemoryClient(
            self.ingest(),
            self.query(),
            security=security,
            retry_reads=False,
            interceptors=(self.consistency_tokens(),),
        )


def cli_state(ctx: typer.Context) -> CliState:
    """The `CliState` of this run (an empty one when a command runs without the app's callback)."""
    state = ctx.find_root().obj
    if not isinstance(state, CliState):
        state = CliState()
        ctx.find_root().obj = state
    return state

"""What the global options (``--ingest-addr``, ``--query-addr``, ``--token``) set up for every command.

`CliState` is stored on the root typer context by the app's callback (`memory_service_tools.cli.app`); a
command reaches it with `cli_state`. Every command calls the services through `CliState.client`, a
`memory_service_grpc_client.MemoryClient` (the client package, clients/python) with the addresses, the
token and the TLS files of the settings, the `memory_service_grpc_client.ConsistencyTokens` of the run
(``--consistent``) on its channels and, with tracing on, OpenTelemetry's client layer (`traced`); `CliState.channel` opens a
channel the same way.
"""

from __future__ import annotations

import dataclasses

import grpc
import typer

from common.grpc.telemetry import configured_tracer_provider
from common.grpc.telemetry import traced_channel
from common.kernel.config import Settings
from memory_service_grpc_client import ClientSecurity
from memory_service_grpc_client import ConsistencyTokens
from memory_service_grpc_client import MemoryClient
from memory_service_grpc_client import make_channel
from memory_service_grpc_client.consistency_tokens import default_token_file
from memory_service_tools.cli.terminal import fail


def client_security(settings: Settings, *, token: str | None = None) -> ClientSecurity:
    """The client's token and TLS files from settings (``CB_TOKEN``, ``CB_TLS_CA_FILE``,
    ``CB_TLS_CLIENT_CERT_FILE``/``KEY_FILE``, ``CB_TLS_SERVER_NAME``); ``token`` (``cb --token``) wins."""
    return ClientSecurity(
        token=(token if token else settings.token.get_secret_value()).strip(),
        ca_file=settings.tls_ca_file,
        cert_file=settings.tls_client_cert_file,
        key_file=settings.tls_client_key_file,
        server_name=settings.tls_server_name,
    )


def traced(channel: grpc.Channel) -> grpc.Channel:
    """``channel`` with OpenTelemetry's client layer when tracing is on in this process (each call sends its
    W3C ``traceparent``, `common.grpc.telemetry`), else ``channel`` itself."""
    return traced_channel(channel, configured_tracer_provider())


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
        return client_security(self.settings(), token=self.token)

    def channel(self, address: str) -> grpc.Channel:
        """A channel to ``address`` with the CLI's token and TLS settings (exits 1 on bad TLS files)."""
        try:
            channel = make_channel(address, security=self.security(), wrap=traced)
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
        on UNAVAILABLE (`memory_service_grpc_client.call_policy`). Exits 1 on bad TLS files.
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
            wrap_channel=traced,
        )


def cli_state(ctx: typer.Context) -> CliState:
    """The `CliState` of this run (an empty one when a command runs without the app's callback)."""
    state = ctx.find_root().obj
    if not isinstance(state, CliState):
        state = CliState()
        ctx.find_root().obj = state
    return state

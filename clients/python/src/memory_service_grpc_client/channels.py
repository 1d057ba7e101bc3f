"""Channels to the services: TLS / mTLS, the bearer token, message limits, health checks.

`make_channel` is the one place where calls get their security: TLS / mTLS channel credentials and
the ``authorization: Bearer <token>`` metadata, both from a `ClientSecurity` (``ClientSecurity.from_env``
reads ``CB_TOKEN``, ``CB_TLS_CA_FILE``, ``CB_TLS_CLIENT_CERT_FILE``, ``CB_TLS_CLIENT_KEY_FILE``,
``CB_TLS_SERVER_NAME``, the names the services and the ``cb`` CLI use). ``wrap`` lets a caller put its own
channel layer on top (the CLI puts OpenTelemetry's, so each call sends its W3C ``traceparent``).
`health_status` and `wait_for_serving` speak grpc.health.v1.
"""

from __future__ import annotations

import ipaddress
import logging
import os
import time
from collections.abc import Callable
from collections.abc import Iterator
from dataclasses import dataclass
from dataclasses import field
from typing import Any

import grpc
from google.protobuf import descriptor_pb2
from google.protobuf import descriptor_pool
from google.protobuf import message_factory

__all__ = [
    "CHANNEL_OPTIONS",
    "CallDetails",
    "ChannelWrapper",
    "ClientSecurity",
    "ServiceChannels",
    "health_status",
    "make_channel",
    "wait_for_serving",
]

ChannelWrapper = Callable[[grpc.Channel], grpc.Channel]

MAX_MESSAGE_BYTES = 64 * 1024 * 1024
CHANNEL_OPTIONS: tuple[tuple[str, int], ...] = (
    ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
    ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
)


log = logging.getLogger("memory.client")


@dataclass(frozen=True)
class ClientSecurity:
    """How a client reaches the services: bearer token and TLS / mTLS files (all optional).

    TLS is on when ``ca_file`` or ``cert_file`` is set (without ``ca_file`` the system's roots are
    trusted); ``cert_file`` + ``key_file`` present a client certificate (mTLS). ``server_name``
    overrides the name checked in the server certificate (e.g. connecting by IP to a cert for a name).
    """

    token: str = field(default="", repr=False)
    ca_file: str = ""
    cert_file: str = ""
    key_file: str = ""
    server_name: str = ""

    @classmethod
    def from_env(cls, *, token: str | None = None) -> ClientSecurity:
        """From ``CB_TOKEN``, ``CB_TLS_CA_FILE``, ``CB_TLS_CLIENT_CERT_FILE``/``KEY_FILE``,
        ``CB_TLS_SERVER_NAME`` in the environment; ``token`` wins over ``CB_TOKEN``."""
        return cls(
            token=(token if token else os.environ.get("CB_TOKEN", "")).strip(),
            ca_file=os.environ.get("CB_TLS_CA_FILE", ""),
            cert_file=os.environ.get("CB_TLS_CLIENT_CERT_FILE", ""),
            key_file=os.environ.get("CB_TLS_CLIENT_KEY_FILE", ""),
            server_name=os.environ.get("CB_TLS_SERVER_NAME", ""),
        )

    @property
    def tls(self) -> bool:
        """True when channels use TLS."""
        return bool(self.ca_file or self.cert_file)

    def channel_credentials(self) -> grpc.ChannelCredentials | None:
        """`grpc.ssl_channel_credentials` from the files, or None for plaintext.

        Raises:
            ValueError: only one of certificate and key, or a file cannot be read.
        """
        if not self.tls:
            return None
        if bool(self.cert_file) != bool(self.key_file):
            raise ValueError(
                "a client certificate needs both CB_TLS_CLIENT_CERT_FILE and CB_TLS_CLIENT_KEY_FILE"
            )
        return grpc.ssl_channel_credentials(
            root_certificates=_read_file(self.ca_file, "CB_TLS_CA_FILE") if self.ca_file else None,
            private_key=_read_file(self.key_file, "CB_TLS_CLIENT_KEY_FILE") if self.key_file else None,
            certificate_chain=_read_file(self.cert_file, "CB_TLS_CLIENT_CERT_FILE")
            if self.cert_file
            else None,
        )


def _read_file(path: str, setting: str) -> bytes:
    try:
        with open(path, "rb") as handle:
            return handle.read()
    except OSError as exc:
        raise ValueError(f"{setting}={path}: cannot be read: {exc.strerror or exc}") from exc


class CallDetails(grpc.ClientCallDetails):  # type: ignore[misc]
    """``base`` with its metadata replaced by ``metadata``: what a client interceptor passes on (the bearer
    token here, the consistency token in `memory_service_grpc_client.consistency_tokens`)."""

    def __init__(self, base: grpc.ClientCallDetails, metadata: tuple[tuple[str, str], ...]) -> None:
        self.method = base.method
        self.timeout = base.timeout
        self.metadata = metadata
        self.credentials = base.credentials
        self.wait_for_ready = getattr(base, "wait_for_ready", None)
        self.compression = getattr(base, "compression", None)


class _BearerTokenInterceptor(
    grpc.UnaryUnaryClientInterceptor,  # type: ignore[misc]
    grpc.UnaryStreamClientInterceptor,  # type: ignore[misc]
    grpc.StreamUnaryClientInterceptor,  # type: ignore[misc]
    grpc.StreamStreamClientInterceptor,  # type: ignore[misc]
):
    """Adds ``authorization: Bearer <token>`` to every call (unless the call sets its own)."""

    def __init__(self, token: str) -> None:
        self._header = ("authorization", f"Bearer {token}")

    def _details(self, details: grpc.ClientCallDetails) -> CallDetails:
        metadata = tuple(details.metadata or ())
        if not any(key.lower() == "authorization" for key, _ in metadata):
            metadata = (*metadata, self._header)
        return CallDetails(details, metadata)

    def intercept_unary_unary(self, continuation: Any, details: grpc.ClientCallDetails, request: Any) -> Any:
        return continuation(self._details(details), request)

    def intercept_unary_stream(self, continuation: Any, details: grpc.ClientCallDetails, request: Any) -> Any:
        return continuation(self._details(details), request)

    def intercept_stream_unary(
        self, continuation: Any, details: grpc.ClientCallDetails, requests: Iterator[Any]
    ) -> Any:
        return continuation(self._details(details), requests)

    def intercept_stream_stream(
        self, continuation: Any, details: grpc.ClientCallDetails, requests: Iterator[Any]
    ) -> Any:
        return continuation(self._details(details), requests)


def _is_loopback(address: str) -> bool:
    """True for ``localhost``, ``127.0.0.0/8``, ``[::1]`` and ``unix:`` targets (names are not resolved)."""
    text = address.strip().removeprefix("dns:///")
    if text.startswith(("unix:", "unix-abstract:")):
        return True
    if text.startswith("["):
        host = text[1 : text.find("]")] if "]" in text else ""
    else:
        host = text.partition(":")[0] if text.count(":") == 1 else text
    host = host.strip().lower()
    if host in ("localhost", "localhost.", "ip6-localhost"):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def make_channel(
    address: str,
    *,
    options: tuple[tuple[str, int | str], ...] = (),
    security: ClientSecurity | None = None,
    wrap: ChannelWrapper | None = None,
) -> grpc.Channel:
    """Opens a channel to ``host:port`` allowing messages up to 64 MiB both ways.

    Args:
        address: ``host:port`` (e.g. ``127.0.0.1:50051``).
        options: extra channel arguments, appended after the defaults.
        security: token and TLS files; None (or an empty one) is a plaintext channel without token.
        wrap: applied last to the channel (e.g. a tracing layer); None: the channel as it is.

    Returns:
        A `grpc.Channel` (TLS when ``security.tls``; every call carries the bearer token when
        ``security.token``); close it (or use it as a context manager) when done.

    Raises:
        ValueError: a TLS file cannot be read, or a client certificate without its key.
    """
    security = security or ClientSecurity()
    channel_options: tuple[tuple[str, int | str], ...] = (*CHANNEL_OPTIONS, *options)
    credentials = security.channel_credentials()
    if credentials is None:
        channel = grpc.insecure_channel(address, options=channel_options)
        if security.token and not _is_loopback(address):
            log.warning("sending a bearer token to %s without TLS (set CB_TLS_CA_FILE)", address)
    else:
        if security.server_name:
            channel_options = (*channel_options, ("grpc.ssl_target_name_override", security.server_name))
        channel = grpc.secure_channel(address, credentials, options=channel_options)
    if security.token:
        channel = grpc.intercept_channel(channel, _BearerTokenInterceptor(security.token))
    return wrap(channel) if wrap is not None else channel


def _health_messages() -> tuple[Any, Any]:
    """HealthCheckRequest and HealthCheckResponse of grpc.health.v1 (grpc/health/v1/health.proto), built in
    a descriptor pool of their own: no dependency on grpcio-health-checking, and no clash with a copy of
    it in the default pool."""
    proto = descriptor_pb2.FileDescriptorProto(
        name="memory_service_grpc_client/grpc_health_v1.proto", package="grpc.health.v1", syntax="proto3"
    )
    request = proto.message_type.add(name="HealthCheckRequest")
    request.field.add(
        name="service",
        number=1,
        type=descriptor_pb2.FieldDescriptorProto.TYPE_STRING,
        label=descriptor_pb2.FieldDescriptorProto.LABEL_OPTIONAL,
    )
    response = proto.message_type.add(name="HealthCheckResponse")
    states = response.enum_type.add(name="ServingStatus")
    for number, name in enumerate(("UNKNOWN", "SERVING", "NOT_SERVING", "SERVICE_UNKNOWN")):
        states.value.add(name=name, number=number)
    response.field.add(
        name="status",
        number=1,
        type=descriptor_pb2.FieldDescriptorProto.TYPE_ENUM,
        type_name=".grpc.health.v1.HealthCheckResponse.ServingStatus",
        label=descriptor_pb2.FieldDescriptorProto.LABEL_OPTIONAL,
    )
    pool = descriptor_pool.DescriptorPool()
    pool.Add(proto)
    return (
        message_factory.GetMessageClass(pool.FindMessageTypeByName("grpc.health.v1.HealthCheckRequest")),
        message_factory.GetMessageClass(pool.FindMessageTypeByName("grpc.health.v1.HealthCheckResponse")),
    )


_HealthCheckRequest, _HealthCheckResponse = _health_messages()
_SERVING_STATUS = _HealthCheckResponse.DESCRIPTOR.enum_types_by_name["ServingStatus"]


def health_status(channel: grpc.Channel, service: str = "", *, timeout: float = 2.0) -> str:
    """One health check: ``"SERVING"``, ``"NOT_SERVING"``, ``"SERVICE_UNKNOWN"`` or ``"UNREACHABLE"``."""
    check = channel.unary_unary(
        "/grpc.health.v1.Health/Check",
        request_serializer=_HealthCheckRequest.SerializeToString,
        response_deserializer=_HealthCheckResponse.FromString,
    )
    try:
        response = check(_HealthCheckRequest(service=service), timeout=timeout)
    except grpc.RpcError as exc:
        if getattr(exc, "code", lambda: None)() == grpc.StatusCode.NOT_FOUND:
            return "SERVICE_UNKNOWN"
        return "UNREACHABLE"
    value = _SERVING_STATUS.values_by_number.get(response.status)
    return str(value.name) if value is not None else "UNKNOWN"


def wait_for_serving(
    address: str,
    *,
    timeout: float = 120.0,
    service: str = "",
    interval: float = 0.5,
    on_poll: Callable[[str], None] | None = None,
    security: ClientSecurity | None = None,
) -> bool:
    """Polls grpc.health.v1 at ``address`` until ``service`` is SERVING or ``timeout`` seconds pass.

    Args:
        address: ``host:port``.
        timeout: overall seconds to wait.
        service: health service name; ``""`` is the server as a whole.
        interval: seconds between polls.
        on_poll: called with each observed status (progress display).
        security: TLS files (health needs no token) for `make_channel`.

    Returns:
        True once SERVING, False on timeout.
    """
    deadline = time.monotonic() + timeout
    with make_channel(address, security=security) as channel:
        while True:
            status = health_status(channel, service, timeout=min(2.0, max(0.1, deadline - time.monotonic())))
            if on_poll is not None:
                on_poll(status)
            if status == "SERVING":
                return True
            if time.monotonic() + interval > deadline:
                return False
            time.sleep(interval)


@dataclass
class ServiceChannels:
    """The two channels of a `MemoryClient` and its views (`MemoryClient.with_token` shares them): to
    ingest_service and to query_service, opened on first use by `make_channel`, then ``interceptors``."""

    ingest_addr: str
    query_addr: str
    security: ClientSecurity
    interceptors: tuple[Any, ...] = ()
    wrap: ChannelWrapper | None = None
    ingest: grpc.Channel | None = None
    query: grpc.Channel | None = None

    def _open(self, address: str) -> grpc.Channel:
        channel = make_channel(address, security=self.security, wrap=self.wrap)
        return grpc.intercept_channel(channel, *self.interceptors) if self.interceptors else channel

    def ingest_channel(self) -> grpc.Channel:
        if self.ingest is None:
            self.ingest = self._open(self.ingest_addr)
        return self.ingest

    def query_channel(self) -> grpc.Channel:
        if self.query is None:
            self.query = self._open(self.query_addr)
        return self.query

    def close(self) -> None:
        for channel in (self.ingest, self.query):
            if channel is not None:
                channel.close()
        self.ingest = self.query = None

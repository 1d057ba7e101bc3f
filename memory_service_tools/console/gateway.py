"""Calls to the services on behalf of one visitor, with failures turned into what a page shows.

Every page goes through `Gateway.call`: a refused or failed call becomes a `CallFailure` that names the
service, the status code, the message and the field violations, and the page renders it beside whatever
else it could read. UNAUTHENTICATED is raised as `TokenRefused` so the app shows the login page.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from dataclasses import field
from functools import partial
from typing import Any
from typing import TypeVar

from google.protobuf.message import Message

from memory_service_grpc_client import MemoryClient
from memory_service_grpc_client import ServiceError
from memory_service_grpc_client import Unauthenticated
from memory_service_grpc_client import Unavailable

T = TypeVar("T")

INGEST = "ingest_service"
QUERY = "query_service"


def rpc_name(request: Message) -> str:
    """``Service.Method`` of the RPC that takes ``request``'s message type, e.g. ``SourceService.GetSource``
    for a GetSourceRequest (AIP style: the service is declared in the request's own proto file).

    Raises:
        LookupError: no service of that file takes the message type.
    """
    descriptor = request.DESCRIPTOR
    for service in descriptor.file.services_by_name.values():
        for method in service.methods:
            if method.input_type.full_name == descriptor.full_name:
                return f"{service.name}.{method.name}"
    raise LookupError(f"no RPC of {descriptor.file.name} takes {descriptor.full_name}")


class TokenRefused(Exception):
    """The services refused the visitor's token (missing, unknown or expired)."""


@dataclass(frozen=True)
class CallFailure:
    """One failed call as a page shows it.

    Attributes:
        service: ``ingest_service`` or ``query_service``.
        rpc: the RPC's name, e.g. ``RetrievalService.Search``.
        code: the gRPC status code name, e.g. ``INVALID_ARGUMENT``.
        message: the status message.
        violations: ``(field, description)`` pairs of the `google.rpc.BadRequest`.
        down: True when the service could not be reached (UNAVAILABLE).
    """

    service: str
    rpc: str
    code: str
    message: str
    violations: tuple[tuple[str, str], ...] = ()
    down: bool = False


@dataclass
class Gateway:
    """One visitor's view of the services: ``client`` carries the visitor's token on every call.

    Attributes:
        client: a `MemoryClient.with_token` view (shares the console's channels).
        addresses: ``{service name: host:port}``, shown when a service is down.
        failures: every failure of this request, in call order (the page lists them).
    """

    client: MemoryClient
    addresses: dict[str, str]
    failures: list[CallFailure] = field(default_factory=list)

    def call(self, service: str, rpc: str, method: Callable[[], T]) -> T | None:
        """Runs ``method`` (one RPC of ``service``); None after a failure, which is kept in ``failures``.

        Raises:
            TokenRefused: the service answered UNAUTHENTICATED.
        """
        try:
            return method()
        except Unauthenticated as exc:
            raise TokenRefused(exc.message) from exc
        except ServiceError as exc:
            self.failures.append(
                CallFailure(
                    service=service,
                    rpc=rpc,
                    code=exc.code.name,
                    message=exc.message,
                    violations=tuple((v.field, v.description) for v in exc.violations),
                    down=isinstance(exc, Unavailable),
                )
            )
            return None

    def call_rpc(
        self, method: Callable[..., T], request: Message, *, service: str = QUERY, **options: Any
    ) -> T | None:
        """`call` of ``method(request, **options)``, the client's call of the RPC of ``service`` that takes
        ``request`` (named as `rpc_name` says)."""
        return self.call(service, rpc_name(request), partial(method, request, **options))

    def down_services(self) -> list[str]:
        """The services that could not be reached during this request, each once."""
        return list(dict.fromkeys(f.service for f in self.failures if f.down))

"""`ConsoleConfig` (how the console reaches the services) and `PageView` (what a page's builder reads)."""

from __future__ import annotations

from dataclasses import dataclass
from dataclasses import field

from starlette.requests import Request

from memory_service_grpc_client import ClientSecurity
from memory_service_tools.console.gateway import Gateway
from memory_service_tools.console.views import Address


@dataclass(frozen=True)
class ConsoleConfig:
    """How the console reaches the services and what its start page lists.

    Attributes:
        ingest_addr: ``host:port`` of ingest_service.
        query_addr: ``host:port`` of query_service.
        security: TLS settings of the channels; its token is ignored (each visitor brings one).
        namespaces: namespaces the start page lists besides those the token can see (even when empty).
        secure_cookie: mark the token cookie ``Secure`` (set when the console is served over HTTPS).
        text_page_chars: characters of a node's text one node page shows (the rest by next / previous
            links), so a document of megabytes is not one page of megabytes.
    """

    ingest_addr: str
    query_addr: str
    security: ClientSecurity = field(default_factory=ClientSecurity)
    namespaces: tuple[str, ...] = ()
    secure_cookie: bool = False
    text_page_chars: int = 20_000


@dataclass(frozen=True)
class PageView:
    """What a page's ``build`` gets: the request, the visitor's gateway, the address and the config."""

    request: Request
    gateway: Gateway
    address: Address
    config: ConsoleConfig

    def param(self, name: str, default: str = "") -> str:
        """A query parameter, stripped (``default`` when absent)."""
        return self.request.query_params.get(name, default).strip()

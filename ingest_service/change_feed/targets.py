"""Which URLs a webhook may post to: http(s) only, and no private, loopback, link-local or otherwise
internal address unless ``CB_WEBHOOK_ALLOWED_TARGETS`` names its host, its address or a network holding it,
so a tenant cannot make the service call internal endpoints. The rule is applied when a subscription is
created and again before every attempt (a name may resolve elsewhere later).
"""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import Sequence
from urllib.parse import urlsplit

__all__ = ["MAX_URL_LENGTH", "target_refusal"]

MAX_URL_LENGTH = 2048
_Address = ipaddress.IPv4Address | ipaddress.IPv6Address


def _internal(address: _Address) -> bool:
    return (
        address.is_private
        or address.is_loopback
        or address.is_link_local
        or address.is_multicast
        or address.is_reserved
        or address.is_unspecified
    )


def _allowed(host: str, address: _Address, allowed: Sequence[str]) -> bool:
    for entry in allowed:
        entry = entry.strip().lower()
        if not entry:
            continue
        if entry == host.lower():
            return True
        try:
            if address in ipaddress.ip_network(entry, strict=False):
                return True
        except ValueError:
            continue
    return False


def target_refusal(url: str, allowed: Sequence[str], *, resolve: bool = True) -> str | None:
    """Why ``url`` may not be a webhook target (None: it may).

    Args:
        url: the target URL.
        allowed: ``CB_WEBHOOK_ALLOWED_TARGETS``: host names, addresses or CIDR networks.
        resolve: look the host up (every address it resolves to must pass).
    """
    if len(url) > MAX_URL_LENGTH:
        return f"at most {MAX_URL_LENGTH} characters"
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError:
        return "not a URL"
    if parts.scheme not in ("http", "https") or not parts.hostname:
        return "an http:// or https:// URL with a host"
    if parts.username or parts.password:
        return "credentials in the URL are not allowed (the signature authenticates the sender)"
    host = parts.hostname
    try:
        addresses: list[_Address] = [ipaddress.ip_address(host)]
    except ValueError:
        if not resolve:
            return None
        try:
            infos = socket.getaddrinfo(
                host, port or (443 if parts.scheme == "https" else 80), proto=socket.IPPROTO_TCP
            )
        except OSError:
            return f"the host {host} does not resolve"
        addresses = [ipaddress.ip_address(str(info[4][0]).split("%")[0]) for info in infos]
    for address in addresses:
        if _internal(address) and not _allowed(host, address, allowed):
            return (
                f"{host} is an internal address ({address}); only hosts or networks named by"
                " CB_WEBHOOK_ALLOWED_TARGETS (a JSON list, e.g. '[\"127.0.0.1\"]', set on the ingest"
                " service and the worker) may be called"
            )
    return None

"""Authentication: call metadata -> the calling `Principal`, and where development mode may run.

`Authenticator.authenticate` reads the single ``authorization: Bearer <token>`` metadata entry
(`bearer_token`) and looks the token up in a `TokenStore` (UNAUTHENTICATED for a missing, malformed or
unknown token). Without a store the server runs in development mode: every caller is
`development_principal()`, which `common.grpc.security.build_authenticator` allows only on a loopback
bind address (`is_loopback_address`).
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable

from common.auth.principals import Principal
from common.auth.principals import development_principal
from common.auth.tokens_file import TokenStore
from common.kernel.errors import Unauthenticated

__all__ = ["AUTHORIZATION_METADATA_KEY", "Authenticator", "bearer_token", "is_loopback_address"]

AUTHORIZATION_METADATA_KEY = "authorization"


def bearer_token(metadata: Iterable[tuple[str, str | bytes]] | None) -> str:
    """The token of the single ``authorization: Bearer <token>`` metadata entry.

    Raises:
        Unauthenticated: no such entry, several of them, or not the Bearer scheme.
    """
    values = [v for k, v in metadata or () if k.lower() == AUTHORIZATION_METADATA_KEY]
    if not values:
        raise Unauthenticated(
            "missing bearer token: send metadata 'authorization: Bearer <token>'", reason="TOKEN_MISSING"
        )
    if len(values) > 1:
        raise Unauthenticated("more than one authorization metadata entry", reason="TOKEN_INVALID")
    value = values[0]
    if isinstance(value, bytes):
        value = value.decode("utf-8", "replace")
    scheme, _, token = value.strip().partition(" ")
    token = token.strip()
    if scheme.lower() != "bearer" or not token:
        raise Unauthenticated("authorization metadata must be 'Bearer <token>'", reason="TOKEN_INVALID")
    return token


class Authenticator:
    """Turns call metadata into a `Principal`: tokens from a `TokenStore`, or development mode.

    Args:
        store: the tokens; None means development mode (no check, `development_principal()`).
    """

    def __init__(self, store: TokenStore | None) -> None:
        self.store = store
        self._development = development_principal()

    @property
    def enabled(self) -> bool:
        """True when tokens are checked."""
        return self.store is not None

    def authenticate(self, metadata: Iterable[tuple[str, str | bytes]] | None) -> Principal:
        """The caller of an RPC.

        Raises:
            Unauthenticated: tokens mode and no, malformed or unknown token.
        """
        if self.store is None:
            return self._development
        principal = self.store.lookup(bearer_token(metadata))
        if principal is None:
            raise Unauthenticated("unknown or revoked token", reason="TOKEN_INVALID")
        return principal


# --------------------------------------------------------------------------------------------------
# Loopback check (development mode binds only there)


def is_loopback_address(address: str) -> bool:
    """True when a bind address ``host:port`` reaches this machine only.

    Loopback: ``127.0.0.0/8``, ``::1`` (``[::1]:port``), ``localhost``, and ``unix:`` sockets.
    Anything else (``0.0.0.0``, ``[::]``, an empty host, other host names) is not: names are not
    resolved, so an unknown name counts as non-loopback (fail closed).
    """
    text = address.strip()
    if text.startswith(("unix:", "unix-abstract:")):
        return True
    if text.startswith("["):
        host = text[1 : text.find("]")] if "]" in text else ""
    elif text.count(":") == 1:
        host = text.partition(":")[0]
    else:
        host = text  # no port, or a bare IPv6 literal
    host = host.strip().lower()
    if host in ("localhost", "localhost.", "ip6-localhost"):
        return True
    try:
        ip = ipaddress.ip_address(host)
    except ValueError:
        return False
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        return ip.ipv4_mapped.is_loopback
    return ip.is_loopback

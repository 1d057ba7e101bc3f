"""What a server checks before it binds: the authentication mode and the TLS credentials.

* `build_authenticator`: ``CB_AUTH_MODE`` / ``CB_TOKENS_FILE`` -> an `Authenticator` (bearer tokens from a
  reloading `TokenStore`, or development mode, which is allowed on loopback addresses only), logging the
  mode once; `checked_token_store` is its check without the log;
* `server_credentials`: ``CB_TLS_CERT_FILE`` + ``CB_TLS_KEY_FILE`` -> TLS, plus ``CB_TLS_CLIENT_CA_FILE``
  -> mutual TLS (client certificates signed by that CA are required), via `grpc.ssl_server_credentials`.

Both raise `ServerSetupError` for a configuration the server refuses to start with. `build_server`
(`common.grpc.server`) calls both; ``cb serve`` calls `checked_token_store` and `server_credentials` first
to report a refusal before it loads the embedding model.
"""

from __future__ import annotations

import logging

import grpc

from common.auth.authentication import Authenticator
from common.auth.authentication import is_loopback_address
from common.auth.tokens_file import TokensFileError
from common.auth.tokens_file import TokenStore
from common.kernel.config import Settings

__all__ = ["ServerSetupError", "build_authenticator", "checked_token_store", "server_credentials"]

log = logging.getLogger("memory.server")


class ServerSetupError(RuntimeError):
    """The server refuses to start: insecure bind, invalid tokens file, unreadable TLS files."""


def checked_token_store(settings: Settings, *, address: str, service_name: str) -> TokenStore | None:
    """The token store ``settings`` ask for (None: development mode), checked against the bind ``address``;
    logs nothing (`cb serve` checks the configuration with it before loading the embedding model, then
    `build_authenticator` reports the mode once).

    ``CB_AUTH_MODE=auto`` (default) means tokens when ``CB_TOKENS_FILE`` is set, development mode
    otherwise; development mode (``none``) is allowed only on loopback addresses.

    Raises:
        ServerSetupError: development mode on a non-loopback address, tokens mode without a tokens
            file, or an invalid tokens file.
    """
    if not settings.tokens_required:
        if not is_loopback_address(address):
            raise ServerSetupError(
                f"{service_name}: refusing to listen on {address} without authentication: development "
                "mode (no tokens) binds loopback addresses only (127.0.0.0/8, ::1, localhost). Set "
                "CB_TOKENS_FILE to a tokens file (`cb token create`), or bind 127.0.0.1."
            )
        return None
    if not settings.tokens_file:
        raise ServerSetupError(f"{service_name}: CB_AUTH_MODE=tokens needs CB_TOKENS_FILE")
    try:
        return TokenStore(settings.tokens_file)
    except TokensFileError as exc:
        raise ServerSetupError(f"{service_name}: {exc}") from exc


def build_authenticator(settings: Settings, *, address: str, service_name: str) -> Authenticator:
    """The authenticator ``settings`` ask for (`checked_token_store`); logs the mode once: a warning in
    development mode, the tokens file and its size otherwise.

    Raises:
        ServerSetupError: see `checked_token_store`.
    """
    store = checked_token_store(settings, address=address, service_name=service_name)
    if store is None:
        log.warning("%s: authentication is off (development mode, loopback %s only)", service_name, address)
        return Authenticator(None)
    log.info("%s: bearer tokens from %s (%d tokens)", service_name, store.path, len(store))
    return Authenticator(store)


def _read_pem(path: str, setting: str) -> bytes:
    try:
        with open(path, "rb") as handle:
            return handle.read()
    except OSError as exc:
        raise ServerSetupError(f"{setting}={path}: cannot be read: {exc.strerror or exc}") from exc


def server_credentials(settings: Settings) -> grpc.ServerCredentials | None:
    """TLS credentials from ``CB_TLS_CERT_FILE``/``CB_TLS_KEY_FILE`` (+ ``CB_TLS_CLIENT_CA_FILE`` = mTLS).

    Returns:
        None when TLS is not configured (plaintext).

    Raises:
        ServerSetupError: only one of certificate and key is set, a client CA without a certificate,
            or a file cannot be read.
    """
    cert, key, client_ca = settings.tls_cert_file, settings.tls_key_file, settings.tls_client_ca_file
    if not cert and not key:
        if client_ca:
            raise ServerSetupError("CB_TLS_CLIENT_CA_FILE needs CB_TLS_CERT_FILE and CB_TLS_KEY_FILE")
        return None
    if not cert or not key:
        raise ServerSetupError("TLS needs both CB_TLS_CERT_FILE and CB_TLS_KEY_FILE")
    pair = (_read_pem(key, "CB_TLS_KEY_FILE"), _read_pem(cert, "CB_TLS_CERT_FILE"))
    roots = _read_pem(client_ca, "CB_TLS_CLIENT_CA_FILE") if client_ca else None
    return grpc.ssl_server_credentials([pair], root_certificates=roots, require_client_auth=roots is not None)

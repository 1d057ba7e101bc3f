"""Webhook secrets at rest (docs/how-to/change-feed.md "Webhook secrets"): sealed with Fernet
(AES-128-CBC with HMAC-SHA256, https://github.com/fernet/spec) under ``CB_WEBHOOK_SECRET_KEYS``.

The delivery worker needs the secret itself to sign each delivery (HMAC), so it is sealed, not hashed: a
copy of the database or a backup without the keys does not let anyone forge deliveries. Keys are a
comma-separated list, newest first: the first seals, every one opens, so a new key goes in front and an
old one stays listed while subscriptions sealed under it exist. A stored value starting with ``fernet:``
is sealed; any other is a plain secret (development mode without keys).
"""

from __future__ import annotations

from cryptography.fernet import Fernet
from cryptography.fernet import InvalidToken
from cryptography.fernet import MultiFernet

from common.kernel.errors import FailedPrecondition

SEALED_PREFIX = "fernet:"


class SecretSealer:
    """Seals and opens webhook secrets with the configured keys (see the module doc).

    Raises:
        ValueError: a key that is not a Fernet key (32 url-safe base64-encoded bytes).
    """

    def __init__(self, keys: str) -> None:
        fernets = [Fernet(key.strip().encode()) for key in keys.split(",") if key.strip()]
        self._keys = MultiFernet(fernets) if fernets else None

    @property
    def sealing(self) -> bool:
        """Keys are configured: new secrets are stored sealed."""
        return self._keys is not None

    def seal(self, secret: str) -> str:
        """``secret`` as stored: sealed under the newest key, or as it is without keys."""
        if self._keys is None:
            return secret
        return SEALED_PREFIX + self._keys.encrypt(secret.encode()).decode()

    def open(self, stored: str) -> str:
        """The secret of a stored value.

        Raises:
            FailedPrecondition: reason ``WEBHOOK_SECRET_KEY_MISSING``: the value is sealed and no
                configured key opens it.
        """
        if not stored.startswith(SEALED_PREFIX):
            return stored
        if self._keys is None:
            raise FailedPrecondition(
                "a webhook secret is sealed but CB_WEBHOOK_SECRET_KEYS is not set",
                reason="WEBHOOK_SECRET_KEY_MISSING",
            )
        try:
            return self._keys.decrypt(stored[len(SEALED_PREFIX) :].encode()).decode()
        except InvalidToken as error:
            raise FailedPrecondition(
                "no key of CB_WEBHOOK_SECRET_KEYS opens a stored webhook secret (a key was dropped too early?)",
                reason="WEBHOOK_SECRET_KEY_MISSING",
            ) from error

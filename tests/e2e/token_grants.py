"""Bearer tokens for the token-secured test services: one right of a principal in some namespaces."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

from common.auth.principals import Right
from memory_service_tools.token_writer import add_token


def grant(tokens_file: Path, principal: str, right: Right, namespaces: Iterable[str], **options: Any) -> str:
    """Adds a token of ``principal`` holding ``right`` in each of ``namespaces`` to ``tokens_file``
    (``options``: what else `add_token` takes, e.g. scopes or pii_clearance); the token."""
    token, _ = add_token(tokens_file, principal=principal, namespaces={ns: [right] for ns in namespaces}, **options)
    return token

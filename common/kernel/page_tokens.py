"""Page tokens of every listing: base64url of a small flat JSON value, read back by one robust decoder.

A page token comes back from the client, so it is input like any other: `decode_page_token` refuses
whatever this service could not have issued (not base64url, not UTF-8, not JSON, nested or deep JSON,
another shape than the listing's, U+0000 or an unpaired surrogate, a time that is not a canonical
instant or lies outside the representable range) with one `MalformedPageToken`, which each listing
turns into INVALID_ARGUMENT on ``page_token``. Nothing of a crafted token reaches the database.
"""

from __future__ import annotations

import base64
import binascii
import json
import re
from datetime import datetime
from typing import Any

from common.kernel.identifiers import canonical_instant
from common.kernel.identifiers import parse_instant
from common.kernel.storable_values import unstorable_paths

__all__ = ["MalformedPageToken", "decode_page_token", "encode_page_token", "token_bytes", "token_instant"]

_BASE64URL = re.compile(r"^[A-Za-z0-9_-]*={0,2}$")


class MalformedPageToken(ValueError):
    """A page token this service did not issue."""


def encode_page_token(value: list[str] | dict[str, str]) -> str:
    """base64url (padded) of ``value`` as JSON: the token `decode_page_token` reads back."""
    return base64.urlsafe_b64encode(json.dumps(value, separators=(",", ":")).encode()).decode("ascii")


def token_bytes(text: str) -> bytes:
    """The bytes of a base64url text (padding optional).

    Raises:
        MalformedPageToken: any character outside base64url, or a wrong length.
    """
    if not _BASE64URL.match(text):
        raise MalformedPageToken("not base64url")
    stripped = text.rstrip("=")
    try:
        return base64.urlsafe_b64decode(stripped + "=" * (-len(stripped) % 4))
    except (binascii.Error, ValueError) as error:
        raise MalformedPageToken("not base64url") from error


def decode_page_token(
    token: str | bytes, *, length: int | None = None, keys: frozenset[str] | None = None
) -> Any:
    """The flat JSON value of a page token: a list of ``length`` strings, or an object with exactly
    ``keys`` (string values).

    Args:
        token: the token as the client sent it (text), or its payload already base64-decoded (bytes).
        length: the list shape's length (None: the token must be an object).
        keys: the object shape's keys.

    Raises:
        MalformedPageToken: anything but such a value, made only of storable strings.
    """
    payload = token_bytes(token) if isinstance(token, str) else token
    try:
        value = json.loads(payload.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError) as error:  # 50,000 nested brackets recurse
        raise MalformedPageToken("not JSON") from error
    if length is not None:
        shaped = isinstance(value, list) and len(value) == length and all(isinstance(v, str) for v in value)
    else:
        shaped = (
            isinstance(value, dict)
            and set(value) == set(keys or ())
            and all(isinstance(v, str) for v in value.values())
        )
    if not shaped:
        raise MalformedPageToken("not the shape of this listing's tokens")
    if unstorable_paths(value, limit=1):
        raise MalformedPageToken("holds a value nothing stored has")
    return value


def token_instant(text: str) -> datetime:
    """An instant of a token: exactly as `canonical_instant` writes it, inside the representable range.

    Raises:
        MalformedPageToken: any other text (an offset other than Z, a trailing character, an overflow).
    """
    try:
        instant = parse_instant(text)
    except (ValueError, OverflowError) as error:
        raise MalformedPageToken("not an instant") from error
    if canonical_instant(instant) != text:
        raise MalformedPageToken("not a canonical instant")
    return instant

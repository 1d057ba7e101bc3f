"""Consistency tokens: read-after-write across replicas (docs/explanation/architecture.md), free of any transport.

A write RPC answers with a token, the WAL position (PostgreSQL LSN) of the primary right after its
transaction committed, so at or past the commit record. A read that sends the token back (gRPC metadata
`CONSISTENCY_TOKEN_METADATA`) is answered only from a database that has replayed at least that
position: a streaming replica whose ``pg_last_wal_replay_lsn()`` reached it, or the primary.

The token is opaque to clients: ``"ct1-"`` and the position as 16 hexadecimal digits (so tokens of one
cluster compare like their positions); only this module reads or writes it. The transport sets
`required_position_var` for the duration of a read call; `common.storage.replicas.read_routing` reads it (the
same pattern as `common.kernel.request_context`).
"""

from __future__ import annotations

import contextvars
import re

from common.kernel.errors import InvalidArgument

__all__ = [
    "CONSISTENCY_TOKEN_METADATA",
    "decode_token",
    "encode_token",
    "format_lsn",
    "parse_lsn",
    "required_position",
    "required_position_var",
]

CONSISTENCY_TOKEN_METADATA = "x-consistency-token"

_PREFIX = "ct1-"
_TOKEN = re.compile(r"ct1-([0-9a-f]{16})")
_LSN = re.compile(r"([0-9A-Fa-f]{1,8})/([0-9A-Fa-f]{1,8})")

required_position_var: contextvars.ContextVar[int | None] = contextvars.ContextVar(
    "memory_required_wal_position", default=None
)
"""WAL position the read in progress must see (None: no token, any replica will do)."""


def required_position() -> int | None:
    """The WAL position the current read must see, or None when it carries no token."""
    return required_position_var.get()


def parse_lsn(text: str) -> int:
    """PostgreSQL's ``pg_lsn`` text form (``"16/B374D848"``: high and low 32 bits in hex) as an integer.

    Raises:
        ValueError: not an LSN.
    """
    match = _LSN.fullmatch(text.strip())
    if match is None:
        raise ValueError(f"not a WAL position: {text!r}")
    return (int(match.group(1), 16) << 32) | int(match.group(2), 16)


def format_lsn(position: int) -> str:
    """The ``pg_lsn`` text form of ``position`` (inverse of `parse_lsn`)."""
    return f"{position >> 32:X}/{position & 0xFFFFFFFF:X}"


def encode_token(position: int) -> str:
    """The token of WAL position ``position`` (an integer from `parse_lsn`)."""
    if not 0 <= position < 1 << 64:
        raise ValueError(f"WAL position out of range: {position}")
    return f"{_PREFIX}{position:016x}"


def decode_token(token: str) -> int:
    """The WAL position of a token from `encode_token`.

    Raises:
        InvalidArgument: not a token of this service (field ``x-consistency-token``).
    """
    match = _TOKEN.fullmatch(token.strip())
    if match is None:
        raise InvalidArgument.single(
            CONSISTENCY_TOKEN_METADATA,
            "not a consistency token: send back the consistency_token of a write response unchanged",
        )
    return int(match.group(1), 16)

"""The shared page-token decoder (`common.kernel.page_tokens`): what every listing issues reads back, and
every crafted token (overflowing instants, deep JSON, U+0000, wrong shapes, not base64url) is one
`MalformedPageToken`, never another exception."""

from __future__ import annotations

import base64
import json
from datetime import UTC
from datetime import datetime

import pytest

from common.kernel.page_tokens import MalformedPageToken
from common.kernel.page_tokens import decode_page_token
from common.kernel.page_tokens import encode_page_token
from common.kernel.page_tokens import token_bytes
from common.kernel.page_tokens import token_instant


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).decode()


def test_an_issued_token_reads_back() -> None:
    token = encode_page_token(["person:a", "KNOWS", "2026-01-01T00:00:00Z", "fact-" + "0" * 24])
    assert decode_page_token(token, length=4)[2] == "2026-01-01T00:00:00Z"
    keyed = encode_page_token({"t": "2026-01-01T00:00:00.500000Z", "id": "m-1"})
    value = decode_page_token(keyed.rstrip("="), keys=frozenset({"t", "id"}))  # padding is optional
    assert token_instant(value["t"]) == datetime(2026, 1, 1, 0, 0, 0, 500000, tzinfo=UTC)


@pytest.mark.parametrize(
    "token",
    [
        _b64(b"[" * 50_000 + b"]" * 50_000),
        _b64(json.dumps(["a\u0000", "b"]).encode()),
        _b64(json.dumps({"a": "x", "b": "y"}).encode()),  # an object is not the (name, version) list
        _b64(json.dumps(["a", ["b"]]).encode()),
        _b64(json.dumps(["a", 2]).encode()),
        _b64(json.dumps(["a"]).encode()),
        _b64(b"\xff\xfe\x00"),
        _b64(b"not json"),
        "\u0000",
        "ab$cd",
        "A",
    ],
    ids=[
        "deep", "nul", "object", "nested", "number", "short", "non_utf8", "not_json", "nul_raw", "alphabet",
        "length",
    ],
)
def test_crafted_list_tokens_are_malformed(token: str) -> None:
    with pytest.raises(MalformedPageToken):
        decode_page_token(token, length=2)


@pytest.mark.parametrize(
    "payload",
    [{"t": "x"}, {"t": "x", "id": "y", "z": "w"}, ["x", "y"], {"t": 12, "id": "y"}],
    ids=["missing_key", "extra_key", "list", "number"],
)
def test_crafted_object_tokens_are_malformed(payload: object) -> None:
    with pytest.raises(MalformedPageToken):
        decode_page_token(json.dumps(payload).encode(), keys=frozenset({"t", "id"}))


@pytest.mark.parametrize(
    "text",
    [
        "0001-01-01T00:00:00+01:00",  # before year 1 in UTC
        "9999-12-31T23:59:59-01:00",  # after year 9999 in UTC
        "2026-01-01T00:00:00Z\u0000",  # fromisoformat accepts a trailing NUL
        "2026-01-01T03:00:00+03:00",  # not how the service writes it
        "2026-01-01T00:00:00",
        "yesterday",
    ],
    ids=["overflow_low", "overflow_high", "trailing_nul", "offset", "naive", "words"],
)
def test_instants_other_than_canonical_ones_are_malformed(text: str) -> None:
    with pytest.raises(MalformedPageToken):
        token_instant(text)


def test_token_bytes_takes_base64url_only() -> None:
    assert token_bytes(_b64(b"abc").rstrip("=")) == b"abc"
    with pytest.raises(MalformedPageToken):
        token_bytes("a+b/")

"""Consistency tokens (common.kernel.consistency), the read DSN list, and the client's token keeper."""

from __future__ import annotations

from pathlib import Path

import pytest

from common.kernel.config import Settings
from common.kernel.consistency import CONSISTENCY_TOKEN_METADATA
from common.kernel.consistency import decode_token
from common.kernel.consistency import encode_token
from common.kernel.consistency import format_lsn
from common.kernel.consistency import parse_lsn
from common.kernel.errors import InvalidArgument
from common.storage.replicas.read_routing import read_database_urls
from memory_service_grpc_client.consistency_tokens import ConsistencyTokens


@pytest.mark.parametrize("text", ["0/0", "0/16B3748", "16/B374D848", "FFFFFFFF/FFFFFFFF"])
def test_lsn_text_round_trips(text: str) -> None:
    assert format_lsn(parse_lsn(text)) == text


def test_lsn_halves_are_high_and_low_32_bits() -> None:
    assert parse_lsn("1/0") == 1 << 32
    assert parse_lsn("0/10") == 16
    with pytest.raises(ValueError):
        parse_lsn("16-B374D848")


def test_tokens_round_trip_and_compare_like_positions() -> None:
    positions = [0, 1, parse_lsn("4/8A222000"), parse_lsn("4/8A222001"), parse_lsn("5/0"), (1 << 64) - 1]
    tokens = [encode_token(position) for position in positions]
    assert [decode_token(token) for token in tokens] == positions
    assert tokens == sorted(tokens), "a later write has a larger token"
    with pytest.raises(ValueError):
        encode_token(-1)


@pytest.mark.parametrize(
    "token", ["", "4/8A222000", "ct1-", "ct1-XYZ", "ct2-000000048a222000", "ct1-48a222000"]
)
def test_a_malformed_token_names_its_field(token: str) -> None:
    with pytest.raises(InvalidArgument) as raised:
        decode_token(token)
    assert [violation.field for violation in raised.value.violations] == [CONSISTENCY_TOKEN_METADATA]


def test_read_database_url_is_one_dsn_or_a_json_list() -> None:
    assert read_database_urls(Settings(read_database_url="")) == []
    assert read_database_urls(Settings(read_database_url="host=a port=5432")) == ["host=a port=5432"]
    assert read_database_urls(
        Settings(read_database_url='["postgresql://u@a/db", "postgresql://u@b,c/db"]')
    ) == ["postgresql://u@a/db", "postgresql://u@b,c/db"]
    with pytest.raises(ValueError):
        read_database_urls(Settings(read_database_url='["postgresql://u@a/db", ""]'))


def test_the_token_keeper_keeps_the_newest_and_persists_it(tmp_path: Path) -> None:
    path = tmp_path / "state" / "token"
    tokens = ConsistencyTokens(path=path)
    assert tokens.token == ""
    tokens.record(encode_token(20))
    tokens.record(encode_token(10))  # an older write answered late does not win
    assert tokens.token == encode_token(20)
    assert ConsistencyTokens(path=path).token == encode_token(20), "a later process reads it back"
    tokens.record(encode_token(30))
    assert path.read_text(encoding="ascii").strip() == encode_token(30)

"""common.auth.authentication: the bearer token of call metadata, the Authenticator, the loopback check."""

from __future__ import annotations

from pathlib import Path

import pytest

from common.auth.authentication import Authenticator
from common.auth.authentication import bearer_token
from common.auth.authentication import is_loopback_address
from common.auth.principals import development_principal
from common.auth.tokens_file import TokenStore
from common.kernel.errors import Unauthenticated
from tests.unit.tokens_file_samples import TOKEN_A


def test_bearer_token_from_metadata() -> None:
    assert bearer_token([("authorization", "Bearer cbt_x")]) == "cbt_x"
    assert bearer_token([("x-request-id", "r"), ("Authorization", "bearer  cbt_x ")]) == "cbt_x"
    cases = {
        "TOKEN_MISSING": [],
        "TOKEN_INVALID": [("authorization", "Basic dXNlcg==")],
    }
    for reason, metadata in cases.items():
        with pytest.raises(Unauthenticated) as raised:
            bearer_token(metadata)
        assert raised.value.reason == reason
    with pytest.raises(Unauthenticated):
        bearer_token([("authorization", "Bearer")])
    with pytest.raises(Unauthenticated, match="more than one"):
        bearer_token([("authorization", "Bearer a"), ("authorization", "Bearer b")])


def test_authenticator(tokens_file: Path) -> None:
    authenticator = Authenticator(TokenStore(tokens_file))
    assert authenticator.enabled
    assert authenticator.authenticate([("authorization", f"Bearer {TOKEN_A}")]).name == "alice"
    with pytest.raises(Unauthenticated, match="unknown"):
        authenticator.authenticate([("authorization", "Bearer cbt_wrong")])
    with pytest.raises(Unauthenticated, match="missing"):
        authenticator.authenticate([])
    development = Authenticator(None)
    assert not development.enabled
    assert development.authenticate([]) == development_principal()


@pytest.mark.parametrize(
    ("address", "loopback"),
    [
        ("127.0.0.1:50051", True),
        ("127.1.2.3:0", True),
        ("localhost:50051", True),
        ("[::1]:50051", True),
        ("[::ffff:127.0.0.1]:1", True),
        ("unix:/tmp/socket", True),
        ("0.0.0.0:50051", False),
        ("[::]:50051", False),
        (":50051", False),
        ("10.0.0.5:50051", False),
        ("memory.example:50051", False),
        ("localhost.evil.example:1", False),
    ],
)
def test_is_loopback_address(address: str, loopback: bool) -> None:
    assert is_loopback_address(address) is loopback

"""common.auth.tokens_file: token hashes, the file schema and its errors, the reloading TokenStore."""

from __future__ import annotations

import hashlib
import logging
import os
from pathlib import Path

import pytest

from common.auth.principals import Right
from common.auth.tokens_file import TokensFileError
from common.auth.tokens_file import TokenStore
from common.auth.tokens_file import hash_token
from common.auth.tokens_file import load_tokens_file
from common.auth.tokens_file import new_token
from common.auth.tokens_file import read_tokens_file
from tests.unit.tokens_file_samples import TOKEN_A
from tests.unit.tokens_file_samples import TOKEN_B
from tests.unit.tokens_file_samples import token_entry_yaml
from tests.unit.tokens_file_samples import write_tokens_file


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


# --------------------------------------------------------------------------------------------------
# Tokens and hashes


def test_hash_is_sha256_hex_of_the_token() -> None:
    assert hash_token("cbt_x") == hashlib.sha256(b"cbt_x").hexdigest()
    assert len(hash_token("cbt_x")) == 64


def test_new_tokens_are_prefixed_random_and_url_safe() -> None:
    tokens = {new_token() for _ in range(100)}
    assert len(tokens) == 100
    for token in tokens:
        assert token.startswith("cbt_") and len(token) == 4 + 43
        assert all(c.isalnum() or c in "-_" for c in token[4:])


def test_entry_rights_become_the_highest_listed(tokens_file: Path) -> None:
    principals = load_tokens_file(tokens_file)
    alice = principals[hash_token(TOKEN_A)]
    assert alice.name == "alice" and alice.rights == {"team-a": Right.WRITE}
    assert alice.allowed_scopes == {"workspace:infra"} and alice.pii_clearance
    bob = principals[hash_token(TOKEN_B)]
    assert bob.rights == {"*": Right.READ} and not bob.pii_clearance and bob.authenticated


# --------------------------------------------------------------------------------------------------
# File parsing errors


@pytest.mark.parametrize(
    ("text", "field", "message"),
    [
        ("tokens: [unclosed\n", "", "not valid YAML at line 2"),
        ("- just a list\n", "", "expected a mapping with a 'tokens' list"),
        (
            "tokens:\n  - sha256: abc\n    principal: a\n    namespaces: {x: [read]}\n",
            "tokens[0].sha256",
            "64",
        ),
        (
            "tokens:\n" + token_entry_yaml("t", "a", {"team": ["read", "owner"]}),
            "tokens[0].namespaces.team[1]",
            "'read', 'write' or 'admin'",
        ),
        (
            "tokens:\n" + token_entry_yaml("t", "a", {"team": []}),
            "tokens[0].namespaces",
            "at least one right",
        ),
        (
            "tokens:\n" + token_entry_yaml("t", "a", {"x": ["read"]}, pii_clerance="true"),
            "tokens[0].pii_clerance",
            "Extra",
        ),
        (
            "tokens:\n" + token_entry_yaml("t", "a", {"x": ["read"]}, scopes="[team:x]"),
            "tokens[0].scopes",
            "workspace:",
        ),
        (
            "tokens:\n" + token_entry_yaml("t", "a", {"x": ["read"]}, pii_clearance="maybe"),
            "tokens[0].pii_clearance",
            "bool",
        ),
        ("tokens:\n  - principal: a\n    namespaces: {x: [read]}\n", "tokens[0].sha256", "Field required"),
        ("tokens:\n" + token_entry_yaml("t", "' '", {"x": ["read"]}), "tokens[0].principal", "blank"),
        (
            "tokens:\n"
            + token_entry_yaml("t", "a", {"x": ["read"]})
            + token_entry_yaml("t", "b", {"y": ["read"]}),
            "tokens[1].sha256",
            "duplicate of tokens[0]",
        ),
        ("version: 2\ntokens: []\n", "version", "Extra"),
    ],
)
def test_invalid_file_names_path_and_field(tmp_path: Path, text: str, field: str, message: str) -> None:
    path = tmp_path / "tokens.yaml"
    write_tokens_file(path, text)
    with pytest.raises(TokensFileError) as raised:
        read_tokens_file(path)
    error = raised.value
    assert error.path == path and error.field == field
    assert str(error).startswith(f"tokens file {path}: ")
    if field:
        assert f": {field}: " in str(error)
    assert message in str(error)


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(TokensFileError, match="does not exist"):
        read_tokens_file(tmp_path / "none.yaml")
    with pytest.raises(TokensFileError, match="does not exist"):
        TokenStore(tmp_path / "none.yaml")


@pytest.mark.parametrize("text", ["", "# only a comment\n", "tokens:\n", "tokens: []\n"])
def test_empty_file_has_no_tokens(tmp_path: Path, text: str) -> None:
    path = tmp_path / "tokens.yaml"
    write_tokens_file(path, text)
    assert load_tokens_file(path) == {}


def test_hash_is_normalised_to_lowercase(tmp_path: Path) -> None:
    path = tmp_path / "tokens.yaml"
    write_tokens_file(
        path,
        f"tokens:\n  - sha256: {hash_token('t').upper()}\n    principal: a\n    namespaces: {{x: [read]}}\n",
    )
    assert hash_token("t") in load_tokens_file(path)


# --------------------------------------------------------------------------------------------------
# Reloading


def test_store_reloads_a_changed_file_at_most_once_per_interval(tokens_file: Path) -> None:
    clock = FakeClock()
    store = TokenStore(tokens_file, check_interval=1.0, clock=clock)
    assert store.lookup(TOKEN_A) is not None and store.lookup("cbt_new") is None
    text = tokens_file.read_text() + token_entry_yaml("cbt_new", "carol", {"c": ["read"]})
    write_tokens_file(tokens_file, text)
    clock.now += 0.5
    assert store.lookup("cbt_new") is None  # not checked again before the interval
    clock.now += 0.6
    carol = store.lookup("cbt_new")
    assert carol is not None and carol.name == "carol" and store.reloads == 1
    clock.now += 5
    assert store.lookup("cbt_new") is not None and store.reloads == 1  # unchanged file: no reparse


def test_store_sees_an_atomic_replace_and_a_revocation(tokens_file: Path, tmp_path: Path) -> None:
    store = TokenStore(tokens_file, check_interval=0)
    replacement = tmp_path / "next.yaml"
    write_tokens_file(replacement, "tokens:\n" + token_entry_yaml(TOKEN_B, "bob", {"*": ["read"]}))
    os.replace(replacement, tokens_file)
    assert store.lookup(TOKEN_A) is None  # alice was removed: revoked without a restart
    assert store.lookup(TOKEN_B) is not None


def test_broken_edit_keeps_last_good_version_and_logs_once(
    tokens_file: Path, caplog: pytest.LogCaptureFixture
) -> None:
    store = TokenStore(tokens_file, check_interval=0)
    good = tokens_file.read_text()
    caplog.set_level(logging.ERROR, logger="memory.auth")
    write_tokens_file(tokens_file, good + "  - sha256: nothex\n")  # a half-finished edit
    assert store.lookup(TOKEN_A) is not None and store.lookup(TOKEN_B) is not None
    assert store.lookup(TOKEN_A) is not None  # checked again: same broken version, not logged again
    errors = [r for r in caplog.records if r.levelno == logging.ERROR]
    assert len(errors) == 1
    assert str(tokens_file) in errors[0].getMessage() and "tokens[2]" in errors[0].getMessage()
    assert "keeping the last good version" in errors[0].getMessage()
    write_tokens_file(tokens_file, good + token_entry_yaml("cbt_fixed", "dave", {"d": ["write"]}))
    assert store.lookup("cbt_fixed") is not None  # the corrected edit is picked up


def test_writable_by_others_is_warned_about(tokens_file: Path, caplog: pytest.LogCaptureFixture) -> None:
    os.chmod(tokens_file, 0o666)
    with caplog.at_level(logging.WARNING, logger="memory.auth"):
        TokenStore(tokens_file)
    assert any("writable by group or others" in r.getMessage() for r in caplog.records)


def test_vanished_file_keeps_last_good_version(tokens_file: Path, caplog: pytest.LogCaptureFixture) -> None:
    store = TokenStore(tokens_file, check_interval=0)
    tokens_file.unlink()
    with caplog.at_level(logging.ERROR, logger="memory.auth"):
        assert store.lookup(TOKEN_A) is not None
    assert any("keeping the last good version" in r.getMessage() for r in caplog.records)

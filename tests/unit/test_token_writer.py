"""memory_service_tools.token_writer: add_token (what ``cb token create`` calls), and the CLI's grant syntax."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from common.auth.principals import Right
from common.auth.tokens_file import TokensFileError
from common.auth.tokens_file import hash_token
from common.auth.tokens_file import load_tokens_file
from memory_service_tools.cli.token_commands import parse_namespace_grant
from memory_service_tools.token_writer import add_token
from tests.unit.tokens_file_samples import write_tokens_file


def test_add_token_creates_the_file_0600_with_the_hash_only(tmp_path: Path) -> None:
    path = tmp_path / "sub" / "tokens.yaml"
    token, entry = add_token(
        path,
        principal="ci",
        namespaces={"debian": [Right.WRITE, Right.READ], "*": [Right.READ]},
        scopes=["workspace:infra"],
        pii_clearance=True,
        note="loader",
    )
    assert token.startswith("cbt_")
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    text = path.read_text()
    assert token not in text and hash_token(token) in text
    assert entry.namespaces == {"debian": ["read", "write"], "*": ["read"]}
    principal = load_tokens_file(path)[hash_token(token)]
    assert principal.name == "ci" and principal.pii_clearance
    assert principal.allows("debian", Right.WRITE) and principal.allows("x", Right.READ)
    assert sorted(p.name for p in path.parent.iterdir()) == ["tokens.yaml"]  # no temp or lock files


def test_add_token_appends_keeping_comments_and_mode(tokens_file: Path) -> None:
    original = "# hand-written comment\n" + tokens_file.read_text()
    write_tokens_file(tokens_file, original)
    os.chmod(tokens_file, 0o640)
    token, _ = add_token(tokens_file, principal="carol", namespaces={"c": [Right.READ]})
    text = tokens_file.read_text()
    assert text.startswith(original)
    assert stat.S_IMODE(os.stat(tokens_file).st_mode) == 0o640
    names = [p.name for p in load_tokens_file(tokens_file).values()]
    assert names == ["alice", "bob", "carol"]
    assert hash_token(token) in load_tokens_file(tokens_file)


@pytest.mark.parametrize("text", ["tokens: []\n", "# nothing yet\n", "tokens:\n"])
def test_add_token_to_a_file_without_entries(tmp_path: Path, text: str) -> None:
    path = tmp_path / "tokens.yaml"
    write_tokens_file(path, text)
    token, _ = add_token(path, principal="first", namespaces={"n": [Right.ADMIN]})
    principals = load_tokens_file(path)
    assert list(principals) == [hash_token(token)]


def test_add_token_refuses_a_broken_file_and_leaves_it_untouched(tmp_path: Path) -> None:
    path = tmp_path / "tokens.yaml"
    write_tokens_file(path, "tokens: [oops\n")
    with pytest.raises(TokensFileError, match="not valid YAML"):
        add_token(path, principal="x", namespaces={"n": [Right.READ]})
    assert path.read_text() == "tokens: [oops\n"


def test_add_token_validates_the_entry(tmp_path: Path) -> None:
    with pytest.raises(TokensFileError, match="scopes"):
        add_token(tmp_path / "t.yaml", principal="x", namespaces={"n": [Right.READ]}, scopes=["team:x"])
    assert not (tmp_path / "t.yaml").exists()


def test_cli_namespace_grant_parsing() -> None:
    assert parse_namespace_grant("debian:read,write") == ("debian", ["read", "write"])
    assert parse_namespace_grant("*:admin") == ("*", ["admin"])
    assert parse_namespace_grant("a:b:read") == ("a:b", ["read"])
    for bad in ("debian", ":read", "debian:", "debian:owner"):
        with pytest.raises(ValueError):
            parse_namespace_grant(bad)

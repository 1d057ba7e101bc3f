"""Tokens-file samples shared by the auth unit tests: two tokens and their YAML entries."""

from __future__ import annotations

from pathlib import Path

from common.auth.tokens_file import hash_token

TOKEN_A = "cbt_alice-token"
TOKEN_B = "cbt_bob-token"


def token_entry_yaml(token: str, principal: str, namespaces: dict[str, list[str]], **extra: object) -> str:
    """One ``tokens:`` list item, indented as under ``tokens:``, for ``token`` (its hash is written)."""
    lines = [f"  - sha256: {hash_token(token)}", f"    principal: {principal}", "    namespaces:"]
    for namespace, rights in namespaces.items():
        lines.append(f"      {namespace!r}: [{', '.join(rights)}]")
    for key, value in extra.items():
        lines.append(f"    {key}: {value}")
    return "\n".join(lines) + "\n"


def write_tokens_file(path: Path, text: str) -> None:
    path.write_text(text, encoding="utf-8")


def write_sample_tokens_file(path: Path) -> Path:
    """alice (read+write on team-a, scope workspace:infra, PII clearance) and bob (read on "*")."""
    write_tokens_file(
        path,
        "tokens:\n"
        + token_entry_yaml(
            TOKEN_A, "alice", {"team-a": ["read", "write"]}, scopes="[workspace:infra]", pii_clearance="true"
        )
        + token_entry_yaml(TOKEN_B, "bob", {"*": ["read"]}),
    )
    return path

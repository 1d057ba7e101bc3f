"""The tokens file: its schema, reading it, and the reloading `TokenStore` (docs/how-to/tokens-and-scopes.md).

The tokens file (YAML) holds token *hashes* only, never tokens::

    tokens:
      - sha256: 5f1c...e9            # sha256 hex of the token (`hash_token`)
        principal: ci-loader
        namespaces:                  # namespace -> rights among read / write / admin
          debian: [read, write]
          "*": [read]                # "*" grants every namespace
        scopes: [workspace:infra, principal:ci-loader]   # visibility scopes the caller may see
        pii_clearance: false         # unmasked personal data
        organization: acme           # optional memory scope: tenant, environment, user;
        environment: production      #   all three or none (MemoryService / MemoryQueryService)
        user: "8821"
        created: "2024-05-01T10:00:00Z"                   # optional, informative
        note: loads the Debian corpus                     # optional, informative

Tokens are random URL-safe strings prefixed ``cbt_`` (`new_token`); ``cb token create`` prints one once
and appends its hash here (`memory_service_tools.token_writer.add_token`). Each entry becomes a `Principal`
(`TokenEntry.to_principal`).

`TokenStore` loads the file with a schema check (`TokensFileError` names the file and the field) and
picks up changes without a restart: at most once per second a cheap ``stat`` compares modification
time, size and inode; a changed file is parsed again, and a broken edit keeps the last good version
(logged as an error).
"""

from __future__ import annotations

import datetime as dt
import hashlib
import logging
import os
import re
import secrets
import threading
import time
import types
from collections.abc import Callable
from collections.abc import Mapping
from collections.abc import Sequence
from pathlib import Path
from typing import Any
from typing import Literal

import yaml
from pydantic import BaseModel
from pydantic import ConfigDict
from pydantic import Field
from pydantic import ValidationError
from pydantic import field_validator
from pydantic import model_validator

from common.auth.principals import Principal
from common.auth.principals import Right
from common.kernel.memory_names import ENVIRONMENTS
from common.kernel.memory_names import ORGANIZATION_PATTERN
from common.kernel.memory_names import USER_PATTERN

__all__ = [
    "TOKEN_PREFIX",
    "TokenEntry",
    "TokenStore",
    "TokensFile",
    "TokensFileError",
    "hash_token",
    "load_tokens_file",
    "new_token",
    "parse_tokens_text",
    "read_tokens_file",
    "validate_token_entry",
]

log = logging.getLogger("memory.auth")

TOKEN_PREFIX = "cbt_"
_SHA256_HEX = re.compile(r"^[0-9a-f]{64}$")
_SCOPE = re.compile(r"^(workspace|principal):\S+$")


def new_token() -> str:
    """A fresh random token: ``cbt_`` + 43 URL-safe characters (256 bits from `secrets`)."""
    return TOKEN_PREFIX + secrets.token_urlsafe(32)


def hash_token(token: str) -> str:
    """sha256 hex (64 lowercase characters) of the token's UTF-8 bytes: what the tokens file stores."""
    return hashlib.sha256(token.encode("utf-8")).hexdigest()


RightName = Literal["read", "write", "admin"]


class TokenEntry(BaseModel):
    """One token of the tokens file (see the module docstring)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    sha256: str = Field(description="sha256 hex of the token")
    principal: str = Field(min_length=1)
    namespaces: dict[str, list[RightName]] = Field(description="namespace or '*' -> rights")
    scopes: list[str] = Field(default_factory=list)
    pii_clearance: bool = False
    organization: str | None = None
    environment: str | None = None
    user: str | None = None
    created: str | None = None
    note: str | None = None

    @field_validator("organization")
    @classmethod
    def _organization(cls, value: str | None) -> str | None:
        if value is not None and not ORGANIZATION_PATTERN.match(value):
            raise ValueError(f"expected {ORGANIZATION_PATTERN.pattern}")
        return value

    @field_validator("environment")
    @classmethod
    def _environment(cls, value: str | None) -> str | None:
        if value is not None and value not in ENVIRONMENTS:
            raise ValueError(f"expected one of {', '.join(ENVIRONMENTS)}")
        return value

    @field_validator("user", mode="before")
    @classmethod
    def _user(cls, value: Any) -> Any:
        if isinstance(value, int) and not isinstance(value, bool):  # YAML reads `user: 8821` as a number
            value = str(value)
        if value is not None and (not isinstance(value, str) or not USER_PATTERN.match(value)):
            raise ValueError(f"expected {USER_PATTERN.pattern}")
        return value

    @model_validator(mode="after")
    def _memory_scope_complete(self) -> TokenEntry:
        given = [self.organization, self.environment, self.user]
        if any(v is not None for v in given) and not all(v is not None for v in given):
            raise ValueError("organization, environment and user go together (the memory scope)")
        return self

    @field_validator("sha256", mode="before")
    @classmethod
    def _sha256(cls, value: Any) -> Any:
        if isinstance(value, str):
            value = value.strip().lower()
            if not _SHA256_HEX.match(value):
                raise ValueError("expected the sha256 hex of the token (64 hexadecimal characters)")
        return value

    @field_validator("principal")
    @classmethod
    def _principal(cls, value: str) -> str:
        if not value.strip():
            raise ValueError("must not be blank")
        if value.strip().startswith("memory-user/"):  # its principal: scope would be a memory owner scope
            raise ValueError("names starting with 'memory-user/' are reserved for memory owners")
        return value.strip()

    @field_validator("namespaces")
    @classmethod
    def _namespaces(cls, value: dict[str, list[str]]) -> dict[str, list[str]]:
        for namespace, rights in value.items():
            if not namespace.strip():
                raise ValueError("a namespace name must not be blank")
            if not rights:
                raise ValueError(f"namespace {namespace!r}: list at least one right (read, write, admin)")
        return value

    @field_validator("scopes")
    @classmethod
    def _scopes(cls, value: list[str]) -> list[str]:
        for scope in value:
            if not _SCOPE.match(scope):
                raise ValueError(f"scope {scope!r}: expected workspace:<name> or principal:<name>")
        return value

    @field_validator("created", mode="before")
    @classmethod
    def _created(cls, value: Any) -> Any:
        if isinstance(value, (dt.date, dt.datetime)):  # YAML parses unquoted timestamps
            return value.isoformat()
        return value

    def to_principal(self) -> Principal:
        """The `Principal` this entry grants (highest right per namespace)."""
        rights = {ns: max(Right.parse(r) for r in listed) for ns, listed in self.namespaces.items()}
        return Principal(
            name=self.principal,
            rights=types.MappingProxyType(rights),
            allowed_scopes=frozenset(self.scopes),
            pii_clearance=self.pii_clearance,
            organization_id=self.organization or "",
            environment=self.environment or "",
            user_id=self.user or "",
        )


class TokensFile(BaseModel):
    """The whole tokens file: ``{tokens: [TokenEntry, ...]}``; hashes must be unique."""

    model_config = ConfigDict(extra="forbid")

    tokens: list[TokenEntry] = Field(default_factory=list)

    @field_validator("tokens", mode="before")
    @classmethod
    def _no_tokens(cls, value: Any) -> Any:
        return [] if value is None else value  # a bare `tokens:` line


class TokensFileError(ValueError):
    """The tokens file cannot be read or does not match the schema.

    Attributes:
        path: the file.
        field: dotted path of the offending field (e.g. ``tokens[2].namespaces.team``), ``""`` when
            the whole file is at fault.
    """

    def __init__(self, path: Path | str, message: str, *, field: str = "") -> None:
        where = f"tokens file {path}"
        super().__init__(f"{where}: {field}: {message}" if field else f"{where}: {message}")
        self.path = Path(path)
        self.field = field


def _location(loc: Sequence[int | str]) -> str:
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


def parse_tokens_text(text: str, path: Path | str) -> TokensFile:
    """Parses and validates the text of a tokens file (an empty document holds no tokens).

    Raises:
        TokensFileError: not YAML, not the schema (first violation named by its field), or a
            duplicate hash.
    """
    try:
        document = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
        problem = getattr(exc, "problem", None) or str(exc)
        raise TokensFileError(path, f"not valid YAML{where}: {problem}") from exc
    if document is None:
        document = {}
    if not isinstance(document, dict):
        raise TokensFileError(path, f"expected a mapping with a 'tokens' list, got {type(document).__name__}")
    try:
        parsed = TokensFile.model_validate(document)
    except ValidationError as exc:
        first = exc.errors()[0]
        message = str(first["msg"])
        more = exc.error_count() - 1
        if more:
            message += f" (and {more} more error{'s' if more > 1 else ''})"
        raise TokensFileError(path, message, field=_location(first["loc"])) from exc
    seen: dict[str, int] = {}
    for index, entry in enumerate(parsed.tokens):
        if entry.sha256 in seen:
            raise TokensFileError(
                path, f"duplicate of tokens[{seen[entry.sha256]}].sha256", field=f"tokens[{index}].sha256"
            )
        seen[entry.sha256] = index
    return parsed


def validate_token_entry(fields: Mapping[str, Any], path: Path | str) -> TokenEntry:
    """One entry checked against the schema, before it is written to the tokens file at ``path``.

    Raises:
        TokensFileError: the first violation, named by its field (e.g. ``scopes[0]``).
    """
    try:
        return TokenEntry.model_validate(dict(fields))
    except ValidationError as exc:
        first = exc.errors()[0]
        raise TokensFileError(path, str(first["msg"]), field=_location(first["loc"])) from exc


def read_tokens_file(path: Path | str) -> TokensFile:
    """Reads and validates a tokens file.

    Raises:
        TokensFileError: missing, unreadable, not UTF-8, or invalid (see `parse_tokens_text`).
    """
    try:
        text = Path(path).read_text(encoding="utf-8")
    except FileNotFoundError as exc:
        raise TokensFileError(path, "does not exist (create one with `cb token create`)") from exc
    except (OSError, UnicodeDecodeError) as exc:
        raise TokensFileError(path, f"cannot be read: {exc}") from exc
    return parse_tokens_text(text, path)


def load_tokens_file(path: Path | str) -> dict[str, Principal]:
    """Token hash -> `Principal` of a tokens file.

    Raises:
        TokensFileError: see `read_tokens_file`.
    """
    return {entry.sha256: entry.to_principal() for entry in read_tokens_file(path).tokens}


# --------------------------------------------------------------------------------------------------
# Reloading store


_Signature = tuple[int, int, int, int]


def _signature(path: Path) -> _Signature:
    st = os.stat(path)  # follows symlinks: a Kubernetes Secret volume swaps its ..data link
    return (st.st_mtime_ns, st.st_size, st.st_ino, st.st_dev)


class TokenStore:
    """The tokens of a file, reloaded when the file changes.

    ``lookup`` stats the file at most once per ``check_interval`` seconds; when the modification time,
    size or inode changed it parses the file again. A file that became invalid (or vanished) keeps the
    last good tokens in force and logs one error per broken version. Thread-safe.

    Args:
        path: the tokens file.
        check_interval: seconds between two stats (0 = on every lookup).
        clock: monotonic clock in seconds (tests pass their own).

    Raises:
        TokensFileError: the file is missing or invalid at construction.
    """

    def __init__(
        self,
        path: Path | str,
        *,
        check_interval: float = 1.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.path = Path(path)
        self._check_interval = check_interval
        self._clock = clock
        self._lock = threading.Lock()
        try:
            signature = _signature(self.path)
        except FileNotFoundError as exc:
            raise TokensFileError(self.path, "does not exist (create one with `cb token create`)") from exc
        except OSError as exc:
            raise TokensFileError(self.path, f"cannot be read: {exc}") from exc
        self._tokens = load_tokens_file(self.path)
        mode = os.stat(self.path).st_mode
        if mode & 0o022:
            log.warning(
                "tokens file %s is writable by group or others (mode %o): anyone who can write it can "
                "grant themselves access; chmod 0600 it",
                self.path,
                mode & 0o777,
            )
        self._loaded: _Signature | None = signature
        self._failed: _Signature | str | None = None
        self._next_check = clock() + check_interval
        self.reloads = 0

    def __len__(self) -> int:
        return len(self._tokens)

    def lookup(self, token: str) -> Principal | None:
        """The principal of ``token`` (after a reload check), or None for an unknown token."""
        self.refresh()
        return self._tokens.get(hash_token(token))

    def refresh(self, *, force: bool = False) -> bool:
        """Reloads the file if it changed (checked at most once per interval unless ``force``).

        Returns:
            True when a new version was loaded.
        """
        now = self._clock()
        if not force and now < self._next_check:
            return False
        with self._lock:
            if not force and now < self._next_check:
                return False
            self._next_check = now + self._check_interval
            try:
                signature = _signature(self.path)
            except OSError as exc:
                if self._failed != str(exc):
                    self._failed = str(exc)
                    log.error("tokens file %s: %s; keeping the last good version", self.path, exc)
                return False
            if signature == self._loaded or signature == self._failed:
                return False
            try:
                tokens = load_tokens_file(self.path)
            except TokensFileError as exc:
                self._failed = signature
                log.error("%s; keeping the last good version (%d tokens)", exc, len(self._tokens))
                return False
            self._tokens = tokens
            self._loaded = signature
            self._failed = None
            self.reloads += 1
            log.info("tokens file %s reloaded: %d tokens", self.path, len(tokens))
            return True

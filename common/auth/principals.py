"""Bearer-token authentication and namespace authorisation (DESIGN §8; transport-free).

The tokens file (YAML) holds token *hashes* only, never tokens::

    tokens:
      - sha256: 5f1c...e9            # sha256 hex of the token (`hash_token`)
        principal: ci-loader
        namespaces:                  # namespace -> rights among read / write / admin
          debian: [read, write]
          "*": [read]                # "*" grants every namespace
        scopes: [workspace:infra, principal:ci-loader]   # visibility scopes the caller may see
        pii_clearance: false         # unmasked personal data
        created: "2024-05-01T10:00:00Z"                   # optional, informative
        note: loads the Debian corpus                     # optional, informative

Rights imply one another: admin implies write, write implies read. Tokens are random URL-safe strings
prefixed ``cbt_`` (`new_token`); ``cb token create`` prints one once and appends its hash here.

`TokenStore` loads the file with a schema check (`TokensFileError` names the file and the field) and
picks up changes without a restart: at most once per second a cheap ``stat`` compares modification
time, size and inode; a changed file is parsed again, and a broken edit keeps the last good version
(logged as an error). `METHOD_RIGHTS` says which right each RPC needs; a method missing from it is
denied (fail closed). The interceptor in `common.server` authenticates, authorises and exposes the
caller to handlers as `current_principal()`.
"""

from __future__ import annotations

import contextlib
import contextvars
import datetime as dt
import enum
import fcntl
import hashlib
import ipaddress
import logging
import os
import re
import secrets
import tempfile
import threading
import time
import types
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import yaml
from google.protobuf.descriptor import Descriptor, FieldDescriptor
from google.protobuf.message import Message
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from common.kernel.errors import PermissionDenied, Unauthenticated

__all__ = [
    "ALL_NAMESPACES",
    "GLOBAL_METHODS",
    "METHOD_RIGHTS",
    "OPEN_METHOD_PREFIXES",
    "TOKEN_PREFIX",
    "Authenticator",
    "Principal",
    "Right",
    "TokenEntry",
    "TokenStore",
    "TokensFile",
    "TokensFileError",
    "add_token",
    "authorize",
    "bearer_token",
    "current_principal",
    "development_principal",
    "hash_token",
    "is_loopback_address",
    "load_tokens_file",
    "new_token",
    "principal_context",
    "read_tokens_file",
    "request_namespaces",
]

log = logging.getLogger("memory.auth")

TOKEN_PREFIX = "cbt_"
ALL_NAMESPACES = "*"
AUTHORIZATION_METADATA_KEY = "authorization"
_SHA256_HEX = re.compile(r"^[0-9a-f]{64}$")
_SCOPE = re.compile(r"^(workspace|principal):\S+$")


class Right(enum.IntEnum):
    """A right on a namespace; a higher right implies every lower one (admin > write > read)."""

    READ = 1
    WRITE = 2
    ADMIN = 3

    @property
    def label(self) -> str:
        """``"read"``, ``"write"`` or ``"admin"``."""
        return self.name.lower()

    @classmethod
    def parse(cls, text: str) -> Right:
        """``"read"`` / ``"write"`` / ``"admin"`` (any case) -> `Right`.

        Raises:
            ValueError: any other text.
        """
        try:
            return cls[text.strip().upper()]
        except KeyError:
            raise ValueError(f"unknown right {text!r}: expected read, write or admin") from None


# --------------------------------------------------------------------------------------------------
# Which right each RPC needs

_READ, _WRITE, _ADMIN = Right.READ, Right.WRITE, Right.ADMIN

METHOD_RIGHTS: Mapping[str, Right] = types.MappingProxyType(
    {
        # ingest_service (write side): writes need write, pack administration needs admin.
        "/memory.v1.ObservationService/RecordObservations": _WRITE,
        "/memory.v1.ObservationService/RedactObservation": _WRITE,
        "/memory.v1.ObservationService/PurgeObservation": _WRITE,
        "/memory.v1.FactService/AssertFacts": _WRITE,
        "/memory.v1.FactService/CloseFact": _WRITE,
        "/memory.v1.DocumentService/Retain": _WRITE,
        "/memory.v1.DocumentService/PutChunks": _WRITE,
        "/memory.v1.DocumentService/DeleteNode": _WRITE,
        "/memory.v1.SnapshotService/Reconcile": _WRITE,
        # Client stream: authorised on its header (the first message), see common.server._authorized_stream.
        "/memory.v1.SnapshotService/ReconcileStream": _WRITE,
        "/memory.v1.DomainPackService/RegisterPackage": _ADMIN,
        "/memory.v1.DomainPackService/SetNamespaceKinds": _ADMIN,
        # Reads the namespace's configuration only: a reader may know which kinds it has.
        "/memory.v1.DomainPackService/GetNamespaceKinds": _READ,
        "/memory.v1.DomainPackService/GetPackage": _READ,
        "/memory.v1.DomainPackService/ListPackages": _READ,
        "/memory.v1.AuditService/RecordAuditEvent": _WRITE,
        # query_service (read side).
        "/memory.v1.RetrievalService/Search": _READ,
        "/memory.v1.ContextService/CompileContext": _READ,
        "/memory.v1.ContextService/CompileTypedContext": _READ,
        "/memory.v1.SourceService/GetSource": _READ,
        "/memory.v1.FactQueryService/ListFacts": _READ,
        "/memory.v1.ObservationQueryService/GetObservation": _READ,
        "/memory.v1.TraceService/GetTrace": _READ,
    }
)
"""Full gRPC method name -> the right it needs on the request's namespace(s). Absent = denied."""

GLOBAL_METHODS: frozenset[str] = frozenset(
    {
        "/memory.v1.DomainPackService/RegisterPackage",
        "/memory.v1.DomainPackService/GetPackage",
        "/memory.v1.DomainPackService/ListPackages",
    }
)
"""Methods whose requests name no namespace (packages are global): the right is needed on ``"*"``."""

OPEN_METHOD_PREFIXES: tuple[str, ...] = ("/grpc.health.v1.Health/", "/grpc.reflection.")
"""Methods that need no token: health checks (probes) and server reflection."""


def is_open_method(full_method: str) -> bool:
    """True for grpc.health.v1 and server reflection, which stay open without a token."""
    return full_method.startswith(OPEN_METHOD_PREFIXES)


# --------------------------------------------------------------------------------------------------
# Principal


@dataclass(frozen=True)
class Principal:
    """Who is calling and what they may do.

    Attributes:
        name: the principal of the token (e.g. ``"ci-loader"``).
        rights: namespace (or ``"*"``) -> highest right granted; use `right_in` / `allows`.
        allowed_scopes: visibility scopes (``workspace:x``, ``principal:y``) the caller may see.
        pii_clearance: may receive personal data unmasked.
        authenticated: False only for the development principal (auth off, loopback only).
    """

    name: str
    rights: Mapping[str, Right] = field(default_factory=dict)
    allowed_scopes: frozenset[str] = frozenset()
    pii_clearance: bool = False
    authenticated: bool = True

    def right_in(self, namespace: str) -> Right | None:
        """Highest right on ``namespace`` (its own entry or ``"*"``), None when nothing is granted."""
        granted = [r for r in (self.rights.get(namespace), self.rights.get(ALL_NAMESPACES)) if r is not None]
        return max(granted) if granted else None

    def allows(self, namespace: str, right: Right) -> bool:
        """True when ``right`` (or a higher one) is granted on ``namespace``."""
        held = self.right_in(namespace)
        return held is not None and held >= right

    def allows_everywhere(self, right: Right) -> bool:
        """True when ``right`` is granted on ``"*"`` (needed by requests that name no namespace)."""
        held = self.rights.get(ALL_NAMESPACES)
        return held is not None and held >= right

    def rights_in(self, namespace: str) -> frozenset[Right]:
        """Every right held on ``namespace``, implied ones included (admin -> {read, write, admin})."""
        held = self.right_in(namespace)
        return frozenset(r for r in Right if held is not None and r <= held)


def development_principal() -> Principal:
    """The caller in development mode (auth off, loopback only): every right, no scopes, no PII clearance."""
    return Principal(
        name="development",
        rights=types.MappingProxyType({ALL_NAMESPACES: Right.ADMIN}),
        authenticated=False,
    )


_principal: contextvars.ContextVar[Principal | None] = contextvars.ContextVar(
    "memory_principal", default=None
)


def current_principal() -> Principal | None:
    """The caller of the RPC being handled on this thread (None outside an RPC)."""
    return _principal.get()


@contextlib.contextmanager
def principal_context(principal: Principal) -> Iterator[Principal]:
    """Makes ``principal`` the `current_principal()` for the duration of the block."""
    token = _principal.set(principal)
    try:
        yield principal
    finally:
        _principal.reset(token)


# --------------------------------------------------------------------------------------------------
# Tokens file schema


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
    created: str | None = None
    note: str | None = None

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


# --------------------------------------------------------------------------------------------------
# Authentication and authorisation (called by the interceptor in common.grpc.server)


def bearer_token(metadata: Iterable[tuple[str, str | bytes]] | None) -> str:
    """The token of the single ``authorization: Bearer <token>`` metadata entry.

    Raises:
        Unauthenticated: no such entry, several of them, or not the Bearer scheme.
    """
    values = [v for k, v in metadata or () if k.lower() == AUTHORIZATION_METADATA_KEY]
    if not values:
        raise Unauthenticated(
            "missing bearer token: send metadata 'authorization: Bearer <token>'", reason="TOKEN_MISSING"
        )
    if len(values) > 1:
        raise Unauthenticated("more than one authorization metadata entry", reason="TOKEN_INVALID")
    value = values[0]
    if isinstance(value, bytes):
        value = value.decode("utf-8", "replace")
    scheme, _, token = value.strip().partition(" ")
    token = token.strip()
    if scheme.lower() != "bearer" or not token:
        raise Unauthenticated("authorization metadata must be 'Bearer <token>'", reason="TOKEN_INVALID")
    return token


class Authenticator:
    """Turns call metadata into a `Principal`: tokens from a `TokenStore`, or development mode.

    Args:
        store: the tokens; None means development mode (no check, `development_principal()`).
    """

    def __init__(self, store: TokenStore | None) -> None:
        self.store = store
        self._development = development_principal()

    @property
    def enabled(self) -> bool:
        """True when tokens are checked."""
        return self.store is not None

    def authenticate(self, metadata: Iterable[tuple[str, str | bytes]] | None) -> Principal:
        """The caller of an RPC.

        Raises:
            Unauthenticated: tokens mode and no, malformed or unknown token.
        """
        if self.store is None:
            return self._development
        principal = self.store.lookup(bearer_token(metadata))
        if principal is None:
            raise Unauthenticated("unknown or revoked token", reason="TOKEN_INVALID")
        return principal


def _namespace_holder(descriptor: Descriptor | Any) -> bool:
    field_ = descriptor.fields_by_name.get("namespace")
    return field_ is not None and field_.type == FieldDescriptor.TYPE_STRING and not field_.is_repeated


def names_namespaces(descriptor: Descriptor | Any) -> bool:
    """True when requests of this type name their namespace(s) (see `request_namespaces`)."""
    if _namespace_holder(descriptor):
        return True
    return any(f.message_type is not None and _namespace_holder(f.message_type) for f in descriptor.fields)


def request_namespaces(request: Message) -> frozenset[str] | None:
    """The namespaces a request touches.

    A request with a ``namespace`` field touches that namespace (an empty name included: only a
    ``"*"`` grant covers it, and the handler then rejects it as invalid). A request without one
    touches the namespaces of its message fields that have one (e.g. every
    ``RecordObservationsRequest.observations[].namespace``).

    Returns:
        The namespaces, or None when the request names none (then only a ``"*"`` grant covers it).
    """
    message: Any = request  # generated types are not known statically here
    descriptor = message.DESCRIPTOR
    if _namespace_holder(descriptor):
        return frozenset({message.namespace})
    found: set[str] = set()
    for field_ in descriptor.fields:
        if field_.message_type is None or not _namespace_holder(field_.message_type):
            continue
        value = getattr(message, field_.name)
        if field_.is_repeated:
            found.update(item.namespace for item in value)
        elif message.HasField(field_.name):
            found.add(value.namespace)
    return frozenset(found) if found else None


def authorize(principal: Principal, full_method: str, request: Message) -> None:
    """Checks that ``principal`` holds the right ``full_method`` needs on every namespace of ``request``.

    Raises:
        PermissionDenied: the method is not in `METHOD_RIGHTS` (fail closed), or a namespace (or
            ``"*"`` for a request naming none) lacks the right.
    """
    needed = METHOD_RIGHTS.get(full_method)
    if needed is None:
        raise PermissionDenied(f"method {full_method} is not open to any token", reason="METHOD_NOT_ALLOWED")
    namespaces = None if full_method in GLOBAL_METHODS else request_namespaces(request)
    if namespaces is None:
        if not principal.allows_everywhere(needed):
            raise PermissionDenied(
                f"principal {principal.name!r} lacks the {needed.label} right on every namespace ('*') "
                f"that {full_method} needs",
                reason="NAMESPACE_NOT_GRANTED",
            )
        return
    for namespace in sorted(namespaces):
        if not principal.allows(namespace, needed):
            raise PermissionDenied(
                f"principal {principal.name!r} lacks the {needed.label} right on namespace {namespace!r}",
                reason="NAMESPACE_NOT_GRANTED",
            )


# --------------------------------------------------------------------------------------------------
# Loopback check (development mode binds only there)


def is_loopback_address(address: str) -> bool:
    """True when a bind address ``host:port`` reaches this machine only.

    Loopback: ``127.0.0.0/8``, ``::1`` (``[::1]:port``), ``localhost``, and ``unix:`` sockets.
    Anything else (``0.0.0.0``, ``[::]``, an empty host, other host names) is not: names are not
    resolved, so an unknown name counts as non-loopback (fail closed).
    """
    text = address.strip()
    if text.startswith(("unix:", "unix-abstract:")):
        return True
    if text.startswith("["):
        host = text[1 : text.find("]")] if "]" in text else ""
    elif text.count(":") == 1:
        host = text.partition(":")[0]
    else:
        host = text  # no port, or a bare IPv6 literal
    host = host.strip().lower()
    if host in ("localhost", "localhost.", "ip6-localhost"):
        return True
    try:
        ip = ipaddress.ip_address(host)
    except ValueError:
        return False
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        return ip.ipv4_mapped.is_loopback
    return ip.is_loopback


# --------------------------------------------------------------------------------------------------
# Writing the tokens file (cb token create)

_FILE_HEADER = (
    "# memory-service tokens: sha256 hashes of bearer tokens, never the tokens themselves.\n"
    "# Edited by `cb token create`; changes are picked up by running services within a second.\n"
)


@contextlib.contextmanager
def _file_lock(path: Path) -> Iterator[None]:
    """Exclusive lock on the file's folder (flock on a directory: no lock file left behind)."""
    fd = os.open(path.parent, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def _write_atomically(path: Path, text: str, mode: int) -> None:
    fd, temporary = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        os.fchmod(fd, mode)
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temporary, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        raise


def add_token(
    path: Path | str,
    *,
    principal: str,
    namespaces: Mapping[str, Sequence[Right]],
    scopes: Sequence[str] = (),
    pii_clearance: bool = False,
    note: str | None = None,
) -> tuple[str, TokenEntry]:
    """Creates a token and appends its hash to the tokens file (created with mode 0600 if missing).

    The file is replaced atomically (a running service never reads half of it); an existing file
    keeps its mode and its comments (the entry is appended as text; only when that text would not
    parse as intended is the whole file re-rendered). Concurrent callers are serialised with a lock
    on its folder.

    Args:
        path: the tokens file.
        principal: name of the caller the token stands for.
        namespaces: namespace (or ``"*"``) -> rights.
        scopes: allowed visibility scopes (``workspace:x``, ``principal:y``).
        pii_clearance: may receive personal data unmasked.
        note: free text kept in the file.

    Returns:
        ``(token, entry)``: the token (shown once, never stored) and the entry written.

    Raises:
        TokensFileError: the existing file is invalid (it is left untouched), or the entry is invalid.
    """
    target = Path(path)
    token = new_token()
    raw = {
        "sha256": hash_token(token),
        "principal": principal,
        "namespaces": {ns: [r.label for r in sorted(set(rights))] for ns, rights in namespaces.items()},
        "scopes": list(scopes),
        "pii_clearance": pii_clearance,
        "created": dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
    }
    if note:
        raw["note"] = note
    try:
        entry = TokenEntry.model_validate(raw)
    except ValidationError as exc:
        first = exc.errors()[0]
        raise TokensFileError(target, str(first["msg"]), field=_location(first["loc"])) from exc
    entry_dict = entry.model_dump(exclude_none=True)
    target.parent.mkdir(parents=True, exist_ok=True)
    with _file_lock(target):
        if target.exists():
            old_text = target.read_text(encoding="utf-8")
            old = parse_tokens_text(old_text, target)
            mode = os.stat(target).st_mode & 0o777
        else:
            old_text, old, mode = "", TokensFile(), 0o600
        block = yaml.safe_dump([entry_dict], sort_keys=False, allow_unicode=True, default_flow_style=False)
        indented = "".join("  " + line for line in block.splitlines(keepends=True))
        if old_text.strip():
            new_text = old_text if old_text.endswith("\n") else old_text + "\n"
            if not old.tokens and "tokens" not in (yaml.safe_load(old_text) or {}):
                new_text += "tokens:\n"
            new_text += indented
        else:
            new_text = _FILE_HEADER + "tokens:\n" + indented
        expected = [*old.tokens, entry]
        try:
            appended_ok = parse_tokens_text(new_text, target).tokens == expected
        except TokensFileError:
            appended_ok = False
        if not appended_ok:  # e.g. `tokens: []` in flow style: render the whole document
            document = {"tokens": [t.model_dump(exclude_none=True) for t in expected]}
            new_text = _FILE_HEADER + yaml.safe_dump(
                document, sort_keys=False, allow_unicode=True, default_flow_style=False
            )
        _write_atomically(target, new_text, mode)
    return token, entry

"""common.auth: tokens file schema, hashing, rights, reloading, the method table, and the interceptor.

The interceptor tests run a tiny SourceService in-process behind `build_server` over a real channel
(no database); the real services are covered in tests/e2e/test_auth.py.
"""

from __future__ import annotations

import hashlib
import importlib
import logging
import os
import pkgutil
import stat
from collections.abc import Iterator
from pathlib import Path

import grpc
import memory.v1
import pytest
from memory.v1 import (
    observation_service_pb2,
    source_service_pb2,
    source_service_pb2_grpc,
)

from common.auth.principals import (
    GLOBAL_METHODS,
    METHOD_RIGHTS,
    Authenticator,
    Principal,
    Right,
    TokensFileError,
    TokenStore,
    add_token,
    authorize,
    bearer_token,
    current_principal,
    development_principal,
    hash_token,
    is_loopback_address,
    load_tokens_file,
    names_namespaces,
    new_token,
    read_tokens_file,
    request_namespaces,
)
from common.tooling.cli.token_commands import parse_namespace_grant
from common.tooling.client import ClientSecurity, make_channel
from common.kernel.config import Settings
from common.kernel.errors import PermissionDenied, Unauthenticated
from common.grpc.server import ServerSetupError, ServiceHost, build_server
from query_service.query_servicers import SERVICE_NAMES as QUERY_SERVICE_NAMES

TOKEN_A = "cbt_alice-token"
TOKEN_B = "cbt_bob-token"


def _entry(token: str, principal: str, namespaces: dict[str, list[str]], **extra: object) -> str:
    lines = [f"  - sha256: {hash_token(token)}", f"    principal: {principal}", "    namespaces:"]
    for namespace, rights in namespaces.items():
        lines.append(f"      {namespace!r}: [{', '.join(rights)}]")
    for key, value in extra.items():
        lines.append(f"    {key}: {value}")
    return "\n".join(lines) + "\n"


def _write(path: Path, text: str) -> None:
    path.write_text(text, encoding="utf-8")


@pytest.fixture
def tokens_file(tmp_path: Path) -> Path:
    path = tmp_path / "tokens.yaml"
    _write(
        path,
        "tokens:\n"
        + _entry(
            TOKEN_A, "alice", {"team-a": ["read", "write"]}, scopes="[workspace:infra]", pii_clearance="true"
        )
        + _entry(TOKEN_B, "bob", {"*": ["read"]}),
    )
    return path


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


# --------------------------------------------------------------------------------------------------
# Rights


def test_rights_imply_lower_rights() -> None:
    principal = Principal(
        name="p", rights={"a": Right.ADMIN, "w": Right.WRITE, "r": Right.READ}, allowed_scopes=frozenset()
    )
    assert principal.rights_in("a") == {Right.READ, Right.WRITE, Right.ADMIN}
    assert principal.rights_in("w") == {Right.READ, Right.WRITE}
    assert principal.rights_in("r") == {Right.READ}
    assert principal.rights_in("other") == frozenset()
    assert principal.allows("a", Right.READ) and principal.allows("w", Right.READ)
    assert not principal.allows("r", Right.WRITE) and not principal.allows("w", Right.ADMIN)
    assert not principal.allows_everywhere(Right.READ)


def test_star_grants_every_namespace_and_combines_with_own_entries() -> None:
    principal = Principal(name="p", rights={"*": Right.READ, "mine": Right.WRITE})
    assert principal.allows("anything", Right.READ) and not principal.allows("anything", Right.WRITE)
    assert principal.allows("mine", Right.WRITE) and principal.allows_everywhere(Right.READ)


def test_entry_rights_become_the_highest_listed(tokens_file: Path) -> None:
    principals = load_tokens_file(tokens_file)
    alice = principals[hash_token(TOKEN_A)]
    assert alice.name == "alice" and alice.rights == {"team-a": Right.WRITE}
    assert alice.allowed_scopes == {"workspace:infra"} and alice.pii_clearance
    bob = principals[hash_token(TOKEN_B)]
    assert bob.rights == {"*": Right.READ} and not bob.pii_clearance and bob.authenticated


def test_right_parse() -> None:
    assert Right.parse(" Admin ") is Right.ADMIN
    with pytest.raises(ValueError, match="expected read, write or admin"):
        Right.parse("owner")


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
            "tokens:\n" + _entry("t", "a", {"team": ["read", "owner"]}),
            "tokens[0].namespaces.team[1]",
            "'read', 'write' or 'admin'",
        ),
        ("tokens:\n" + _entry("t", "a", {"team": []}), "tokens[0].namespaces", "at least one right"),
        (
            "tokens:\n" + _entry("t", "a", {"x": ["read"]}, pii_clerance="true"),
            "tokens[0].pii_clerance",
            "Extra",
        ),
        (
            "tokens:\n" + _entry("t", "a", {"x": ["read"]}, scopes="[team:x]"),
            "tokens[0].scopes",
            "workspace:",
        ),
        (
            "tokens:\n" + _entry("t", "a", {"x": ["read"]}, pii_clearance="maybe"),
            "tokens[0].pii_clearance",
            "bool",
        ),
        ("tokens:\n  - principal: a\n    namespaces: {x: [read]}\n", "tokens[0].sha256", "Field required"),
        ("tokens:\n" + _entry("t", "' '", {"x": ["read"]}), "tokens[0].principal", "blank"),
        (
            "tokens:\n" + _entry("t", "a", {"x": ["read"]}) + _entry("t", "b", {"y": ["read"]}),
            "tokens[1].sha256",
            "duplicate of tokens[0]",
        ),
        ("version: 2\ntokens: []\n", "version", "Extra"),
    ],
)
def test_invalid_file_names_path_and_field(tmp_path: Path, text: str, field: str, message: str) -> None:
    path = tmp_path / "tokens.yaml"
    _write(path, text)
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
    _write(path, text)
    assert load_tokens_file(path) == {}


def test_hash_is_normalised_to_lowercase(tmp_path: Path) -> None:
    path = tmp_path / "tokens.yaml"
    _write(
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
    text = tokens_file.read_text() + _entry("cbt_new", "carol", {"c": ["read"]})
    _write(tokens_file, text)
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
    _write(replacement, "tokens:\n" + _entry(TOKEN_B, "bob", {"*": ["read"]}))
    os.replace(replacement, tokens_file)
    assert store.lookup(TOKEN_A) is None  # alice was removed: revoked without a restart
    assert store.lookup(TOKEN_B) is not None


def test_broken_edit_keeps_last_good_version_and_logs_once(
    tokens_file: Path, caplog: pytest.LogCaptureFixture
) -> None:
    store = TokenStore(tokens_file, check_interval=0)
    good = tokens_file.read_text()
    caplog.set_level(logging.ERROR, logger="memory.auth")
    _write(tokens_file, good + "  - sha256: nothex\n")  # a half-finished edit
    assert store.lookup(TOKEN_A) is not None and store.lookup(TOKEN_B) is not None
    assert store.lookup(TOKEN_A) is not None  # checked again: same broken version, not logged again
    errors = [r for r in caplog.records if r.levelno == logging.ERROR]
    assert len(errors) == 1
    assert str(tokens_file) in errors[0].getMessage() and "tokens[2]" in errors[0].getMessage()
    assert "keeping the last good version" in errors[0].getMessage()
    _write(tokens_file, good + _entry("cbt_fixed", "dave", {"d": ["write"]}))
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


# --------------------------------------------------------------------------------------------------
# Writing the file (cb token create)


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
    _write(tokens_file, original)
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
    _write(path, text)
    token, _ = add_token(path, principal="first", namespaces={"n": [Right.ADMIN]})
    principals = load_tokens_file(path)
    assert list(principals) == [hash_token(token)]


def test_add_token_refuses_a_broken_file_and_leaves_it_untouched(tmp_path: Path) -> None:
    path = tmp_path / "tokens.yaml"
    _write(path, "tokens: [oops\n")
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


# --------------------------------------------------------------------------------------------------
# Authentication


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


# --------------------------------------------------------------------------------------------------
# Authorisation and the method table


def _all_rpcs() -> list[tuple[str, object]]:
    """Every RPC of every service in the generated descriptors: (full method name, input descriptor)."""
    found = []
    for module_info in pkgutil.iter_modules(memory.v1.__path__):
        if not module_info.name.endswith("_pb2"):
            continue
        module = importlib.import_module(f"memory.v1.{module_info.name}")
        for service in module.DESCRIPTOR.services_by_name.values():
            for method in service.methods:
                found.append((f"/{service.full_name}/{method.name}", method.input_type))
    return found


def test_every_rpc_of_every_service_is_in_the_method_table() -> None:
    rpcs = _all_rpcs()
    assert len(rpcs) >= 12  # the descriptors were found (12 RPCs when this test was written)
    missing = [name for name, _ in rpcs if name not in METHOD_RIGHTS]
    assert not missing, f"add these RPCs to common.auth.METHOD_RIGHTS (they are denied until then): {missing}"


def test_every_request_names_its_namespaces_or_is_global() -> None:
    for name, input_type in _all_rpcs():
        assert name in GLOBAL_METHODS or names_namespaces(input_type), (
            f"{name}: its request has no namespace field (nor items with one); add one, or list the "
            "method in GLOBAL_METHODS (then only '*' grants cover it)"
        )


def test_query_service_rpcs_need_read_and_pack_administration_needs_admin() -> None:
    for name, _ in _all_rpcs():
        service = name.lstrip("/").partition("/")[0]
        if service in QUERY_SERVICE_NAMES:
            assert METHOD_RIGHTS[name] is Right.READ, name
    assert METHOD_RIGHTS["/memory.v1.DomainPackService/RegisterPackage"] is Right.ADMIN
    assert METHOD_RIGHTS["/memory.v1.DomainPackService/SetNamespaceKinds"] is Right.ADMIN
    assert METHOD_RIGHTS["/memory.v1.ObservationService/RecordObservations"] is Right.WRITE
    assert METHOD_RIGHTS["/memory.v1.DocumentService/Retain"] is Right.WRITE


def test_request_namespaces() -> None:
    assert request_namespaces(source_service_pb2.GetSourceRequest(namespace="a")) == {"a"}
    assert request_namespaces(source_service_pb2.GetSourceRequest()) == {""}
    batch = observation_service_pb2.RecordObservationsRequest(
        observations=[{"namespace": "a"}, {"namespace": "b"}, {"namespace": "a"}]
    )
    assert request_namespaces(batch) == {"a", "b"}
    assert request_namespaces(observation_service_pb2.RecordObservationsRequest()) is None


GET_SOURCE = "/memory.v1.SourceService/GetSource"
RECORD = "/memory.v1.ObservationService/RecordObservations"


def test_authorize() -> None:
    reader = Principal(name="r", rights={"a": Right.READ})
    writer = Principal(name="w", rights={"a": Right.WRITE, "b": Right.READ})
    authorize(reader, GET_SOURCE, source_service_pb2.GetSourceRequest(namespace="a"))
    with pytest.raises(PermissionDenied, match="read right on namespace 'b'") as raised:
        authorize(reader, GET_SOURCE, source_service_pb2.GetSourceRequest(namespace="b"))
    assert raised.value.reason == "NAMESPACE_NOT_GRANTED"
    with pytest.raises(PermissionDenied, match="namespace ''"):
        authorize(reader, GET_SOURCE, source_service_pb2.GetSourceRequest())
    one = observation_service_pb2.RecordObservationsRequest(observations=[{"namespace": "a"}])
    with pytest.raises(PermissionDenied, match="write right"):
        authorize(reader, RECORD, one)
    authorize(writer, RECORD, one)
    mixed = observation_service_pb2.RecordObservationsRequest(
        observations=[{"namespace": "a"}, {"namespace": "b"}]
    )
    with pytest.raises(PermissionDenied, match="namespace 'b'"):
        authorize(writer, RECORD, mixed)  # every namespace of the batch is checked
    with pytest.raises(PermissionDenied, match="'\\*'"):
        authorize(writer, RECORD, observation_service_pb2.RecordObservationsRequest())
    with pytest.raises(PermissionDenied) as unknown:
        authorize(
            development_principal(),
            "/memory.v1.SourceService/NotInTheTable",
            source_service_pb2.GetSourceRequest(),
        )
    assert unknown.value.reason == "METHOD_NOT_ALLOWED"


def test_global_methods_need_a_star_grant() -> None:
    method = next(iter(GLOBAL_METHODS))
    request = source_service_pb2.GetSourceRequest(namespace="a")  # any message: the namespace is ignored
    with pytest.raises(PermissionDenied):
        authorize(Principal(name="p", rights={"a": Right.ADMIN}), method, request)
    authorize(Principal(name="p", rights={"*": Right.ADMIN}), method, request)


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


# --------------------------------------------------------------------------------------------------
# The interceptor (in common.grpc.server) over a real channel


class _ReadinessOk:
    def ensure_ready(self) -> bool:
        return True

    def close(self) -> None:
        pass


class _WhoAmI(source_service_pb2_grpc.SourceServiceServicer):  # type: ignore[misc]
    def GetSource(
        self, request: source_service_pb2.GetSourceRequest, context: grpc.ServicerContext
    ) -> source_service_pb2.GetSourceResponse:
        principal = current_principal()
        assert principal is not None
        return source_service_pb2.GetSourceResponse(
            source=source_service_pb2.Source(natural_key=request.natural_key, title=principal.name)
        )


def _host(settings: Settings, address: str = "127.0.0.1:0") -> ServiceHost:
    def register(server: grpc.Server) -> list[str]:
        source_service_pb2_grpc.add_SourceServiceServicer_to_server(_WhoAmI(), server)
        return ["memory.v1.SourceService"]

    return build_server(
        settings,
        service_name="auth_test",
        address=address,
        metrics_port=0,
        database=_ReadinessOk(),
        register=register,
        readiness_interval=0.1,
    )


@pytest.fixture
def secured(tokens_file: Path) -> Iterator[ServiceHost]:
    host = _host(Settings(tokens_file=str(tokens_file)))
    host.start()
    yield host
    host.stop(0)


def _get(host: ServiceHost, namespace: str, token: str | None) -> str:
    with make_channel(f"127.0.0.1:{host.port}", security=ClientSecurity(token=token or "")) as channel:
        response = source_service_pb2_grpc.SourceServiceStub(channel).GetSource(
            source_service_pb2.GetSourceRequest(namespace=namespace, natural_key="doc:a"), timeout=5
        )
    return str(response.source.title)


def _code(host: ServiceHost, namespace: str, token: str | None) -> grpc.StatusCode:
    with pytest.raises(grpc.RpcError) as raised:
        _get(host, namespace, token)
    return raised.value.code()


def test_interceptor_exposes_the_principal_and_enforces_tokens(secured: ServiceHost) -> None:
    assert secured.authenticator.enabled
    assert _get(secured, "team-a", TOKEN_A) == "alice"
    assert _get(secured, "anything", TOKEN_B) == "bob"  # "*": read
    assert _code(secured, "team-a", None) == grpc.StatusCode.UNAUTHENTICATED
    assert _code(secured, "team-a", "cbt_wrong") == grpc.StatusCode.UNAUTHENTICATED
    assert _code(secured, "team-b", TOKEN_A) == grpc.StatusCode.PERMISSION_DENIED


def test_development_mode_has_a_development_principal() -> None:
    host = _host(Settings(auth_mode="auto", tokens_file=""))
    host.start()
    try:
        assert not host.authenticator.enabled
        assert _get(host, "any", None) == "development"
    finally:
        host.stop(0)


@pytest.mark.parametrize("address", ["0.0.0.0:0", "[::]:0", "192.0.2.10:0"])
def test_development_mode_refuses_non_loopback_binds(address: str) -> None:
    with pytest.raises(ServerSetupError, match="loopback"):
        _host(Settings(tokens_file=""), address)
    with pytest.raises(ServerSetupError, match="loopback"):
        _host(Settings(auth_mode="none", tokens_file=""), address)


def test_tokens_mode_needs_a_valid_tokens_file(tmp_path: Path) -> None:
    with pytest.raises(ServerSetupError, match="CB_TOKENS_FILE"):
        _host(Settings(auth_mode="tokens", tokens_file=""))
    broken = tmp_path / "broken.yaml"
    _write(broken, "tokens: 3\n")
    with pytest.raises(ServerSetupError, match=f"tokens file {broken}: tokens: "):
        _host(Settings(tokens_file=str(broken)))


def test_tokens_mode_may_bind_any_address(tokens_file: Path) -> None:
    host = _host(Settings(tokens_file=str(tokens_file)), "0.0.0.0:0")
    host.stop(0)

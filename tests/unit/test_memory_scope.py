"""Memory scope, names and rights (docs/how-to/memory-records.md)."""

from __future__ import annotations

import hashlib
import types

import pytest

from common.auth.principals import MEMORY_METHODS
from common.auth.principals import Principal
from common.auth.principals import Right
from common.auth.principals import authorize
from common.auth.principals import development_principal
from common.auth.tokens_file import TokenEntry
from common.domain.memory_scope import resolve_memory_scope
from common.kernel.errors import InvalidArgument
from common.kernel.errors import PermissionDenied
from common.kernel.memory_names import content_identity
from common.kernel.memory_names import memory_base_namespace
from common.kernel.memory_names import memory_id
from common.kernel.memory_names import memory_namespace
from common.kernel.memory_names import owner_scope
from common.kernel.memory_names import summary_group_id
from common.storage.visibility import visibility_for
from memory_service_grpc_client.memory.v1 import memory_query_service_pb2
from memory_service_grpc_client.memory.v1 import memory_service_pb2

SHA = "a" * 64


def _token(user: str = "8821", org: str = "acme", grants: dict[str, Right] | None = None) -> Principal:
    return Principal(
        name=f"app-{user}",
        rights=types.MappingProxyType(
            grants if grants is not None else {"org:acme:env:production": Right.WRITE}
        ),
        organization_id=org,
        environment="production",
        user_id=user,
    )


def test_the_namespace_formula_and_its_base() -> None:
    assert memory_namespace("acme", "production") == "org:acme:env:production"
    assert memory_namespace("acme", "production", "prj-support") == "org:acme:env:production:proj:prj-support"
    assert memory_base_namespace("org:acme:env:production:proj:prj-support") == "org:acme:env:production"
    assert memory_base_namespace("org:acme:env:production") == "org:acme:env:production"
    assert memory_base_namespace("debian") is None
    assert memory_base_namespace("org:acme:env:qa:proj:x") is None  # not an environment of docs/how-to/memory-records.md


def test_the_memory_id_formula() -> None:
    namespace = "org:acme:env:production"
    expected = "mem-" + hashlib.sha256(f"{namespace}|8821|key-1".encode()).hexdigest()[:24]
    assert memory_id(namespace, "8821", "key-1") == expected
    assert memory_id(namespace, "8822", "key-1") != expected  # another owner, another memory
    identity = content_identity("text", "api", "", ["a"], {"b": 1})
    canonical = '{"event_type":"","metadata":{"b":1},"source":"api","tags":["a"],"text":"text"}'
    assert identity == "sha256:" + hashlib.sha256(canonical.encode()).hexdigest()
    assert summary_group_id(["b", "a"]) == summary_group_id(["a", "b"])


def test_a_grant_on_the_organisation_environment_covers_its_projects_only() -> None:
    caller = _token()
    assert caller.allows("org:acme:env:production:proj:prj-1", Right.WRITE)
    assert not caller.allows("org:acme:env:staging:proj:prj-1", Right.READ)
    assert not caller.allows("org:globex:env:production", Right.READ)


def test_the_scope_comes_from_the_token_and_the_project_header() -> None:
    scope = resolve_memory_scope(_token(), "prj-1", "", Right.WRITE)
    assert (scope.organization_id, scope.environment, scope.project_id, scope.user_id) == (
        "acme",
        "production",
        "prj-1",
        "8821",
    )
    assert scope.namespace == "org:acme:env:production:proj:prj-1"
    assert scope.owner_scope == owner_scope("acme", "production", "8821")
    assert resolve_memory_scope(_token(), "", "8821", Right.READ).user_id == "8821"  # naming oneself is fine


def test_naming_another_user_is_permission_denied() -> None:
    with pytest.raises(PermissionDenied) as raised:
        resolve_memory_scope(_token(), "", "8822", Right.READ)
    assert raised.value.reason == "OTHER_USER"


def test_a_token_without_a_memory_scope_or_without_the_right_is_denied() -> None:
    bare = Principal(name="ci", rights=types.MappingProxyType({"*": Right.ADMIN}))
    with pytest.raises(PermissionDenied) as raised:
        resolve_memory_scope(bare, "", "", Right.READ)
    assert raised.value.reason == "MEMORY_SCOPE_MISSING"
    for method in MEMORY_METHODS:
        with pytest.raises(PermissionDenied):
            authorize(bare, method, memory_query_service_pb2.GetMemoryRequest())
    reader = _token(grants={"org:acme:env:production": Right.READ})
    authorize(reader, "/memory.v1.MemoryService/AddMemories", memory_service_pb2.AddMemoriesRequest())
    with pytest.raises(PermissionDenied) as denied:
        resolve_memory_scope(reader, "", "", Right.WRITE)
    assert denied.value.reason == "NAMESPACE_NOT_GRANTED"


def test_bad_project_or_user_is_invalid_argument_with_the_field() -> None:
    with pytest.raises(InvalidArgument) as raised:
        resolve_memory_scope(_token(), "prj:with:colons", "", Right.READ)
    assert raised.value.violations[0].field == "x-project-id"
    with pytest.raises(InvalidArgument) as bad_user:
        resolve_memory_scope(_token(), "", "bad user", Right.READ)
    assert bad_user.value.violations[0].field == "user_id"


def test_development_mode_has_a_default_scope_and_may_act_for_any_user() -> None:
    scope = resolve_memory_scope(development_principal(), "", "", Right.WRITE)
    assert (scope.organization_id, scope.environment, scope.user_id) == ("local", "development", "local")
    assert resolve_memory_scope(development_principal(), "", "u7", Right.READ).user_id == "u7"


def test_a_memory_token_sees_its_own_owner_scope_only() -> None:
    visibility = visibility_for(_token())
    assert visibility.allows([owner_scope("acme", "production", "8821")])
    assert not visibility.allows([owner_scope("acme", "production", "8822")])


def test_tokens_file_entries_carry_the_memory_scope() -> None:
    entry = TokenEntry.model_validate(
        {
            "sha256": SHA,
            "principal": "support-desk",
            "namespaces": {"org:acme:env:production": ["read", "write"]},
            "organization": "acme",
            "environment": "production",
            "user": 8821,
        }
    )
    principal = entry.to_principal()
    assert (principal.organization_id, principal.environment, principal.user_id) == (
        "acme",
        "production",
        "8821",
    )
    with pytest.raises(ValueError, match="go together"):
        TokenEntry.model_validate(
            {"sha256": SHA, "principal": "p", "namespaces": {"x": ["read"]}, "organization": "acme"}
        )
    with pytest.raises(ValueError):
        TokenEntry.model_validate(
            {
                "sha256": SHA,
                "principal": "p",
                "namespaces": {"x": ["read"]},
                "organization": "acme",
                "environment": "qa",
                "user": "1",
            }
        )
    with pytest.raises(ValueError, match="reserved"):
        TokenEntry.model_validate(
            {"sha256": SHA, "principal": "memory-user/acme", "namespaces": {"x": ["read"]}}
        )

"""common.auth.principals: rights, the method table, request namespaces and authorisation."""

from __future__ import annotations

import importlib
import pkgutil

import pytest

from common.auth.principals import CALLER_FILTERED_METHODS
from common.auth.principals import GLOBAL_METHODS
from common.auth.principals import MEMORY_METHODS
from common.auth.principals import METHOD_RIGHTS
from common.auth.principals import Principal
from common.auth.principals import Right
from common.auth.principals import authorize
from common.auth.principals import development_principal
from common.auth.principals import names_namespaces
from common.auth.principals import request_namespaces
from common.kernel.errors import InvalidArgument
from common.kernel.errors import PermissionDenied
from memory_service_grpc_client.memory import v1 as stubs
from memory_service_grpc_client.memory.v1 import observation_service_pb2
from memory_service_grpc_client.memory.v1 import source_service_pb2
from query_service.main import SERVICE_NAMES as QUERY_SERVICE_NAMES

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


def test_right_parse() -> None:
    assert Right.parse(" Admin ") is Right.ADMIN
    with pytest.raises(ValueError, match="expected read, write or admin"):
        Right.parse("owner")


# --------------------------------------------------------------------------------------------------
# Authorisation and the method table


def _all_rpcs() -> list[tuple[str, object]]:
    """Every RPC of every service in the generated descriptors: (full method name, input descriptor)."""
    found = []
    for module_info in pkgutil.iter_modules(stubs.__path__):
        if not module_info.name.endswith("_pb2"):
            continue
        module = importlib.import_module(f"{stubs.__name__}.{module_info.name}")
        for service in module.DESCRIPTOR.services_by_name.values():
            for method in service.methods:
                found.append((f"/{service.full_name}/{method.name}", method.input_type))
    return found


def test_every_rpc_of_every_service_is_in_the_method_table() -> None:
    rpcs = _all_rpcs()
    assert len(rpcs) >= 12  # the descriptors were found (12 RPCs when this test was written)
    missing = [name for name, _ in rpcs if name not in METHOD_RIGHTS]
    assert not missing, (
        f"add these RPCs to common.auth.principals.METHOD_RIGHTS (they are denied until then): {missing}"
    )


def test_every_request_names_its_namespaces_or_is_global() -> None:
    for name, input_type in _all_rpcs():
        # Memory methods act in the caller's memory scope: their namespace is derived, not named.
        assert name in GLOBAL_METHODS | MEMORY_METHODS | CALLER_FILTERED_METHODS or names_namespaces(input_type), (
            f"{name}: its request has no namespace field (nor items with one); add one, or list the "
            "method in GLOBAL_METHODS (then only '*' grants cover it)"
        )


def test_query_service_rpcs_need_read_and_pack_administration_needs_admin() -> None:
    # The audit listing shows every principal's events of a namespace: admin, served by query_service.
    admin_reads = {"/memory.v1.AuditService/ListAuditEvents"}
    for name, _ in _all_rpcs():
        service = name.lstrip("/").partition("/")[0]
        if service in QUERY_SERVICE_NAMES and name not in admin_reads and "RecordAuditEvent" not in name:
            assert METHOD_RIGHTS[name] is Right.READ, name
    assert METHOD_RIGHTS["/memory.v1.AuditService/ListAuditEvents"] is Right.ADMIN
    assert METHOD_RIGHTS["/memory.v1.AuditService/RecordAuditEvent"] is Right.WRITE
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
BACKLOG = "/memory.v1.ObservationService/GetEmbeddingBacklog"


def test_authorize() -> None:
    reader = Principal(name="r", rights={"a": Right.READ})
    writer = Principal(name="w", rights={"a": Right.WRITE, "b": Right.READ})
    authorize(reader, GET_SOURCE, source_service_pb2.GetSourceRequest(namespace="a"))
    with pytest.raises(PermissionDenied, match="read right on namespace 'b'") as raised:
        authorize(reader, GET_SOURCE, source_service_pb2.GetSourceRequest(namespace="b"))
    assert raised.value.reason == "NAMESPACE_NOT_GRANTED"
    # The refusal hints at the caller's own grants, and at the one a typo was meant to name.
    assert raised.value.message.endswith("; this token has it on 'a'")
    with pytest.raises(PermissionDenied) as typo:
        authorize(
            writer,
            RECORD,
            observation_service_pb2.RecordObservationsRequest(observations=[{"namespace": "example"}]),
        )
    assert "write right on namespace 'example'; this token has it on 'a'" in typo.value.message
    typist = Principal(name="t", rights={"example": Right.WRITE, "other": Right.READ})
    with pytest.raises(PermissionDenied) as close:
        authorize(typist, GET_SOURCE, source_service_pb2.GetSourceRequest(namespace="exmaple"))
    assert close.value.message.endswith("this token has it on 'example', 'other' (did you mean 'example'?)")
    with pytest.raises(PermissionDenied, match="the write right on no namespace"):
        authorize(
            reader,
            RECORD,
            observation_service_pb2.RecordObservationsRequest(observations=[{"namespace": "a"}]),
        )
    # No namespace where one is required: a missing field, not a refusal (new-user trial: CompileContext
    # without a namespace answered "lacks the read right on namespace ''").
    with pytest.raises(InvalidArgument) as missing:
        authorize(reader, GET_SOURCE, source_service_pb2.GetSourceRequest())
    assert [violation.field for violation in missing.value.violations] == ["namespace"]
    # ... except where an empty namespace means every namespace: then only a "*" grant covers it.
    with pytest.raises(PermissionDenied, match="namespace ''"):
        authorize(reader, BACKLOG, observation_service_pb2.GetEmbeddingBacklogRequest())
    authorize(
        Principal(name="all", rights={"*": Right.READ}),
        BACKLOG,
        observation_service_pb2.GetEmbeddingBacklogRequest(),
    )
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

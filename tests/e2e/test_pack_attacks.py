"""Domain packs as an attack surface, over real gRPC: a pack whose schema points at a remote
or local file is INVALID_ARGUMENT at RegisterPackage and is never stored; a pack with an exponential
regular expression is accepted (RE2 runs it in linear time), and strict writes of another tenant's
namespace that enables it, with the input that makes a backtracking engine run for hours, answer at once
with their field violation."""

from __future__ import annotations

import uuid
from typing import Any

import grpc
import pytest
from google.protobuf import json_format

from memory_service_grpc_client import rpc_failure
from memory_service_grpc_client.memory.v1 import domain_pack_service_pb2
from memory_service_grpc_client.memory.v1 import domain_pack_service_pb2_grpc
from tests.e2e.test_domain_packs import _observe
from tests.e2e.test_domain_packs import _register

pytestmark = pytest.mark.e2e


def _register_request(pack: dict[str, Any]) -> domain_pack_service_pb2.RegisterPackageRequest:
    return json_format.ParseDict({"package": pack}, domain_pack_service_pb2.RegisterPackageRequest())


@pytest.mark.parametrize("reference", ["http://127.0.0.1:9/schema.json", "file:///etc/passwd"])
def test_a_schema_reference_outside_the_pack_is_refused_and_nothing_is_stored(
    ingest_channel: grpc.Channel, reference: str
) -> None:
    stub = domain_pack_service_pb2_grpc.DomainPackServiceStub(ingest_channel)
    pack = {
        "name": "attack",
        "version": uuid.uuid4().hex,
        "kinds": [
            {"kind": "thing", "attributes": {"type": "object", "properties": {"x": {"$ref": reference}}}}
        ],
    }
    with pytest.raises(grpc.RpcError) as raised:
        stub.RegisterPackage(_register_request(pack), timeout=30)
    failure = rpc_failure(raised.value)
    assert failure.code == grpc.StatusCode.INVALID_ARGUMENT
    assert [v.field for v in failure.violations] == ["package.kinds[0].attributes.properties.x.$ref"]
    assert "root:" not in failure.message
    with pytest.raises(grpc.RpcError) as missing:
        stub.GetPackage(
            domain_pack_service_pb2.GetPackageRequest(name="attack", version=pack["version"]), timeout=30
        )
    assert missing.value.code() == grpc.StatusCode.NOT_FOUND


@pytest.mark.timeout(120)
def test_an_exponential_pattern_cannot_stall_strict_writes(ingest_channel: grpc.Channel) -> None:
    namespace = "test-" + uuid.uuid4().hex[:12]
    pack = {
        "name": "attack",
        "version": uuid.uuid4().hex,
        "kinds": [
            {
                "kind": "thing",
                "naturalKey": {"type": "string", "pattern": "^(a+)+$"},
                "idPatterns": ["(a+)+!"],
                "attributes": {
                    "type": "object",
                    "properties": {"code": {"type": "string", "pattern": "(x+x+)+y"}},
                },
            }
        ],
    }
    _register(ingest_channel, pack, namespace, strict=True)
    evil = "a" * 400 + "!"  # a backtracking engine needs about 2^400 steps for ^(a+)+$ on this
    observation = {
        "namespace": namespace,
        "source": {"system": "attack", "stream": "s", "external_id": "1"},
        "kind": "note",
        "occurred_at": "2026-01-01T00:00:00Z",
        "content": "a" * 100000 + "?",  # the idPattern (a+)+! never matches: worst case for backtracking
        "assertions": [
            {"entity": {"key": "thing:" + evil, "attributes": {"code": "x" * 5000}}},
            {"entity": {"key": "thing:aaaa", "attributes": {"code": "xxy"}}},
        ],
    }
    [result] = _observe(ingest_channel, [observation])
    assert result.status == "partially_processed", result
    fields = sorted(violation.partition(": ")[0] for violation in result.field_violations)
    assert fields == [
        "assertions[0].entity.attributes.code",
        "assertions[0].entity.key",
    ]

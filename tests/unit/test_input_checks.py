"""Unit tests of the mechanisms: unstorable values, the JSON form of any message, bounded
error details."""

from __future__ import annotations

import pytest
from google.protobuf import json_format
from google.protobuf.message import Message

from common.grpc.proto_mapping import json_form
from common.grpc.request_checks import request_violations
from common.grpc.status_mapping import MAX_VIOLATION_BYTES
from common.grpc.status_mapping import bounded_bad_request
from common.kernel.errors import FieldViolation
from common.kernel.storable_values import unstorable_paths
from memory_service_grpc_client.memory.v1 import memory_service_pb2
from memory_service_grpc_client.memory.v1 import observation_service_pb2
from memory_service_grpc_client.memory.v1 import retrieval_service_pb2


def test_unstorable_paths_name_strings_keys_and_numbers() -> None:
    value = {"a": "ok", "b": ["x", "y\x00"], "c\x00": 1, "d": {"e": float("nan")}}
    paths = [path for path, _ in unstorable_paths(value, "data")]
    assert sorted(paths) == ["data.b[1]", "data.c\\u0000", "data.d.e"]
    assert unstorable_paths({"k": "v", "n": [1, 2.5]}) == []
    assert len(unstorable_paths(["\x00"] * 1000, limit=100)) == 100


def test_json_form_marks_out_of_range_timestamps_per_path() -> None:
    request = observation_service_pb2.RecordObservationsRequest()
    observation = request.observations.add()
    observation.occurred_at.seconds = 10**13
    observation.assertions.add().fact.valid_to.nanos = -1
    form, found = json_form(observation)
    assert form["occurred_at"].startswith("Timestamp(")
    assert form["assertions"][0]["fact"]["valid_to"].startswith("Timestamp(")
    assert [path for path, _ in found] == ["occurred_at", "assertions[0].fact.valid_to"]
    # The batch items are left to their validators; the rest of the request is checked.
    assert request_violations(request) == []


def _observation_with_data(data: dict[str, object]) -> Message:
    observation = observation_service_pb2.RecordObservationsRequest().observations.add()
    observation.observation_id = "o-1"
    observation.occurred_at.seconds = 1_700_000_000
    observation.data.update(data)
    return observation


def _memory_with_ttl(seconds: int, nanos: int = 0) -> Message:
    memory = memory_service_pb2.NewMemory()
    memory.ttl.seconds, memory.ttl.nanos = seconds, nanos
    return memory


def _update_with_mask(path: str) -> Message:
    update = memory_service_pb2.UpdateMemoryRequest()
    update.update_mask.paths.append(path)
    return update


@pytest.mark.parametrize(
    ("message", "path"),
    [
        (_observation_with_data({"a": float("nan")}), "data.a"),
        (_observation_with_data({"a": [1, {"b": float("-inf")}]}), "data.a[1].b"),
        (_memory_with_ttl(315_576_000_001), "ttl"),
        (_memory_with_ttl(1, -5), "ttl"),
        (_update_with_mask("fooBar"), "update_mask"),
    ],
)
def test_json_form_walks_only_what_json_format_refuses(message: Message, path: str) -> None:
    """json_form prints a message with json_format alone and walks it only when json_format raises: every kind of value the walk clears must make json_format raise, or the walk would be
    skipped for it (the Timestamp case is the test above)."""
    with pytest.raises((ValueError, json_format.Error)):
        json_format.MessageToDict(message, preserving_proto_field_name=True)
    _form, found = json_form(message)
    assert [found_path for found_path, _ in found] == [path]


def test_json_form_of_a_valid_message_is_json_formats() -> None:
    observation = _observation_with_data({"a": 1.5, "b": ["x", {"c": None}]})
    assert json_form(observation) == (
        json_format.MessageToDict(observation, preserving_proto_field_name=True),
        [],
    )


def test_bad_request_is_bounded_with_a_count() -> None:
    huge = FieldViolation("k" * 10**6, "d" * 10**6)
    violations = [huge] * 10_000
    bad = bounded_bad_request(violations)
    assert bad.ByteSize() <= MAX_VIOLATION_BYTES + 200
    assert bad.field_violations[-1].description.endswith("more violations left out")
    assert all(len(v.field) <= 256 for v in bad.field_violations)


def test_a_non_finite_number_in_a_read_filter_is_a_violation_not_a_crash() -> None:
    request = retrieval_service_pb2.SearchRequest(namespace="ns", query="q")
    request.meta.update({"k": float("inf")})
    assert request_violations(request) == [FieldViolation("meta.k", "must be a finite number")]

"""Observation files for ``cb observe``: JSONL, each non-blank line the proto3 JSON of one
`memory.v1.Observation` (or of a whole `RecordObservationsRequest`), read lazily line by line.

A line that cannot be parsed becomes a `LineError` with its 1-based number (reported, never sent);
the others become `ParsedObservation` items that `memory_service_tools.observation_loader` sends.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterable
from collections.abc import Iterator

from google.protobuf import json_format

from common.grpc.proto_mapping import explain_parse_error
from memory_service_grpc_client.memory.v1 import knowledge_pb2
from memory_service_grpc_client.memory.v1 import observation_service_pb2


@dataclasses.dataclass(frozen=True)
class ParsedObservation:
    """One observation read from a JSONL file; ``line`` is 1-based."""

    line: int
    observation: knowledge_pb2.Observation


@dataclasses.dataclass(frozen=True)
class LineError:
    """A line that could not be parsed (it is reported and not sent); ``line`` is 1-based."""

    line: int
    error: str


def parse_observation_lines(
    lines: Iterable[bytes | str], *, namespace: str | None = None
) -> Iterator[ParsedObservation | LineError]:
    """Parses JSONL: each non-blank line is the proto3 JSON of one `memory.v1.Observation`.

    A line holding a `RecordObservationsRequest` (``{"observations": [...]}``) is accepted too and
    yields each of its observations with that line number.

    Args:
        lines: raw lines (bytes are decoded as UTF-8), in file order.
        namespace: when given, replaces the namespace of every observation.

    Yields:
        A `ParsedObservation` per observation, or a `LineError` (line number and reason) per bad line.
        Blank lines yield nothing.
    """
    for number, raw in enumerate(lines, start=1):
        try:
            text = raw.decode("utf-8") if isinstance(raw, bytes) else raw
        except UnicodeDecodeError as exc:
            yield LineError(number, f"not UTF-8: {exc}")
            continue
        if not text.strip():
            continue
        try:
            document = json.loads(text)
        except json.JSONDecodeError as exc:
            yield LineError(number, f"invalid JSON: {exc.msg} (column {exc.colno})")
            continue
        if not isinstance(document, dict):
            yield LineError(number, f"expected a JSON object, got {type(document).__name__}")
            continue
        try:
            if set(document) == {"observations"}:
                request = observation_service_pb2.RecordObservationsRequest()
                json_format.ParseDict(document, request)
                observations = list(request.observations)
            else:
                observation = knowledge_pb2.Observation()
                json_format.ParseDict(document, observation)
                observations = [observation]
        except json_format.ParseError as exc:
            yield LineError(number, "not a memory.v1.Observation: " + explain_parse_error(exc))
            continue
        for observation in observations:
            if namespace:
                observation.namespace = namespace
            yield ParsedObservation(number, observation)

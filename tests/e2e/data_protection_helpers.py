"""What the data protection tests share: a slice of the debian corpus for one subject, the residue scan,
observations and memories to delete, and the refusal a legal hold answers."""

from __future__ import annotations

import json
import re
import uuid
from collections import Counter
from datetime import datetime
from pathlib import Path
from typing import Any

import grpc
import psycopg
import pytest
from google.protobuf import json_format
from google.rpc import error_details_pb2
from google.rpc import status_pb2
from psycopg import sql

from common.kernel.config import Settings
from memory_service_grpc_client.memory.v1 import memory_service_pb2
from memory_service_grpc_client.memory.v1 import memory_service_pb2_grpc
from memory_service_grpc_client.memory.v1 import observation_service_pb2
from memory_service_grpc_client.memory.v1 import observation_service_pb2_grpc

DEBIAN = Path(__file__).resolve().parents[2].parent / "shared" / "corpora" / "debian-uploads" / "observations.jsonl"


def debian_slice(namespace: str, lines: int) -> tuple[list[dict[str, Any]], str, str]:
    """The first ``lines`` observations of the debian corpus in ``namespace``, every person id made
    unique to this run (``<id>-<tag>``), with the most frequent uploader as the subject.

    Returns:
        (observations, the subject's node key, the subject's id: a value no other run holds).
    """
    tag = uuid.uuid4().hex[:10]
    raw = DEBIAN.read_text().splitlines()[:lines]
    people = Counter(json.loads(line)["actor"]["id"] for line in raw)
    subject = people.most_common(3)[2][0]  # a moderately frequent one: not the whole slice
    out: list[dict[str, Any]] = []
    for line in raw:
        text = re.sub(r"person-([0-9a-f]{4})\b", rf"person-{tag}-\1", line)
        record = json.loads(text)
        record["namespace"] = namespace
        out.append(record)
    unique = re.sub(r"person-([0-9a-f]{4})\b", rf"person-{tag}-\1", subject)
    return out, f"person:{unique}", unique


def record_all(channel: Any, observations: list[dict[str, Any]], batch: int = 200) -> None:
    """Records ``observations`` through ObservationService in batches; every item must be created."""
    stub = observation_service_pb2_grpc.ObservationServiceStub(channel)
    for start in range(0, len(observations), batch):
        request = json_format.ParseDict(
            {"observations": observations[start : start + batch]}, observation_service_pb2.RecordObservationsRequest()
        )
        response = stub.RecordObservations(request, timeout=600)
        failed = [r for r in response.results if r.status == "failed"]
        assert not failed, failed[:3]


def text_columns(conn: psycopg.Connection[Any], graph: str) -> list[tuple[str, str, str, str]]:
    """(schema, table, column, type) of every column of every table in ``public`` (procrastinate's
    tables included) and the AGE graph schema that can hold text: every type but numbers, booleans,
    instants, graph ids and embedding vectors (each is scanned in its text form)."""
    rows = conn.execute(
        "SELECT c.table_schema, c.table_name, c.column_name, c.udt_name FROM information_schema.columns c"
        " JOIN information_schema.tables t USING (table_schema, table_name)"
        " WHERE c.table_schema IN ('public', %s) AND t.table_type = 'BASE TABLE'"
        " AND c.data_type NOT IN ('boolean', 'integer', 'bigint', 'real', 'double precision',"
        " 'timestamp with time zone', 'interval', 'smallint') AND c.udt_name NOT IN ('graphid', 'vector')"
        " ORDER BY 1, 2, 3",
        (graph,),
    ).fetchall()
    return [(str(a), str(b), str(c), str(d)) for a, b, c, d in rows]


def residue(conn: psycopg.Connection[Any], graph: str, value: str) -> dict[str, int]:
    """Rows holding ``value`` (case-insensitive) per ``schema.table.column``, over `text_columns`;
    only the non-zero ones."""
    pattern = "%" + value.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%"
    found: dict[str, int] = {}
    for schema, table, column, udt in text_columns(conn, graph):
        text = "ag_catalog.agtype_out({c})::text" if udt == "agtype" else "{c}::text"
        query = sql.SQL("SELECT count(*) FROM {t} WHERE " + text + " ILIKE %s").format(
            t=sql.Identifier(schema, table), c=sql.Identifier(column)
        )
        count = int(conn.execute(query, (pattern,)).fetchone()[0])  # type: ignore[index]
        if count:
            found[f"{schema}.{table}.{column}"] = count
    return found


def columns_scanned(conn: psycopg.Connection[Any], graph: str) -> int:
    """How many columns `residue` scans."""
    return len(text_columns(conn, graph))


def error_info(error: grpc.RpcError) -> error_details_pb2.ErrorInfo:
    for key, value in error.trailing_metadata() or ():  # type: ignore[attr-defined]
        if key == "grpc-status-details-bin":
            status = status_pb2.Status.FromString(value)
            for detail in status.details:
                info = error_details_pb2.ErrorInfo()
                if detail.Unpack(info):
                    return info
    raise AssertionError("no ErrorInfo")


def assert_held(call: Any, hold_id: str) -> None:
    with pytest.raises(grpc.RpcError) as refused:
        call()
    assert refused.value.code() == grpc.StatusCode.FAILED_PRECONDITION, refused.value.details()
    info = error_info(refused.value)
    assert info.reason == "LEGAL_HOLD" and info.metadata["hold_id"] == hold_id
    assert hold_id in refused.value.details()


class NoPassages:
    def encode_passages(self, texts: Any) -> Any:
        raise AssertionError("retention writes no text")


def observation_of(namespace: str, n: int, kind: str, occurred: datetime, text: str) -> dict[str, Any]:
    return {
        "namespace": namespace,
        "source": {"system": "test", "stream": "s", "external_id": f"e{n}"},
        "kind": kind,
        "occurred_at": occurred.strftime("%Y-%m-%dT%H:%M:%SZ"),
        "actor": {"type": "person", "id": f"p{n}"},
        "content": text,
    }


def add_memories(ingest: grpc.Channel, user: str, texts: list[str]) -> list[str]:
    stub = memory_service_pb2_grpc.MemoryServiceStub(ingest)
    request = json_format.ParseDict(
        {"userId": user, "memories": [{"text": t, "idempotencyKey": str(i)} for i, t in enumerate(texts)]},
        memory_service_pb2.AddMemoriesRequest(),
    )
    response = stub.AddMemories(request, timeout=120)
    assert all(r.memory_id for r in response.results), response
    return [r.memory_id for r in response.results]


def memory_namespace(settings: Settings, user: str) -> str:
    with psycopg.connect(settings.database_url, autocommit=True) as conn:
        return str(
            conn.execute("SELECT namespace FROM memories WHERE user_id = %s LIMIT 1", (user,)).fetchone()[0]
        )

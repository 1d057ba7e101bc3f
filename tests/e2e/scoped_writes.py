"""The write paths of the scope inheritance suite (`tests.e2e.test_scope_inheritance`).

Each path writes data scoped ``workspace:x`` (as a writer holding it) that a reader without the scope
must never get back, and returns a `Written`: the unique marker written into its keys, titles, texts
and attributes, the hidden keys, fact_ids and observation_ids, the public keys it hangs on, and the read
RPCs in which a reader holding the scope must see it.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import dataclass
from dataclasses import field
from pathlib import Path
from typing import Any

import grpc
from google.protobuf import json_format

from common.auth.principals import Right
from common.kernel.identifiers import fact_id
from common.kernel.identifiers import parse_instant
from memory_service_grpc_client.memory.v1 import document_service_pb2
from memory_service_grpc_client.memory.v1 import document_service_pb2_grpc
from memory_service_grpc_client.memory.v1 import fact_service_pb2
from memory_service_grpc_client.memory.v1 import fact_service_pb2_grpc
from memory_service_grpc_client.memory.v1 import knowledge_pb2
from memory_service_grpc_client.memory.v1 import observation_service_pb2
from memory_service_grpc_client.memory.v1 import observation_service_pb2_grpc
from memory_service_grpc_client.memory.v1 import snapshot_service_pb2
from memory_service_grpc_client.memory.v1 import snapshot_service_pb2_grpc
from memory_service_tools.token_writer import add_token

SCOPE = "workspace:x"
WHEN = "2024-05-01T10:00:00Z"
READERS = ("outsider", "other", "insider")
RPCS = (
    "Search",
    "GetSource",
    "ListFacts",
    "ListFacts(history)",
    "CompileContext",
    "CompileTypedContext",
    "GetObservation",
    "GetTrace",
)
COMMON_WORD = "nebula"  # in every hidden text: the dev-mode compilation of GetTrace finds them by it


def pack(version: str) -> dict[str, Any]:
    """A small pack: typed traversal follows DEPENDS_ON and OWNS (non-strict: other types are free)."""
    return {
        "name": "scope-inheritance",
        "version": version,
        "kinds": [{"kind": "service"}, {"kind": "team"}],
        "relations": [
            {"relation": "DEPENDS_ON", "fromKinds": ["service"], "toKinds": ["service"]},
            {"relation": "OWNS", "fromKinds": ["team"], "toKinds": ["service"]},
        ],
    }


@dataclass
class Written:
    """What one write path wrote hidden: the strings no outsider may get back, and where to look."""

    path: str
    marker: str
    keys: list[str] = field(default_factory=list)  # hidden node keys (GetSource: NOT_FOUND outside)
    fact_ids: list[str] = field(default_factory=list)
    observation_ids: list[str] = field(default_factory=list)
    anchors: list[str] = field(default_factory=list)  # public keys the hidden data hangs on
    # Read RPCs in which the insider must see this path's data.
    shown_in: tuple[str, ...] = ()

    @property
    def secrets(self) -> list[str]:
        return [self.marker, *self.keys, *self.fact_ids, *self.observation_ids]


class World:
    """Secured hosts, tokens, the namespace and what each write path wrote."""

    def __init__(self, tokens_file: Path) -> None:
        self.ns = "inh-" + uuid.uuid4().hex[:12]
        self.tag = uuid.uuid4().hex[:8]
        read = {self.ns: [Right.READ]}
        self.writer, _ = add_token(
            tokens_file, principal="inh-writer", namespaces={self.ns: [Right.WRITE]}, scopes=[SCOPE]
        )
        self.public_writer, _ = add_token(
            tokens_file, principal="inh-public-writer", namespaces={self.ns: [Right.WRITE]}
        )
        self.tokens = {
            "outsider": add_token(tokens_file, principal="inh-outsider", namespaces=read)[0],
            "other": add_token(tokens_file, principal="inh-other", namespaces=read, scopes=["workspace:y"])[
                0
            ],
            "insider": add_token(tokens_file, principal="inh-insider", namespaces=read, scopes=[SCOPE])[0],
        }
        self.ingest_addr = self.query_addr = ""
        self.public_a = f"service:pub-a-{self.tag}"
        self.public_b = f"service:pub-b-{self.tag}"
        self.written: list[Written] = []
        self.trace_id = f"inh-trace-{self.tag}"

    def marker(self, path: str) -> str:
        return f"zq{path.replace('.', '')}{self.tag}"


def observation(ns: str, external_id: str, scopes: list[str], content: str, assertions: list[Any]) -> Any:
    return json_format.ParseDict(
        {
            "namespace": ns,
            "source": {"system": "inh-test", "stream": "notes", "external_id": external_id},
            "kind": "note",
            "occurred_at": WHEN,
            "scopes": scopes,
            "content": content,
            "assertions": assertions,
        },
        knowledge_pb2.Observation(),
    )


def fact(subject: str, predicate: str, obj: str, **extra: Any) -> dict[str, Any]:
    return {"subject": subject, "predicate": predicate, "object": obj, "valid_from": WHEN, **extra}


def record(channel: grpc.Channel, message: Any) -> str:
    stub = observation_service_pb2_grpc.ObservationServiceStub(channel)
    request = observation_service_pb2.RecordObservationsRequest(observations=[message])
    result = stub.RecordObservations(request, timeout=300).results[0]
    assert result.status == "processed" and not result.error, result
    return str(result.observation_id)


def fid(world: World, subject: str, predicate: str, obj: str) -> str:
    return fact_id(world.ns, subject, predicate, obj, parse_instant(WHEN))


# -- the write paths -------------------------------------------------------------------------------


def obs_entity(world: World, channel: grpc.Channel) -> Written:
    """An entity assertion (new node) and one on an existing public node, with hidden titles and
    attributes; a fact between them."""
    m = world.marker("obs.entity")
    key = f"service:{m}-ent"
    observation_id = record(
        channel,
        observation(
            world.ns,
            f"entity-{world.tag}",
            [SCOPE],
            f"{COMMON_WORD} entity note {m}",
            [
                {"entity": {"key": key, "title": f"Title {m}", "attributes": {"note": f"attr {m}"}}},
                {"entity": {"key": world.public_a, "title": f"Hijack {m}", "attributes": {"note": m}}},
                {"fact": fact(world.public_a, "DEPENDS_ON", key)},
            ],
        ),
    )
    return Written(
        "obs.entity",
        m,
        keys=[key, f"episode:{observation_id}"],
        fact_ids=[fid(world, world.public_a, "DEPENDS_ON", key)],
        observation_ids=[observation_id],
        anchors=[world.public_a],
        shown_in=RPCS,
    )


def obs_fact(world: World, channel: grpc.Channel) -> Written:
    """A fact between two public nodes carrying its own relevance scope (``task:t1``) and attributes,
    and the public fact between them asserted again."""
    m = world.marker("obs.fact")
    observation_id = record(
        channel,
        observation(
            world.ns,
            f"fact-{world.tag}",
            [SCOPE],
            f"{COMMON_WORD} fact note {m}",
            [
                {
                    "fact": fact(
                        world.public_a, "OWNS_CODE", world.public_b, scopes=["task:t1"], attributes={"why": m}
                    )
                },
                # the public fact again: the hidden observation must not become its evidence
                {"fact": fact(world.public_a, "DEPENDS_ON", world.public_b)},
            ],
        ),
    )
    return Written(
        "obs.fact",
        m,
        keys=[f"episode:{observation_id}"],
        fact_ids=[fid(world, world.public_a, "OWNS_CODE", world.public_b)],
        observation_ids=[observation_id],
        anchors=[world.public_a, world.public_b],
        shown_in=RPCS,
    )


def obs_placeholder(world: World, channel: grpc.Channel) -> Written:
    """Facts whose ends nothing asserts: placeholders, one behind a relevance-scoped fact."""
    m = world.marker("obs.placeholder")
    first, second = f"service:{m}-ph1", f"service:{m}-ph2"
    observation_id = record(
        channel,
        observation(
            world.ns,
            f"placeholder-{world.tag}",
            [SCOPE],
            f"{COMMON_WORD} placeholder note {m}",
            [
                {"fact": fact(world.public_b, "DEPENDS_ON", first)},
                {"fact": fact(first, "DEPENDS_ON", second, scopes=["task:t1"])},
            ],
        ),
    )
    return Written(
        "obs.placeholder",
        m,
        keys=[first, second, f"episode:{observation_id}"],
        fact_ids=[
            fid(world, world.public_b, "DEPENDS_ON", first),
            fid(world, first, "DEPENDS_ON", second),
        ],
        observation_ids=[observation_id],
        anchors=[world.public_b],
        shown_in=RPCS,
    )


def obs_text(world: World, channel: grpc.Channel) -> Written:
    """A text assertion (text fragment node and chunk)."""
    m = world.marker("obs.text")
    observation_id = record(
        channel,
        observation(
            world.ns,
            f"text-{world.tag}",
            [SCOPE, "task:t1"],
            f"{COMMON_WORD} text note {m}",
            [{"text": {"text": f"{COMMON_WORD} fragment about {m}", "title": f"Fragment {m}"}}],
        ),
    )
    return Written(
        "obs.text",
        m,
        keys=[f"text:{observation_id}/0", f"episode:{observation_id}"],
        observation_ids=[observation_id],
        shown_in=("Search", "GetSource", "CompileContext", "GetObservation", "GetTrace"),
    )


def assert_facts(world: World, channel: grpc.Channel) -> Written:
    """AssertFacts: a restricted fact to a placeholder, and one with a relevance scope added."""
    m = world.marker("assert")
    target = f"service:{m}-af"
    stub = fact_service_pb2_grpc.FactServiceStub(channel)
    request = json_format.ParseDict(
        {
            "namespace": world.ns,
            "facts": [
                fact(world.public_a, "DEPENDS_ON", target, scopes=[SCOPE], attributes={"why": m}),
                fact(target, "OWNS_DATA", world.public_b, scopes=[SCOPE, "task:t1"]),
            ],
        },
        fact_service_pb2.AssertFactsRequest(),
    )
    results = stub.AssertFacts(request, timeout=120).results
    assert all(not r.error for r in results), results
    return Written(
        "AssertFacts",
        m,
        keys=[target],
        fact_ids=[r.fact_id for r in results],
        anchors=[world.public_a, world.public_b],
        shown_in=(
            "GetSource",
            "ListFacts",
            "ListFacts(history)",
            "CompileContext",
            "CompileTypedContext",
            "GetTrace",
        ),
    )


def reconcile(world: World, channel: grpc.Channel) -> Written:
    """Reconcile: restricted facts of a snapshot to placeholders (twice, the second drops one), and the
    public fact asserted again."""
    m = world.marker("reconcile")
    target, gone = f"service:{m}-rc", f"service:{m}-gone"
    stub = snapshot_service_pb2_grpc.SnapshotServiceStub(channel)

    def run(snapshot_id: str, facts: list[dict[str, Any]]) -> None:
        request = json_format.ParseDict(
            {
                "namespace": world.ns,
                "source": "inh-cmdb",
                "scope": "suite:x",
                "snapshot_id": snapshot_id,
                "snapshot_time": WHEN,
                "facts": facts,
            },
            snapshot_service_pb2.ReconcileRequest(),
        )
        stub.Reconcile(request, timeout=120)

    kept = fact(world.public_b, "DEPENDS_ON", target, scopes=[SCOPE], attributes={"why": m})
    dropped = fact(world.public_b, "DEPENDS_ON", gone, scopes=[SCOPE, "task:t1"])
    # the public fact again: the snapshot must neither adopt it nor give it its attributes
    public = fact(world.public_a, "DEPENDS_ON", world.public_b, scopes=[SCOPE], attributes={"why": m})
    # a public fact of this snapshot source, then listed with the scope and new attributes: unchanged
    owned = fact(world.public_a, "FEEDS", world.public_b, attributes={"v": "public"})
    rescoped = fact(world.public_a, "FEEDS", world.public_b, scopes=[SCOPE], attributes={"v": m})
    run(f"s1-{world.tag}", [kept, dropped, public, owned])
    run(f"s2-{world.tag}", [kept, public, rescoped])
    return Written(
        "Reconcile",
        m,
        keys=[target, gone],
        fact_ids=[
            fid(world, world.public_b, "DEPENDS_ON", target),
            fid(world, world.public_b, "DEPENDS_ON", gone),
        ],
        anchors=[world.public_b],
        shown_in=(
            "GetSource",
            "ListFacts",
            "ListFacts(history)",
            "CompileContext",
            "CompileTypedContext",
            "GetTrace",
        ),
    )


def retain(world: World, channel: grpc.Channel) -> Written:
    m = world.marker("retain")
    key = f"doc:{m}"
    document_service_pb2_grpc.DocumentServiceStub(channel).Retain(
        document_service_pb2.RetainRequest(
            namespace=world.ns,
            natural_key=key,
            title=f"Doc {m}",
            content=f"# {m}\n\n{COMMON_WORD} retained secret {m}.",
            links=[world.public_a],
            scopes=[SCOPE, "task:t1"],
        ),
        timeout=120,
    )
    return Written("Retain", m, keys=[key], shown_in=("Search", "GetSource", "CompileContext", "GetTrace"))


def put_chunks(world: World, channel: grpc.Channel) -> Written:
    m = world.marker("chunks")
    key = f"doc:{m}"
    document_service_pb2_grpc.DocumentServiceStub(channel).PutChunks(
        document_service_pb2.PutChunksRequest(
            namespace=world.ns,
            natural_key=key,
            title=f"Chunks {m}",
            scopes=[SCOPE],
            chunks=[
                document_service_pb2.ChunkInput(
                    chunk_order=i, heading=f"h {m}", text=f"{COMMON_WORD} chunk {i} {m}"
                )
                for i in range(2)
            ],
        ),
        timeout=120,
    )
    return Written("PutChunks", m, keys=[key], shown_in=("Search", "GetSource", "CompileContext", "GetTrace"))


WRITE_PATHS: tuple[Callable[[World, grpc.Channel], Written], ...] = (
    obs_entity,
    obs_fact,
    obs_placeholder,
    obs_text,
    assert_facts,
    reconcile,
    retain,
    put_chunks,
)

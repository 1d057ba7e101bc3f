"""Scope attacks on memory records, for `tests/e2e/test_namespace_isolation.py`.

Two users of one organisation and environment (``ua`` attacks, ``ub`` is the victim) and an outsider of
another organisation with the same user id ``ua``. The victim holds memories in the organisation's
namespace and in project ``p1``, and a lossless summary. Every memory RPC is tried from the attacker
(and from the outsider) on the victim's ids, texts, user id and project: PERMISSION_DENIED, NOT_FOUND,
INVALID_ARGUMENT or results without the victim's data, and the victim's memories unchanged. Derived
things are attacked too: their chunks through Search, CompileContext and ListFacts inside the shared
namespace (the owner's visibility scope hides them) and from the outsider (no right on the namespace).
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import dataclass
from dataclasses import field
from pathlib import Path
from typing import Any

import grpc
import pytest
from google.protobuf import field_mask_pb2

from common.auth.principals import Right
from common.kernel.memory_names import memory_namespace
from memory_service_grpc_client import ClientSecurity
from memory_service_grpc_client import make_channel
from memory_service_grpc_client import rpc_failure
from memory_service_grpc_client.memory.v1 import context_service_pb2
from memory_service_grpc_client.memory.v1 import context_service_pb2_grpc
from memory_service_grpc_client.memory.v1 import fact_query_service_pb2
from memory_service_grpc_client.memory.v1 import fact_query_service_pb2_grpc
from memory_service_grpc_client.memory.v1 import memory_query_service_pb2
from memory_service_grpc_client.memory.v1 import memory_query_service_pb2_grpc
from memory_service_grpc_client.memory.v1 import memory_service_pb2
from memory_service_grpc_client.memory.v1 import memory_service_pb2_grpc
from memory_service_grpc_client.memory.v1 import retrieval_service_pb2
from memory_service_grpc_client.memory.v1 import retrieval_service_pb2_grpc
from memory_service_tools.token_writer import add_token

PROJECT = "p1"


def memory_user_tokens(
    tokens_file: Path, prefix: str, organization: str, users: dict[str, str]
) -> dict[str, str]:
    """Tokens of ``users`` (name -> user id) in the production memory of ``organization``, and of
    "outsider": user ua of another organization (``organization`` + "x")."""
    members = [(name, organization, user) for name, user in users.items()]
    tokens = {}
    for name, org, user in [*members, ("outsider", organization + "x", "ua")]:
        tokens[name], _ = add_token(
            tokens_file,
            principal=f"{prefix}-{name}-{organization}",
            namespaces={memory_namespace(org, "production"): [Right.READ, Right.WRITE]},
            memory_scope=(org, "production", user),
        )
    return tokens


@dataclass
class MemoryWorld:
    """The tokens and the victim's memories (filled by `load`)."""

    organization: str
    tokens: dict[str, str]
    marker: str
    victim_ids: dict[str, list[str]] = field(default_factory=dict)  # project ("" or p1) -> ids
    summary_id: str = ""
    ingest_addr: str = ""
    query_addr: str = ""

    @classmethod
    def create(cls, tokens_file: Path) -> MemoryWorld:
        organization = "iso" + uuid.uuid4().hex[:10]
        tokens = memory_user_tokens(tokens_file, "memory", organization, {"attacker": "ua", "victim": "ub"})
        return cls(organization=organization, tokens=tokens, marker="quokka" + uuid.uuid4().hex[:8])

    @property
    def namespaces(self) -> dict[str, str]:
        return {
            "": memory_namespace(self.organization, "production"),
            PROJECT: memory_namespace(self.organization, "production", PROJECT),
        }

    def channel(self, side: str, who: str) -> grpc.Channel:
        return make_channel(
            self.ingest_addr if side == "ingest" else self.query_addr,
            security=ClientSecurity(token=self.tokens[who]),
        )

    def write(self, who: str, method: str, request: Any, project: str = "") -> Any:
        with self.channel("ingest", who) as channel:
            stub = memory_service_pb2_grpc.MemoryServiceStub(channel)
            return getattr(stub, method)(request, timeout=120, metadata=_project(project))

    def read(self, who: str, method: str, request: Any, project: str = "") -> Any:
        with self.channel("query", who) as channel:
            stub = memory_query_service_pb2_grpc.MemoryQueryServiceStub(channel)
            return getattr(stub, method)(request, timeout=120, metadata=_project(project))


def _project(project: str) -> tuple[tuple[str, str], ...]:
    return (("x-project-id", project),) if project else ()


def _code(call: Callable[..., Any], *args: Any, **kwargs: Any) -> grpc.StatusCode:
    with pytest.raises(grpc.RpcError) as raised:
        call(*args, **kwargs)
    return rpc_failure(raised.value).code


def load(world: MemoryWorld) -> None:
    """The victim's memories: three per project, and a lossless summary of the organisation-level ones."""
    for project in ("", PROJECT):
        request = memory_service_pb2.AddMemoriesRequest(
            memories=[
                memory_service_pb2.NewMemory(
                    idempotency_key=f"k{i}",
                    text=f"The {world.marker} account {i} of user ub resets its password every Monday.",
                    tags=["secret"],
                )
                for i in range(3)
            ]
        )
        results = world.write("victim", "AddMemories", request, project).results
        world.victim_ids[project] = [r.memory_id for r in results]
        assert all(r.created for r in results)
    summary = world.write(
        "victim",
        "SummarizeMemories",
        memory_service_pb2.SummarizeMemoriesRequest(memory_ids=world.victim_ids[""], lossless=True),
    ).summary
    world.summary_id = summary.memory_id


def victim_untouched(world: MemoryWorld) -> None:
    """The victim's memories are as loaded (read by the victim)."""
    for project, ids in world.victim_ids.items():
        listed = world.read(
            "victim", "ListMemories", memory_query_service_pb2.ListMemoriesRequest(page_size=100), project
        ).memories
        by_id = {m.memory_id: m for m in listed}
        assert set(ids) <= set(by_id), project
        for memory_id in ids:
            assert world.marker in by_id[memory_id].text and by_id[memory_id].version == 1
            assert "attack" not in by_id[memory_id].text
    summary = world.read(
        "victim", "GetMemory", memory_query_service_pb2.GetMemoryRequest(memory_id=world.summary_id)
    )
    assert list(summary.memory.summarized_ids) == world.victim_ids[""]


def _every_victim_id(world: MemoryWorld) -> list[str]:
    return [*world.victim_ids[""], *world.victim_ids[PROJECT], world.summary_id]


def add_memories(world: MemoryWorld) -> None:
    """Naming the victim is denied; the victim's idempotency keys give the attacker memories of its own."""
    request = memory_service_pb2.AddMemoriesRequest(
        memories=[memory_service_pb2.NewMemory(idempotency_key="k0", text="attack")], user_id="ub"
    )
    assert _code(world.write, "attacker", "AddMemories", request) == grpc.StatusCode.PERMISSION_DENIED
    request.user_id = ""
    for who in ("attacker", "outsider"):
        for project in ("", PROJECT):
            result = world.write(who, "AddMemories", request, project).results[0]
            assert result.memory_id not in _every_victim_id(world)
    victim_untouched(world)


def update_memory(world: MemoryWorld) -> None:
    for memory_id in _every_victim_id(world):
        for who in ("attacker", "outsider"):
            for project in ("", PROJECT):
                request = memory_service_pb2.UpdateMemoryRequest(
                    memory_id=memory_id,
                    memory=memory_service_pb2.NewMemory(text="attack"),
                    update_mask=field_mask_pb2.FieldMask(paths=["text"]),
                )
                assert _code(world.write, who, "UpdateMemory", request, project) == grpc.StatusCode.NOT_FOUND
                request.user_id = "ub"
                assert (
                    _code(world.write, who, "UpdateMemory", request, project)
                    == grpc.StatusCode.PERMISSION_DENIED
                )
    victim_untouched(world)


def delete_memory(world: MemoryWorld) -> None:
    for memory_id in _every_victim_id(world):
        for who in ("attacker", "outsider"):
            for project in ("", PROJECT):
                request = memory_service_pb2.DeleteMemoryRequest(memory_id=memory_id, reason="attack")
                assert _code(world.write, who, "DeleteMemory", request, project) == grpc.StatusCode.NOT_FOUND
    victim_untouched(world)


def summarize_memories(world: MemoryWorld) -> None:
    for who in ("attacker", "outsider"):
        for project in ("", PROJECT):
            request = memory_service_pb2.SummarizeMemoriesRequest(memory_ids=world.victim_ids[project])
            assert (
                _code(world.write, who, "SummarizeMemories", request, project)
                == grpc.StatusCode.INVALID_ARGUMENT
            )
    victim_untouched(world)


def recall_memories(world: MemoryWorld) -> None:
    for who in ("attacker", "outsider"):
        for project in ("", PROJECT):
            request = memory_query_service_pb2.RecallMemoriesRequest(
                query=f"{world.marker} password Monday", top_k=100, expand_summaries=True
            )
            recalled = world.read(who, "RecallMemories", request, project).memories
            seen = {r.memory.memory_id for r in recalled} | {
                o.memory_id for r in recalled for o in r.expanded
            }
            assert not seen & set(_every_victim_id(world))
            assert all(world.marker not in r.memory.text for r in recalled)
    request = memory_query_service_pb2.RecallMemoriesRequest(query=world.marker, user_id="ub")
    assert _code(world.read, "attacker", "RecallMemories", request) == grpc.StatusCode.PERMISSION_DENIED
    victim_untouched(world)


def get_memory(world: MemoryWorld) -> None:
    for memory_id in _every_victim_id(world):
        for who in ("attacker", "outsider"):
            for project in ("", PROJECT):
                request = memory_query_service_pb2.GetMemoryRequest(memory_id=memory_id)
                assert _code(world.read, who, "GetMemory", request, project) == grpc.StatusCode.NOT_FOUND
    request = memory_query_service_pb2.GetMemoryRequest(memory_id=world.summary_id, user_id="ub")
    assert _code(world.read, "attacker", "GetMemory", request) == grpc.StatusCode.PERMISSION_DENIED


def list_memories(world: MemoryWorld) -> None:
    for who in ("attacker", "outsider"):
        for project in ("", PROJECT):
            request = memory_query_service_pb2.ListMemoriesRequest(
                page_size=500, include_expired=True, include_summarized=True
            )
            listed = world.read(who, "ListMemories", request, project).memories
            assert not {m.memory_id for m in listed} & set(_every_victim_id(world))
    request = memory_query_service_pb2.ListMemoriesRequest(user_id="ub")
    assert _code(world.read, "attacker", "ListMemories", request) == grpc.StatusCode.PERMISSION_DENIED


def derived_things(world: MemoryWorld) -> None:
    """Chunks (Search), packs (CompileContext) and facts (ListFacts) of the victim's memories: hidden from
    the attacker inside the shared namespace; the outsider has no right on it; the victim sees its own."""
    victim_ids = set(_every_victim_id(world))
    for project, namespace in world.namespaces.items():
        with world.channel("query", "victim") as channel:
            own = retrieval_service_pb2_grpc.RetrievalServiceStub(channel).Search(
                retrieval_service_pb2.SearchRequest(namespace=namespace, query=world.marker, top_k=50),
                timeout=60,
            )
            assert {h.node_key for h in own.hits} & victim_ids, project  # the attack below can fail
        with world.channel("query", "attacker") as channel:
            hits = (
                retrieval_service_pb2_grpc.RetrievalServiceStub(channel)
                .Search(
                    retrieval_service_pb2.SearchRequest(namespace=namespace, query=world.marker, top_k=100),
                    timeout=60,
                )
                .hits
            )
            assert not {h.node_key for h in hits} & victim_ids and all(
                world.marker not in h.text for h in hits
            )
            pack = (
                context_service_pb2_grpc.ContextServiceStub(channel)
                .CompileContext(
                    context_service_pb2.CompileContextRequest(
                        namespace=namespace, query=world.marker, anchors=sorted(victim_ids)
                    ),
                    timeout=60,
                )
                .pack
            )
            assert world.marker not in pack.text and all(world.marker not in i.text for i in pack.items)
            for memory_id in victim_ids:
                facts = (
                    fact_query_service_pb2_grpc.FactQueryServiceStub(channel)
                    .ListFacts(
                        fact_query_service_pb2.ListFactsRequest(
                            namespace=namespace, subject=memory_id, include_history=True
                        ),
                        timeout=60,
                    )
                    .facts
                )
                assert list(facts) == []
        with world.channel("query", "outsider") as channel:
            stub = retrieval_service_pb2_grpc.RetrievalServiceStub(channel)
            request = retrieval_service_pb2.SearchRequest(namespace=namespace, query=world.marker)
            assert _code(stub.Search, request, timeout=60) == grpc.StatusCode.PERMISSION_DENIED


ATTACKS: dict[str, Callable[[MemoryWorld], None]] = {
    "/memory.v1.MemoryService/AddMemories": add_memories,
    "/memory.v1.MemoryService/UpdateMemory": update_memory,
    "/memory.v1.MemoryService/DeleteMemory": delete_memory,
    "/memory.v1.MemoryService/SummarizeMemories": summarize_memories,
    "/memory.v1.MemoryQueryService/RecallMemories": recall_memories,
    "/memory.v1.MemoryQueryService/GetMemory": get_memory,
    "/memory.v1.MemoryQueryService/ListMemories": list_memories,
}
"""One attack per memory RPC (the derived things are attacked by `derived_things`, run with Recall)."""

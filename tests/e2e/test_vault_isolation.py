"""Hostile tenants: what a vault run derives (nodes, chunks, LINKS_TO edges, relation facts; no
placeholders for unresolved links) keeps namespaces apart and respects visibility scopes on every read
RPC, with bearer tokens on real servers."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

from common.auth.principals import Right
from common.kernel.config import Settings
from common.storage.database import Database
from memory_service_grpc_client import ClientSecurity
from memory_service_grpc_client import make_channel
from memory_service_grpc_client.memory.v1 import context_service_pb2
from memory_service_grpc_client.memory.v1 import context_service_pb2_grpc
from memory_service_grpc_client.memory.v1 import fact_query_service_pb2
from memory_service_grpc_client.memory.v1 import fact_query_service_pb2_grpc
from memory_service_grpc_client.memory.v1 import retrieval_service_pb2
from memory_service_grpc_client.memory.v1 import retrieval_service_pb2_grpc
from memory_service_grpc_client.memory.v1 import source_service_pb2
from memory_service_grpc_client.memory.v1 import source_service_pb2_grpc
from memory_service_tools.token_writer import add_token
from tests.e2e.conftest import token_secured_services
from tests.e2e.vault_helpers import ingest
from tests.e2e.vault_helpers import statuses
from tests.e2e.vault_helpers import write

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(600)]

SECRET = "Zanzibar-7 rotation keys live in the vault room."
PUBLIC = "The handbook explains how teams share rotation duties."


class Tenants:
    def __init__(self, tokens_file: Path) -> None:
        self.ns = "vault-iso-" + uuid.uuid4().hex[:10]
        self.other = "vault-iso-" + uuid.uuid4().hex[:10]
        self.writer, _ = add_token(
            tokens_file,
            principal="vault-writer",
            namespaces={self.ns: [Right.WRITE, Right.READ]},
            scopes=["workspace:secret"],
        )
        self.narrow_writer, _ = add_token(
            tokens_file, principal="narrow-writer", namespaces={self.ns: [Right.WRITE, Right.READ]}
        )
        self.other_writer, _ = add_token(
            tokens_file, principal="other-writer", namespaces={self.other: [Right.WRITE, Right.READ]}
        )
        self.outsider, _ = add_token(
            tokens_file, principal="vault-outsider", namespaces={self.ns: [Right.READ]}
        )
        self.insider, _ = add_token(
            tokens_file,
            principal="vault-insider",
            namespaces={self.ns: [Right.READ]},
            scopes=["workspace:secret"],
        )
        self.ingest_addr = self.query_addr = ""

    def ingest_channel(self, token: str) -> grpc.Channel:
        return make_channel(self.ingest_addr, security=ClientSecurity(token=token))

    def query_channel(self, token: str) -> grpc.Channel:
        return make_channel(self.query_addr, security=ClientSecurity(token=token))


@pytest.fixture(scope="module")
def tenants(settings: Settings, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Tenants]:
    folder = tmp_path_factory.mktemp("vault-isolation")
    world = Tenants(folder / "tokens.yaml")
    with token_secured_services(settings, folder / "tokens.yaml") as (world.ingest_addr, world.query_addr):
        # The other namespace holds doc:handbook and doc:elsewhere, which must never be linked across.
        other = folder / "other"
        write(other, "elsewhere.md", "---\nnatural_key: doc:elsewhere\n---\n# Elsewhere\n\nOther tenant.\n")
        ingest(world.ingest_channel(world.other_writer), other, world.other)
        vault = folder / "vault"
        write(
            vault,
            "secret.md",
            f"---\nscopes: [workspace:secret]\nrelated_to: handbook.md\n---\n# Secret\n\n{SECRET} See [[handbook]].\n",
        )
        write(
            vault,
            "handbook.md",
            f"---\nlinks: [doc:elsewhere]\n---\n# Handbook\n\n{PUBLIC} The [secret page](secret.md) is restricted.\n",
        )
        response = ingest(world.ingest_channel(world.writer), vault, world.ns)
        assert set(statuses(response).values()) == {"new"}
        world.response = response  # type: ignore[attr-defined]
        yield world


def test_no_edge_or_placeholder_crosses_namespaces(tenants: Tenants, database: Database) -> None:
    response = tenants.response  # type: ignore[attr-defined]
    unresolved = {(u.path, u.target) for u in response.unresolved_links}
    assert unresolved == {("handbook.md", "doc:elsewhere")}  # exists only in the other namespace
    with database.connection() as conn:
        keys = {
            str(row[0])
            for row in conn.execute("SELECT natural_key FROM graph_nodes WHERE namespace = %s", (tenants.ns,))
        }
    assert keys == {"doc:secret", "doc:handbook"}  # no placeholder for the unresolved link


def test_hidden_vault_document_stays_hidden_on_every_read(tenants: Tenants) -> None:
    outsider, insider = tenants.query_channel(tenants.outsider), tenants.query_channel(tenants.insider)
    search = retrieval_service_pb2_grpc.RetrievalServiceStub(outsider)
    hits = search.Search(
        retrieval_service_pb2.SearchRequest(namespace=tenants.ns, query="Zanzibar-7 rotation keys", top_k=20),
        timeout=60,
    ).hits
    assert hits and all(hit.node_key != "doc:secret" and "Zanzibar" not in hit.text for hit in hits)
    inside = retrieval_service_pb2_grpc.RetrievalServiceStub(insider).Search(
        retrieval_service_pb2.SearchRequest(namespace=tenants.ns, query="Zanzibar-7 rotation keys", top_k=20),
        timeout=60,
    )
    assert any(hit.node_key == "doc:secret" for hit in inside.hits)
    sources = source_service_pb2_grpc.SourceServiceStub(outsider)
    with pytest.raises(grpc.RpcError) as hidden:
        sources.GetSource(
            source_service_pb2.GetSourceRequest(namespace=tenants.ns, natural_key="doc:secret"), timeout=60
        )
    assert hidden.value.code() == grpc.StatusCode.NOT_FOUND
    facts = fact_query_service_pb2_grpc.FactQueryServiceStub(outsider)
    listed = facts.ListFacts(
        fact_query_service_pb2.ListFactsRequest(
            namespace=tenants.ns, object="doc:handbook", include_history=True
        ),
        timeout=60,
    )
    assert list(listed.facts) == []  # the secret document's RELATED_TO carries its scopes
    seen = fact_query_service_pb2_grpc.FactQueryServiceStub(insider).ListFacts(
        fact_query_service_pb2.ListFactsRequest(namespace=tenants.ns, object="doc:handbook"), timeout=60
    )
    assert [(f.subject, f.predicate) for f in seen.facts] == [("doc:secret", "RELATED_TO")]
    assert [list(f.scopes) for f in seen.facts] == [["workspace:secret"]]  # the document's own scopes
    context = context_service_pb2_grpc.ContextServiceStub(outsider)
    pack = context.CompileContext(
        context_service_pb2.CompileContextRequest(
            namespace=tenants.ns, query="rotation keys", anchors=["doc:handbook"], token_budget=4000
        ),
        timeout=120,
    ).pack
    assert "Zanzibar" not in pack.text and "doc:secret" not in pack.text


def test_a_writer_without_the_scope_cannot_project_or_sweep_it(tenants: Tenants, tmp_path: Path) -> None:
    vault = tmp_path / "narrow"
    write(vault, "handbook.md", f"# Handbook\n\n{PUBLIC}\n")
    write(vault, "secret.md", "---\nscopes: [workspace:secret]\n---\n# Secret, rewritten\n")
    response = ingest(tenants.ingest_channel(tenants.narrow_writer), vault, tenants.ns)
    assert statuses(response)["secret.md"] == "rejected" and not response.swept
    # Without the secret file, its run is complete, but it cannot see the secret node: not swept.
    (vault / "secret.md").unlink()
    response = ingest(tenants.ingest_channel(tenants.narrow_writer), vault, tenants.ns)
    assert response.swept and list(response.swept_keys) == []
    insider = source_service_pb2_grpc.SourceServiceStub(tenants.query_channel(tenants.insider))
    source = insider.GetSource(
        source_service_pb2.GetSourceRequest(namespace=tenants.ns, natural_key="doc:secret"), timeout=60
    )
    assert SECRET in source.source.content
    # And the other namespace's writer cannot run a vault into this namespace at all.
    with pytest.raises(grpc.RpcError) as denied:
        ingest(tenants.ingest_channel(tenants.other_writer), vault, tenants.ns)
    assert denied.value.code() == grpc.StatusCode.PERMISSION_DENIED

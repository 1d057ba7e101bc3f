"""TypedContextCompiler on the real database: what a restricted caller may not see never
reaches the typed pack — a hidden document linked by an identifier, its title, and a hidden anchor."""

from __future__ import annotations

import uuid

import pytest

from common.kernel.config import Settings
from common.kernel.errors import FailedPrecondition
from common.packs.domain_packs import PackRegistry
from common.packs.kind_validation import KindValidator
from common.storage.database import Database
from common.storage.visibility import Visibility
from common.text_models.embeddings.provider import EmbeddingProvider
from common.text_models.tokenizer import TokenCounter
from ingest_service.documents.validation import RetainInput
from ingest_service.documents.writer import DocumentWriter
from ingest_service.facts.assertions import FactAsserter
from query_service.context.typed_context import TypedContextCompiler
from query_service.context.typed_context import TypedContextRequest
from tests.integration.test_domain_packs import enable
from tests.unit.test_domain_packs import delivery_pack

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def compiler(database: Database, settings: Settings, kinds: KindValidator) -> TypedContextCompiler:
    return TypedContextCompiler(database, TokenCounter(settings.tokenizer_encoding), kinds)


def test_hidden_nodes_never_reach_the_typed_pack(
    database: Database,
    settings: Settings,
    provider: EmbeddingProvider,
    kinds: KindValidator,
    compiler: TypedContextCompiler,
    namespace: str,
) -> None:
    enable(PackRegistry(database), kinds, namespace, delivery_pack(uuid.uuid4().hex), strict=False)
    asserter = FactAsserter(database, kinds=kinds)
    asserter.assert_facts(
        namespace,
        [{"subject": "issue:PROJ-1", "predicate": "ASSIGNED_TO", "object": "person:ann"}],
    )
    writer = DocumentWriter(database, provider, settings, kinds=kinds)
    writer.retain(
        RetainInput(
            namespace=namespace,
            natural_key="doc:secret",
            title="Merger plan Zanzibar",
            content="# Plan\n\nBlocked by PROJ-1.",
            scopes=("workspace:board",),
        )
    )
    writer.retain(RetainInput(namespace=namespace, natural_key="doc:open", content="Public note on PROJ-1."))
    request = TypedContextRequest(namespace=namespace, query="status of PROJ-1", anchors=("doc:secret",))
    insider = compiler.compile(request)
    assert {item.natural_key for item in insider.items if item.kind == "node"} == {
        "issue:PROJ-1",
        "doc:secret",
        "doc:open",
        "person:ann",
    }
    assert "Zanzibar" in insider.text and "Blocked by PROJ-1." in insider.text  # title and first chunk
    outsider = compiler.compile(
        TypedContextRequest(
            namespace=namespace,
            query="status of PROJ-1",
            anchors=("doc:secret",),
            visibility=Visibility.of_scopes(["workspace:other"]),
        )
    )
    assert [(a.natural_key, a.found) for a in outsider.anchors] == [
        ("doc:secret", False),
        ("issue:PROJ-1", True),
    ]
    assert {item.natural_key for item in outsider.items if item.kind == "node"} == {
        "issue:PROJ-1",
        "doc:open",
        "person:ann",
    }
    assert "Zanzibar" not in outsider.text and "doc:secret" not in outsider.text
    assert "Blocked by" not in outsider.text and "Public note on PROJ-1." in outsider.text
    assert all("doc:secret" not in (step.node_key for step in item.path) for item in outsider.items)


def test_a_namespace_without_packs_is_a_failed_precondition(
    compiler: TypedContextCompiler, namespace: str
) -> None:
    with pytest.raises(FailedPrecondition) as raised:
        compiler.compile(TypedContextRequest(namespace=namespace, anchors=("issue:PROJ-1",)))
    assert raised.value.reason == "NO_DOMAIN_PACK" and "SetNamespaceKinds" in raised.value.message


def test_a_compilation_is_read_back_only_by_its_compiler(
    database: Database, kinds: KindValidator, compiler: TypedContextCompiler, namespace: str
) -> None:
    """GetTrace shows a compilation's query to the principal that compiled it (and to the unrestricted
    local superuser), never to another reader of the namespace (context_traces.scopes, migration 0008)."""
    from common.kernel.errors import NotFound
    from query_service.readers.traces import TraceReader

    enable(PackRegistry(database), kinds, namespace, delivery_pack(uuid.uuid4().hex), strict=False)
    FactAsserter(database, kinds=kinds).assert_facts(
        namespace, [{"subject": "issue:PROJ-7", "predicate": "ASSIGNED_TO", "object": "person:ann"}]
    )
    alice = Visibility.of_scopes([], owner="principal:alice")
    bob = Visibility.of_scopes(["workspace:ops"], owner="principal:bob")
    compiler.compile(
        TypedContextRequest(
            namespace=namespace, query="salary review of PROJ-7", trace_id="t-owner", visibility=alice
        )
    )
    reader = TraceReader(database)
    with pytest.raises(NotFound):
        reader.get_trace(namespace, "t-owner", visibility=bob)
    for viewer in (alice, Visibility.everything()):
        trail = reader.get_trace(namespace, "t-owner", visibility=viewer)
        compilations = [entry.compilation for entry in trail.entries if entry.compilation is not None]
        assert [c.request["query"] for c in compilations] == ["salary review of PROJ-7"]

"""Personal data end to end (docs/how-to/personal-data.md; docs/how-to/tokens-and-scopes.md).

Two pairs of real servers over real channels with the real database and embedder:

* protection on (``CB_PII_PROTECTION=true``) with a tokens file: a writer, a reader without PII clearance
  and a reader with it;
* protection off, development mode (the session servers of ``tests/e2e/conftest.py``).

The texts are synthetic Russian and English letters, tickets and CRM notes; every number was made with
its check digits (see ``tests/unit/test_pii.py``).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest
from google.protobuf import json_format

from common.auth.principals import Right
from common.kernel.config import Settings
from common.storage.chunks.store import ChunkStore
from common.storage.database import Database
from common.storage.graph.store import GraphStore
from memory_service_grpc_client import ClientSecurity
from memory_service_grpc_client import make_channel
from memory_service_grpc_client.memory.v1 import context_service_pb2
from memory_service_grpc_client.memory.v1 import context_service_pb2_grpc
from memory_service_grpc_client.memory.v1 import document_service_pb2
from memory_service_grpc_client.memory.v1 import document_service_pb2_grpc
from memory_service_grpc_client.memory.v1 import fact_query_service_pb2
from memory_service_grpc_client.memory.v1 import fact_query_service_pb2_grpc
from memory_service_grpc_client.memory.v1 import observation_query_service_pb2
from memory_service_grpc_client.memory.v1 import observation_query_service_pb2_grpc
from memory_service_grpc_client.memory.v1 import retrieval_service_pb2
from memory_service_grpc_client.memory.v1 import retrieval_service_pb2_grpc
from memory_service_grpc_client.memory.v1 import source_service_pb2
from memory_service_grpc_client.memory.v1 import source_service_pb2_grpc
from tests.e2e.audit_reads import trace_audit_events
from tests.e2e.conftest import token_secured_services
from tests.e2e.pii_corpus import CARD
from tests.e2e.pii_corpus import CLIENT_CARD
from tests.e2e.pii_corpus import EMAIL
from tests.e2e.pii_corpus import EN_EMAIL
from tests.e2e.pii_corpus import EN_PHONE
from tests.e2e.pii_corpus import FIO
from tests.e2e.pii_corpus import INN_12
from tests.e2e.pii_corpus import PASSPORT
from tests.e2e.pii_corpus import PHONE
from tests.e2e.pii_corpus import RU_LETTER
from tests.e2e.pii_corpus import SECRETS
from tests.e2e.pii_corpus import SNILS
from tests.e2e.pii_corpus import write_corpus
from tests.e2e.pii_corpus import write_team
from tests.e2e.test_domain_packs import _register
from tests.e2e.token_grants import grant
from tests.unit.test_domain_packs import delivery_pack

pytestmark = pytest.mark.e2e


class World:
    """The protected servers' tokens and addresses, and one namespace for this module."""

    def __init__(self, tokens_file: Path) -> None:
        self.tokens_file = tokens_file
        self.namespace = "pii-" + uuid.uuid4().hex[:10]
        self.typed_namespace = "pii-typed-" + uuid.uuid4().hex[:10]  # with a domain pack enabled
        both = (self.namespace, self.typed_namespace)
        self.writer = grant(tokens_file, "pii-writer", Right.ADMIN, both)
        self.reader = grant(tokens_file, "pii-reader", Right.READ, both)
        self.cleared = grant(tokens_file, "pii-officer", Right.READ, both, pii_clearance=True)
        self.admin = grant(tokens_file, "pii-admin", Right.ADMIN, ["*"])  # packs
        self.ingest_addr = self.query_addr = ""

    def ingest(self, token: str = "") -> grpc.Channel:
        return make_channel(self.ingest_addr, security=ClientSecurity(token=token or self.writer))

    def query(self, token: str) -> grpc.Channel:
        return make_channel(self.query_addr, security=ClientSecurity(token=token))


@pytest.fixture(scope="module")
def world(settings: Settings, tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    world = World(tmp_path_factory.mktemp("pii") / "tokens.yaml")
    with token_secured_services(settings, world.tokens_file, pii_protection=True) as (
        world.ingest_addr,
        world.query_addr,
    ):
        with world.ingest() as channel:
            write_corpus(channel, world.namespace)
        with world.ingest(world.admin) as channel:
            _register(channel, delivery_pack(uuid.uuid4().hex), world.typed_namespace, strict=False)
        with world.ingest() as channel:
            write_team(channel, world.typed_namespace)
        yield world


def _observation_id(world: World, external_id: str) -> str:
    from common.kernel.identifiers import observation_id

    return observation_id(world.namespace, "crm", "calls", external_id)


def _assert_no_secret(text: str) -> None:
    for secret in SECRETS:
        assert secret not in text, (secret, text)


def _search(channel: grpc.Channel, namespace: str, query: str, **kwargs: Any) -> Any:
    stub = retrieval_service_pb2_grpc.RetrievalServiceStub(channel)
    return stub.Search(
        retrieval_service_pb2.SearchRequest(namespace=namespace, query=query, **kwargs), timeout=60
    )


def _source(channel: grpc.Channel, namespace: str, key: str, **kwargs: Any) -> Any:
    stub = source_service_pb2_grpc.SourceServiceStub(channel)
    return stub.GetSource(
        source_service_pb2.GetSourceRequest(namespace=namespace, natural_key=key), timeout=60, **kwargs
    ).source


def test_marks_on_write(world: World, database: Database) -> None:
    graph, chunks = GraphStore(database), ChunkStore(database.settings)
    ns = world.namespace
    call_1, call_2 = _observation_id(world, "call-1"), _observation_id(world, "call-2")
    with database.connection() as conn:
        props = {
            key: (graph.get_node(conn, ns, key) or {}).get("props") or {}
            for key in (
                "doc:refund-letter",
                "doc:client-card",
                "ticket:SUP-4821",
                f"episode:{call_1}",
                f"episode:{call_2}",
                f"text:{call_1}/1",
            )
        }
        letter_chunks = chunks.list_chunks(conn, ns, "doc:refund-letter")
    marks = {key: (value.get("pii"), value.get("pii_categories")) for key, value in props.items()}
    assert marks == {
        "doc:refund-letter": (True, ["card", "email", "inn", "passport_rf", "phone", "snils"]),
        "doc:client-card": (True, ["address", "fio"]),  # explicit marks; nothing detectable in it
        "ticket:SUP-4821": (True, ["email", "phone"]),
        f"episode:{call_1}": (True, ["email", "phone"]),
        f"episode:{call_2}": (True, ["fio"]),
        f"text:{call_1}/1": (True, ["phone"]),
    }
    # Chunks carry the node's marks (what the output masking reads).
    assert letter_chunks and all(
        chunk.meta.get("pii_categories") == marks["doc:refund-letter"][1] for chunk in letter_chunks
    )


def test_search_is_masked_for_an_uncleared_token(world: World) -> None:
    with world.query(world.reader) as channel:
        hits = _search(channel, world.namespace, "возврат заказа телефон почта карта", top_k=20).hits
        withheld = _search(channel, world.namespace, "карточка клиента", node_keys=["doc:client-card"]).hits
    keys = {hit.node_key for hit in hits}
    assert {"doc:refund-letter", "ticket:SUP-4821"} <= keys, keys
    for hit in hits:
        _assert_no_secret(f"{hit.title} {hit.heading} {hit.text} {hit.node_key} {hit.provenance}")
    letter = next(hit for hit in hits if hit.node_key == "doc:refund-letter")
    for placeholder in ("[phone]", "[email]", "[card]", "[inn]", "[snils]", "[passport_rf]"):
        assert placeholder in letter.text, letter.text
    # Not personal data: kept as written.
    assert (
        "ORD-2024-000123" in letter.text and "1 299,00 ₽" in letter.text and "2.36-9+deb12u4" in letter.text
    )
    # A document marked fio/address: the detector cannot find the name, so its text is withheld.
    assert len(withheld) == 1
    card = withheld[0]
    assert card.node_key == "doc:client-card"
    assert card.text == card.title == "[withheld: address, fio]"
    assert FIO not in f"{card.title} {card.heading} {card.text}" and "Ленина" not in card.text


def test_get_source_is_masked_or_withheld_for_an_uncleared_token(world: World) -> None:
    with world.query(world.reader) as channel:
        letter = _source(channel, world.namespace, "doc:refund-letter")
        ticket = _source(channel, world.namespace, "ticket:SUP-4821")
        card = _source(channel, world.namespace, "doc:client-card")
    _assert_no_secret(letter.content)
    assert letter.content == RU_LETTER.replace(PASSPORT, "[passport_rf]").replace(INN_12, "[inn]").replace(
        SNILS, "[snils]"
    ).replace(CARD, "[card]").replace(PHONE, "[phone]").replace(EMAIL, "[email]")
    assert ticket.content_source == "chunks" and "[phone]" in ticket.content and "[email]" in ticket.content
    assert (
        "3b18e512dba79e4c8300dd08aeb37f8e728b8dad" in ticket.content and "192.168.100.200" in ticket.content
    )
    assert card.content == "[withheld: address, fio]" and card.title == "[withheld: address, fio]"
    assert card.natural_key == "doc:client-card"


def test_list_facts_is_masked_for_an_uncleared_token(world: World) -> None:
    with world.query(world.reader) as channel:
        stub = fact_query_service_pb2_grpc.FactQueryServiceStub(channel)
        facts = stub.ListFacts(
            fact_query_service_pb2.ListFactsRequest(namespace=world.namespace, subject="customer:c-1001"),
            timeout=60,
        ).facts
    assert len(facts) == 1
    fact = facts[0]
    assert fact.object == "email:[email]"
    attributes = json_format.MessageToDict(fact.attributes)
    assert attributes == {"phone": "[phone]", "order": "ORD-2024-000123", "[email]": "cc"}


def test_get_observation_is_masked_or_withheld_for_an_uncleared_token(world: World) -> None:
    with world.query(world.reader) as channel:
        stub = observation_query_service_pb2_grpc.ObservationQueryServiceStub(channel)
        call_1 = stub.GetObservation(
            observation_query_service_pb2.GetObservationRequest(
                namespace=world.namespace, observation_id=_observation_id(world, "call-1")
            ),
            timeout=60,
        ).observation
        call_2 = stub.GetObservation(
            observation_query_service_pb2.GetObservationRequest(
                namespace=world.namespace, observation_id=_observation_id(world, "call-2")
            ),
            timeout=60,
        ).observation
    assert call_1.content == "Клиентка перезвонила с номера [phone], просит чек на [email]."
    as_json = json_format.MessageToJson(call_1)
    _assert_no_secret(as_json)
    # Keys are masked like values: an email used as a Struct key does not leak.
    assert json_format.MessageToDict(call_1.data) == {
        "callback": "[phone]",
        "order": "ORD-2024-000123",
        "[email]": "receipt address",
    }
    assert call_1.assertions[1].text.text == "Запасной телефон [phone]"
    # Marked fio: the name is not detectable, so content, data and assertions are withheld.
    assert call_2.content == "[withheld: fio]" and FIO not in json_format.MessageToJson(call_2)
    assert call_2.observation_id == _observation_id(world, "call-2") and call_2.kind == "call-note"


def test_compile_context_is_masked_before_fitting(world: World) -> None:
    with world.query(world.reader) as channel:
        stub = context_service_pb2_grpc.ContextServiceStub(channel)
        pack = stub.CompileContext(
            context_service_pb2.CompileContextRequest(
                namespace=world.namespace,
                query="возврат заказа: телефон и почта клиента, карточка клиента",
                anchors=["customer:c-1001"],
                token_budget=600,
            ),
            timeout=120,
        ).pack
    assert pack.items and pack.token_count <= 600
    _assert_no_secret(pack.text)
    assert FIO not in pack.text
    for item in pack.items:
        _assert_no_secret(item.text)
        assert item.text in pack.text
    assert "[phone]" in pack.text and "[email]" in pack.text
    # The budget counts the masked text: the returned count is the count of the returned text.
    from common.text_models.tokenizer import TokenCounter

    assert TokenCounter(Settings().tokenizer_encoding).count(pack.text) == pack.token_count


def test_compile_typed_context_is_masked_for_an_uncleared_token(world: World) -> None:
    request = context_service_pb2.CompileTypedContextRequest(
        namespace=world.typed_namespace, anchors=["team:core"], token_budget=400
    )
    with world.query(world.reader) as channel:
        masked = (
            context_service_pb2_grpc.ContextServiceStub(channel)
            .CompileTypedContext(request, timeout=120)
            .pack
        )
    with world.query(world.cleared) as channel:
        shown = (
            context_service_pb2_grpc.ContextServiceStub(channel)
            .CompileTypedContext(request, timeout=120)
            .pack
        )
        events = trace_audit_events(channel, world.typed_namespace, shown.trace_id)
    alice = next(item for item in masked.items if item.kind == "node" and item.natural_key == "person:alice")
    assert '"email":"[email]"' in alice.text and '"phone":"[phone]"' in alice.text and "on-call" in alice.text
    _assert_no_secret(masked.text)
    assert masked.token_count <= 400
    # A node marked fio: its title (the name) is withheld, its key stays.
    named = next(item for item in masked.items if item.kind == "node" and item.natural_key == "person:p-2002")
    assert named.text == "[person] person:p-2002 [withheld: fio]" and FIO not in masked.text
    assert EN_EMAIL in shown.text and EN_PHONE in shown.text and FIO in shown.text
    assert [event.action for event in events] == ["pii_access"]
    details = json_format.MessageToDict(events[0].details)
    assert details["method"] == "/memory.v1.ContextService/CompileTypedContext"
    assert details["categories"] == ["email", "fio", "phone"]
    assert {"person:alice", "person:p-2002"} <= set(details["natural_keys"])


def test_cleared_token_gets_unmasked_output_and_an_audit_event(world: World) -> None:
    request_id = "pii-e2e-" + uuid.uuid4().hex[:8]
    with world.query(world.cleared) as channel:
        letter = _source(
            channel, world.namespace, "doc:refund-letter", metadata=(("x-request-id", request_id),)
        )
        card = _source(channel, world.namespace, "doc:client-card")
        events = trace_audit_events(channel, world.namespace, request_id)
        hits = _search(
            channel, world.namespace, "Support ticket SUP-4821", node_keys=["ticket:SUP-4821"]
        ).hits
        pack = (
            context_service_pb2_grpc.ContextServiceStub(channel)
            .CompileContext(
                context_service_pb2.CompileContextRequest(
                    namespace=world.namespace,
                    query="Support ticket SUP-4821 customer phone",
                    token_budget=800,
                ),
                timeout=120,
            )
            .pack
        )
        context_events = trace_audit_events(channel, world.namespace, pack.trace_id)
    assert letter.content == RU_LETTER and card.content == CLIENT_CARD and FIO in card.title
    assert [event.action for event in events] == ["pii_access"]
    event = events[0]
    assert event.principal == "pii-officer" and event.target_key == "doc:refund-letter"
    details = json_format.MessageToDict(event.details)
    assert details["method"] == "/memory.v1.SourceService/GetSource"
    assert details["categories"] == ["card", "email", "inn", "passport_rf", "phone", "snils"]
    assert details["natural_keys"] == ["doc:refund-letter"]
    assert EN_PHONE in hits[0].text and EN_EMAIL in hits[0].text
    assert EN_PHONE in pack.text
    assert [event.action for event in context_events] == ["pii_access"]
    context_details = json_format.MessageToDict(context_events[0].details)
    assert context_details["method"] == "/memory.v1.ContextService/CompileContext"
    assert "ticket:SUP-4821" in context_details["natural_keys"] and "phone" in context_details["categories"]
    # The events name what the cleared caller was shown: other readers of the namespace (the uncleared
    # reader holds no principal:pii-officer scope) do not see them (hostile-tenant finding).
    assert events[0].scopes == ["principal:pii-officer"]
    with world.query(world.reader) as channel:
        for trace_id in (request_id, pack.trace_id):
            with pytest.raises(grpc.RpcError) as hidden:
                trace_audit_events(channel, world.namespace, trace_id)
            assert hidden.value.code() == grpc.StatusCode.NOT_FOUND, trace_id


def test_cleared_token_without_personal_data_writes_no_audit_event(world: World) -> None:
    request_id = "pii-e2e-none-" + uuid.uuid4().hex[:8]
    with world.query(world.cleared) as channel:
        stub = fact_query_service_pb2_grpc.FactQueryServiceStub(channel)
        stub.ListFacts(
            fact_query_service_pb2.ListFactsRequest(namespace=world.namespace, subject="customer:nobody"),
            timeout=60,
            metadata=(("x-request-id", request_id),),
        )
        with pytest.raises(grpc.RpcError) as raised:
            trace_audit_events(channel, world.namespace, request_id)
    assert raised.value.code() == grpc.StatusCode.NOT_FOUND


def test_uncleared_reads_write_no_audit_event(world: World) -> None:
    request_id = "pii-e2e-masked-" + uuid.uuid4().hex[:8]
    with world.query(world.reader) as channel:
        _source(channel, world.namespace, "doc:refund-letter", metadata=(("x-request-id", request_id),))
    with world.query(world.cleared) as channel, pytest.raises(grpc.RpcError) as raised:
        trace_audit_events(channel, world.namespace, request_id)
    assert raised.value.code() == grpc.StatusCode.NOT_FOUND


def test_protection_off_masks_nothing_and_keeps_explicit_marks(
    ingest_channel: grpc.Channel, query_channel: grpc.Channel, namespace: str, database: Database
) -> None:
    documents = document_service_pb2_grpc.DocumentServiceStub(ingest_channel)
    documents.Retain(
        document_service_pb2.RetainRequest(
            namespace=namespace, natural_key="doc:refund-letter", content=RU_LETTER
        ),
        timeout=120,
    )
    documents.Retain(
        document_service_pb2.RetainRequest(
            namespace=namespace, natural_key="doc:client-card", content=CLIENT_CARD, pii_categories=["fio"]
        ),
        timeout=120,
    )
    letter = _source(query_channel, namespace, "doc:refund-letter")
    card = _source(query_channel, namespace, "doc:client-card")
    hits = _search(query_channel, namespace, "возврат заказа телефон", node_keys=["doc:refund-letter"]).hits
    assert letter.content == RU_LETTER and card.content == CLIENT_CARD
    assert hits and PHONE in " ".join(hit.text for hit in hits)
    graph = GraphStore(database)
    with database.connection() as conn:
        letter_props = (graph.get_node(conn, namespace, "doc:refund-letter") or {})["props"]
        card_props = (graph.get_node(conn, namespace, "doc:client-card") or {})["props"]
    # Nothing detected without protection; explicit marks stored as given.
    assert (letter_props["pii"], letter_props["pii_categories"]) == (False, [])
    assert (card_props["pii"], card_props["pii_categories"]) == (False, ["fio"])

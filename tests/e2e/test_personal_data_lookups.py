"""A lookup by a value that holds personal data is no membership oracle (docs/how-to/personal-data.md).

Real servers with ``CB_PII_PROTECTION=true`` and a tokens file: a writer, a reader without PII clearance
and a reader with it. The uncleared reader's output masks every e-mail; if GetSource of
``contact:anna@example.org`` answered with a (masked) view where an unknown address answers NOT_FOUND,
the reader would learn that Anna is stored. So such lookups are refused alike, whatever is stored, and
the cleared reader still looks up by the value.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from dataclasses import dataclass

import grpc
import pytest

from common.auth.principals import Right
from common.kernel.config import Settings
from memory_service_grpc_client import ClientSecurity
from memory_service_grpc_client import make_channel
from memory_service_grpc_client import rpc_failure
from memory_service_grpc_client.memory.v1 import change_feed_service_pb2
from memory_service_grpc_client.memory.v1 import change_feed_service_pb2_grpc
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
from tests.e2e.query_service_data import assert_facts
from tests.e2e.query_service_data import retain

pytestmark = pytest.mark.e2e

STORED = "anna.petrova@example.org"
UNKNOWN = "nobody.here@example.org"


@dataclass
class Lookups:
    namespace: str
    query_address: str
    uncleared: str
    cleared: str

    def channel(self, token: str) -> grpc.Channel:
        return make_channel(self.query_address, security=ClientSecurity(token=token))


@pytest.fixture(scope="module")
def lookups(settings: Settings, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Lookups]:
    namespace = "pii-lookups-" + uuid.uuid4().hex[:8]
    tokens = tmp_path_factory.mktemp("lookups") / "tokens.yaml"
    writer, _ = add_token(tokens, principal="lookup-writer", namespaces={namespace: [Right.WRITE]})
    uncleared, _ = add_token(tokens, principal="lookup-reader", namespaces={namespace: [Right.READ]})
    cleared, _ = add_token(
        tokens, principal="lookup-officer", namespaces={namespace: [Right.READ]}, pii_clearance=True
    )
    with token_secured_services(settings, tokens, pii_protection=True) as (ingest_address, query_address):
        with make_channel(ingest_address, security=ClientSecurity(token=writer)) as channel:
            contact = f"contact:{STORED}"
            retain(channel, namespace, contact, f"# Contact\n\nAnna answers at {STORED}.\n")
            works_on = {"subject": contact, "predicate": "WORKS_ON", "object": "project:atlas"}
            assert_facts(channel, namespace, [works_on])
        yield Lookups(namespace, query_address, uncleared, cleared)


def _get_source(channel: grpc.Channel, namespace: str, key: str) -> source_service_pb2.GetSourceResponse:
    return source_service_pb2_grpc.SourceServiceStub(channel).GetSource(
        source_service_pb2.GetSourceRequest(namespace=namespace, natural_key=key), timeout=60
    )


def _list_facts(
    channel: grpc.Channel, namespace: str, **filters: str
) -> fact_query_service_pb2.ListFactsResponse:
    return fact_query_service_pb2_grpc.FactQueryServiceStub(channel).ListFacts(
        fact_query_service_pb2.ListFactsRequest(namespace=namespace, **filters), timeout=60
    )


def _search(channel: grpc.Channel, namespace: str, key: str) -> retrieval_service_pb2.SearchResponse:
    return retrieval_service_pb2_grpc.RetrievalServiceStub(channel).Search(
        retrieval_service_pb2.SearchRequest(namespace=namespace, query="contact", node_keys=[key]), timeout=60
    )


def _compile(channel: grpc.Channel, namespace: str, key: str) -> context_service_pb2.CompileContextResponse:
    return context_service_pb2_grpc.ContextServiceStub(channel).CompileContext(
        context_service_pb2.CompileContextRequest(namespace=namespace, anchors=[key], token_budget=500),
        timeout=60,
    )


def _compile_typed(channel: grpc.Channel, namespace: str, key: str) -> object:
    return context_service_pb2_grpc.ContextServiceStub(channel).CompileTypedContext(
        context_service_pb2.CompileTypedContextRequest(namespace=namespace, anchors=[key], token_budget=500),
        timeout=60,
    )


def _first_change(channel: grpc.Channel, namespace: str, prefix: str) -> object:
    stream = change_feed_service_pb2_grpc.ChangeFeedServiceStub(channel).WatchChanges(
        change_feed_service_pb2.WatchChangesRequest(namespace=namespace, key_prefixes=[prefix]), timeout=60
    )
    try:
        return next(stream)
    finally:
        stream.cancel()


def _refusal(call: object) -> tuple[grpc.StatusCode, str, dict[str, str]]:
    with pytest.raises(grpc.RpcError) as refused:
        call()  # type: ignore[operator]
    failure = rpc_failure(refused.value)
    return failure.code, failure.reason, {k: v for k, v in failure.metadata.items() if k != "request_id"}


def test_an_uncleared_reader_is_refused_alike_for_a_stored_and_an_unknown_address(lookups: Lookups) -> None:
    ns = lookups.namespace
    with lookups.channel(lookups.uncleared) as channel:

        def refusals(address: str) -> list[tuple[grpc.StatusCode, str, dict[str, str]]]:
            key = f"contact:{address}"
            return [
                _refusal(lambda: _get_source(channel, ns, key)),
                _refusal(lambda: _list_facts(channel, ns, subject=key)),
                _refusal(lambda: _list_facts(channel, ns, object=key)),
                _refusal(lambda: _search(channel, ns, key)),
                _refusal(lambda: _first_change(channel, ns, key)),
                _refusal(lambda: _compile(channel, ns, key)),
                _refusal(lambda: _compile_typed(channel, ns, key)),
            ]

        answers = {address: refusals(address) for address in (STORED, UNKNOWN)}
    assert answers[STORED] == answers[UNKNOWN], answers
    assert answers[STORED] == [
        (grpc.StatusCode.PERMISSION_DENIED, "PII_CLEARANCE_REQUIRED", {"field": "natural_key"}),
        (grpc.StatusCode.PERMISSION_DENIED, "PII_CLEARANCE_REQUIRED", {"field": "subject"}),
        (grpc.StatusCode.PERMISSION_DENIED, "PII_CLEARANCE_REQUIRED", {"field": "object"}),
        (grpc.StatusCode.PERMISSION_DENIED, "PII_CLEARANCE_REQUIRED", {"field": "node_keys[0]"}),
        (grpc.StatusCode.PERMISSION_DENIED, "PII_CLEARANCE_REQUIRED", {"field": "key_prefixes[0]"}),
        (grpc.StatusCode.PERMISSION_DENIED, "PII_CLEARANCE_REQUIRED", {"field": "anchors[0]"}),
        (grpc.StatusCode.PERMISSION_DENIED, "PII_CLEARANCE_REQUIRED", {"field": "anchors[0]"}),
    ]


def test_an_uncleared_reader_still_reads_by_keys_without_personal_data(lookups: Lookups) -> None:
    with lookups.channel(lookups.uncleared) as channel:
        facts = _list_facts(channel, lookups.namespace, object="project:atlas").facts
        with pytest.raises(grpc.RpcError) as missing:
            _get_source(channel, lookups.namespace, "contact:nobody")
    assert [(f.subject, f.predicate) for f in facts] == [("contact:[email]", "WORKS_ON")]  # found, masked
    assert missing.value.code() == grpc.StatusCode.NOT_FOUND


def test_a_cleared_reader_looks_up_by_the_address(lookups: Lookups) -> None:
    with lookups.channel(lookups.cleared) as channel:
        source = _get_source(channel, lookups.namespace, f"contact:{STORED}").source
        facts = _list_facts(channel, lookups.namespace, subject=f"contact:{STORED}").facts
        hits = _search(channel, lookups.namespace, f"contact:{STORED}").hits
        change = _first_change(channel, lookups.namespace, f"contact:{STORED}")
        pack = _compile(channel, lookups.namespace, f"contact:{STORED}").pack
        with pytest.raises(grpc.RpcError) as missing:
            _get_source(channel, lookups.namespace, f"contact:{UNKNOWN}")
    assert STORED in source.content and source.natural_key == f"contact:{STORED}"
    assert [f.object for f in facts] == ["project:atlas"]
    assert hits and {hit.node_key for hit in hits} == {f"contact:{STORED}"}
    assert isinstance(change, change_feed_service_pb2.WatchChangesResponse) and change.HasField("change")
    assert f"contact:{STORED}" in (change.change.item_key, change.change.subject_key), change
    assert any("project:atlas" in item.text for item in pack.items), pack
    assert missing.value.code() == grpc.StatusCode.NOT_FOUND

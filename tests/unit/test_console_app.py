"""The console's own rules, without services: the sign-in cookie, where a sign-in may send the browser,
the headers every page carries, the address checks, and the pure helpers of the pages (ranks per ranking,
validity at an instant, summary lineage, JSON inside a script block). The pages against real services are
tests/e2e/test_console_browser.py."""

from __future__ import annotations

import json
import re
from datetime import UTC
from datetime import datetime

import pytest
from google.protobuf.timestamp_pb2 import Timestamp
from starlette.testclient import TestClient

from memory_service_grpc_client.memory.v1 import knowledge_pb2
from memory_service_grpc_client.memory.v1 import memory_record_pb2
from memory_service_grpc_client.memory.v1 import retrieval_service_pb2
from memory_service_tools.console import ConsoleConfig
from memory_service_tools.console import create_app
from memory_service_tools.console.app import TOKEN_COOKIE
from memory_service_tools.console.app import _safe_next
from memory_service_tools.console.routes.graph import kind_of
from memory_service_tools.console.routes.graph import script_json
from memory_service_tools.console.routes.memories import lineage
from memory_service_tools.console.routes.node import live_at
from memory_service_tools.console.routes.search import arm_ranks
from memory_service_tools.console.views import BadAddress
from memory_service_tools.console.views import parse_instant

# Nothing listens on port 1: every call fails UNAVAILABLE at once, which the pages must survive.
NOWHERE = ConsoleConfig(ingest_addr="127.0.0.1:1", query_addr="127.0.0.1:1")


@pytest.fixture
def client() -> TestClient:
    return TestClient(create_app(NOWHERE), base_url="http://console.test")


def test_a_page_without_a_token_is_the_login_page(client: TestClient) -> None:
    response = client.get("/search?ns=example&q=x")
    assert response.status_code == 401
    assert 'name="token"' in response.text
    assert 'value="/search?ns=example&amp;q=x"' in response.text, "back to the page asked for"


def test_sign_in_keeps_the_token_in_a_strict_httponly_cookie(client: TestClient) -> None:
    response = client.post(
        "/login", data={"token": "cbt_secret", "next": "/node?ns=a&key=b"}, follow_redirects=False
    )
    assert response.status_code == 303
    assert response.headers["location"] == "/node?ns=a&key=b"
    cookie = response.headers["set-cookie"]
    assert cookie.startswith(f"{TOKEN_COOKIE}=cbt_secret;")
    assert "HttpOnly" in cookie and "SameSite=strict" in cookie and "Path=/" in cookie
    assert "Secure" not in cookie, "only with secure_cookie"
    secure = TestClient(create_app(ConsoleConfig("127.0.0.1:1", "127.0.0.1:1", secure_cookie=True)))
    assert (
        "Secure" in secure.post("/login", data={"token": "t"}, follow_redirects=False).headers["set-cookie"]
    )


@pytest.mark.parametrize("token", ["", "two words", "x" * 5000])
def test_a_malformed_token_is_refused_with_the_field_named(client: TestClient, token: str) -> None:
    response = client.post("/login", data={"token": token}, follow_redirects=False)
    assert response.status_code == 400
    assert "token:" in response.text and "set-cookie" not in response.headers


def test_a_cross_site_sign_in_is_refused(client: TestClient) -> None:
    response = client.post(
        "/login", data={"token": "t"}, headers={"origin": "https://evil.example"}, follow_redirects=False
    )
    assert response.status_code == 403 and "set-cookie" not in response.headers
    same = client.post(
        "/login", data={"token": "t"}, headers={"origin": "http://console.test"}, follow_redirects=False
    )
    assert same.status_code == 303


@pytest.mark.parametrize(
    ("target", "expected"),
    [
        ("/pack?ns=a", "/pack?ns=a"),
        ("https://evil.example/", "/"),
        ("//evil.example/", "/"),
        ("/\\evil.example", "/"),
        ("javascript:alert(1)", "/"),
        ("pack", "/"),
        ("/a\nb", "/"),
    ],
)
def test_sign_in_returns_only_to_the_console(target: str, expected: str) -> None:
    assert _safe_next(target) == expected


def test_every_answer_carries_the_security_headers(client: TestClient) -> None:
    for response in (client.get("/login"), client.get("/search"), client.get("/healthz")):
        assert "script-src 'self'" in response.headers["content-security-policy"]
        assert "frame-ancestors 'none'" in response.headers["content-security-policy"]
        assert response.headers["referrer-policy"] == "same-origin"
        assert response.headers["cache-control"] == "no-store"


def test_a_service_that_is_down_is_named_and_a_bad_address_is_a_field_violation(client: TestClient) -> None:
    client.cookies.set(TOKEN_COOKIE, "t")
    page = client.get("/search?ns=example&q=ledger")
    assert page.status_code == 200
    assert "query_service</strong> is unreachable at <code>127.0.0.1:1</code>" in page.text
    bad = client.get("/node?ns=example&key=a&as_of=yesterday")
    assert bad.status_code == 400
    assert re.search(r"<code>as_of</code>: &#39;yesterday&#39; is not an ISO 8601 instant", bad.text)
    assert "INVALID_ARGUMENT" in client.get("/search?ns=example&q=x&top_k=1000").text


@pytest.mark.parametrize(("query", "name"), [("since=yesterday", "since"), ("page_size=0", "page_size")])
def test_a_bad_audit_filter_is_a_field_violation(client: TestClient, query: str, name: str) -> None:
    client.cookies.set(TOKEN_COOKIE, "t")
    page = client.get(f"/audit?ns=example&{query}")
    assert page.status_code == 400
    assert f"<code>{name}</code>:" in page.text
    assert 'name="action"' in page.text, "the form is still there"


def test_with_the_services_down_the_start_page_keeps_the_named_namespaces() -> None:
    named = TestClient(create_app(ConsoleConfig("127.0.0.1:1", "127.0.0.1:1", namespaces=("b", "a"))))
    named.cookies.set(TOKEN_COOKIE, "t")
    page = named.get("/?ns=c")
    assert page.status_code == 200
    assert re.findall(r'<tr data-namespace="([^"]+)"', page.text) == ["a", "b", "c"]
    assert page.text.count("counts unknown") == 3
    assert "query_service</strong> is unreachable" in page.text and 'class="failure"' not in page.text


def test_instants() -> None:
    assert parse_instant("") is None
    assert parse_instant("2026-10-15T12:00:00Z") == datetime(2026, 10, 15, 12, tzinfo=UTC)
    assert parse_instant("2026-10-15T12:00:00") == datetime(2026, 10, 15, 12, tzinfo=UTC), "no zone: UTC"
    with pytest.raises(BadAddress):
        parse_instant("15/10/2026")


def test_each_ranking_ranks_only_the_hits_it_scored() -> None:
    hits = [
        retrieval_service_pb2.SearchHit(node_key="a", vector_score=0.2, text_score=3.0),
        retrieval_service_pb2.SearchHit(node_key="b", vector_score=0.9, trigram_score=0.5),
        retrieval_service_pb2.SearchHit(node_key="c", text_score=1.0),
    ]
    assert arm_ranks(hits) == [
        {"vector": 2, "text": 1, "trigram": None},
        {"vector": 1, "text": None, "trigram": 1},
        {"vector": None, "text": 2, "trigram": None},
    ]


def _stamp(text: str) -> Timestamp:
    stamp = Timestamp()
    stamp.FromDatetime(datetime.fromisoformat(text))
    return stamp


def test_a_fact_is_live_from_its_start_until_its_end() -> None:
    closed = knowledge_pb2.Fact(
        valid_from=_stamp("2026-08-01T00:00:00+00:00"), valid_to=_stamp("2026-10-15T00:00:00+00:00")
    )
    opened = knowledge_pb2.Fact(valid_from=_stamp("2026-10-15T00:00:00+00:00"))
    at = datetime.fromisoformat
    assert live_at(closed, at("2026-08-01T00:00:00+00:00")) and not live_at(
        opened, at("2026-08-01T00:00:00+00:00")
    )
    assert not live_at(closed, at("2026-10-15T00:00:00+00:00")) and live_at(
        opened, at("2026-10-15T00:00:00+00:00")
    )
    assert not live_at(closed, at("2026-07-31T23:59:59+00:00"))


def test_summaries_sit_above_what_they_summarize() -> None:
    summary = memory_record_pb2.Memory(memory_id="s", is_summary=True, summarized_ids=["a", "b", "gone"])
    a = memory_record_pb2.Memory(memory_id="a", summary_id="s")
    b = memory_record_pb2.Memory(memory_id="b", summary_id="s")
    alone = memory_record_pb2.Memory(memory_id="c")
    orphan = memory_record_pb2.Memory(memory_id="d", summary_id="not-on-this-page")
    tree = lineage([a, summary, b, alone, orphan])
    assert [n["memory"].memory_id for n in tree] == ["s", "c", "d"]
    assert [c["memory"].memory_id for c in tree[0]["children"]] == ["a", "b"]
    assert tree[0]["elsewhere"] == ["gone"]


def test_graph_data_cannot_end_its_script_block() -> None:
    hostile = [{"data": {"id": "doc:</script><script>alert(1)</script>", "label": "a & b"}}]
    text = script_json(hostile)
    assert "<" not in text and ">" not in text and "&" not in text
    assert json.loads(text) == hostile
    assert kind_of("person:alice") == "person" and kind_of("plain") == "node"

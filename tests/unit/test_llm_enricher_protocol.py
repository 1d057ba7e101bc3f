"""Protocol test of the LLM enricher: a local HTTP server speaking the OpenAI
chat-completions format stands in for a model server (there is no model server here, and no internet).
It checks what is sent, how the answer is read, and the documented failure path; not a model's quality."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler
from http.server import ThreadingHTTPServer
from typing import Any

import pytest

from ingest_service.memories.enrichment.llm_enricher import LlmEnricher
from ingest_service.memories.enrichment.model import MemoryText
from ingest_service.memories.enrichment.rule_enricher import RuleEnricher
from tests.unit.test_domain_packs import delivery_pack
from tests.unit.test_identifier_patterns import _kinds

ANSWER = {
    "key_points": ["Customer 8821 could not log in after an MFA reset."],
    "insights": ["The MFA reset caused the login failures."],
    "entities": [{"name": "Customer 8821", "kind": "identifier"}, {"name": "MFA", "kind": "product"}],
    "topics": ["MFA", "Login"],
    "memory_type": "event",
    "quality_score": 0.8,
}


class ChatServer:
    """Answers POST /v1/chat/completions with ``reply(request_body) -> (status, body)``; records requests."""

    def __init__(self) -> None:
        self.requests: list[tuple[str, dict[str, str], dict[str, Any]]] = []
        self.reply: Callable[[dict[str, Any]], tuple[int, Any]] = lambda _: (200, _completion(ANSWER))
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                server.requests.append((self.path, dict(self.headers), body))
                status, answer = server.reply(body)
                raw = answer if isinstance(answer, bytes) else json.dumps(answer).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(raw)))
                self.end_headers()
                self.wfile.write(raw)

            def log_message(self, *_: Any) -> None:
                pass

        self.http = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.http.server_address[1]}"
        threading.Thread(target=self.http.serve_forever, daemon=True).start()


def _completion(content: Any) -> dict[str, Any]:
    text = content if isinstance(content, str) else json.dumps(content)
    return {
        "id": "c1",
        "object": "chat.completion",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": text}}],
    }


@pytest.fixture
def server() -> Iterator[ChatServer]:
    chat = ChatServer()
    yield chat
    chat.http.shutdown()
    chat.http.server_close()


def _enricher(server: ChatServer, **options: Any) -> LlmEnricher:
    return LlmEnricher(server.url, "test-model", "secret-key", RuleEnricher(), backoff_s=0.01, **options)


TEXT = "Customer 8821 reported login failures after MFA reset."


def test_request_and_answer(server: ChatServer) -> None:
    result = _enricher(server).enrich(MemoryText(TEXT, kinds=_kinds(delivery_pack())))
    path, headers, body = server.requests[0]
    assert path == "/v1/chat/completions"
    assert headers["Authorization"] == "Bearer secret-key"
    assert body["model"] == "test-model" and body["temperature"] == 0
    assert body["messages"][0]["role"] == "system" and body["messages"][1] == {
        "role": "user",
        "content": TEXT,
    }
    assert result.evidence == "inferred" and result.enricher == "llm:test-model"
    assert result.memory_type == "event" and result.quality_score == 0.8
    assert result.insights == ("The MFA reset caused the login failures.",)
    assert result.topics == ("mfa", "login")
    # the id rule names the labelled id first; the model's other entities follow
    assert [e.natural_key for e in result.entities] == ["identifier:customer 8821", "product:MFA"]
    assert result.entities[1].source == "llm"


def test_a_fenced_answer_is_read(server: ChatServer) -> None:
    server.reply = lambda _: (200, _completion("```json\n" + json.dumps(ANSWER) + "\n```"))
    assert _enricher(server).enrich(MemoryText(TEXT)).evidence == "inferred"


def test_server_errors_are_retried_then_succeed(server: ChatServer) -> None:
    statuses = iter([503, 200])
    server.reply = lambda _: (
        (status, _completion(ANSWER)) if (status := next(statuses)) == 200 else (status, {})
    )
    result = _enricher(server, attempts=2).enrich(MemoryText(TEXT))
    assert len(server.requests) == 2 and result.evidence == "inferred"


@pytest.mark.parametrize(
    "reply",
    [
        lambda _: (500, {"error": "down"}),  # every try fails
        lambda _: (400, {"error": "bad request"}),  # not retried
        lambda _: (200, b"not json"),
        lambda _: (200, _completion("no json here")),
        lambda _: (200, _completion({**ANSWER, "memory_type": "gossip"})),
        lambda _: (200, _completion({**ANSWER, "quality_score": 7})),
        lambda _: (200, {"choices": []}),
    ],
)
def test_failures_fall_back_to_the_rules(server: ChatServer, reply: Any) -> None:
    server.reply = reply
    result = _enricher(server, attempts=3).enrich(MemoryText(TEXT))
    assert result.evidence == "extracted" and result.enricher == "rules"
    assert result == RuleEnricher().enrich(MemoryText(TEXT))
    assert len(server.requests) == (3 if reply(None)[0] == 500 else 1)


def test_a_slow_server_times_out_and_falls_back() -> None:
    chat = ChatServer()
    release = threading.Event()

    def slow(_: Any) -> tuple[int, Any]:
        release.wait(5)
        return 200, _completion(ANSWER)

    chat.reply = slow
    try:
        result = _enricher(chat, attempts=1, timeout_s=0.2).enrich(MemoryText(TEXT))
        assert result.evidence == "extracted"
    finally:
        release.set()
        chat.http.shutdown()
        chat.http.server_close()


def test_settings_are_checked() -> None:
    with pytest.raises(ValueError, match="CB_ENRICHMENT_LLM_URL"):
        LlmEnricher("ftp://x", "m", "", RuleEnricher())
    with pytest.raises(ValueError, match="CB_ENRICHMENT_LLM_MODEL"):
        LlmEnricher("http://x", "", "", RuleEnricher())

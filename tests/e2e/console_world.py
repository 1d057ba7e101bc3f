"""The console's world for the browser tests (``test_console_browser.py``, ``test_console_access.py``): both
services in-process with bearer tokens, loaded with tests/data/example, a namespace of scoped items (the
patterns of tests/e2e/test_visibility_scopes.py), audit events and memories, and the console served by
uvicorn; signing in through the login form and axe-core's verdict on a page."""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC
from datetime import datetime
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import pytest
import uvicorn
from google.protobuf import json_format
from typer.testing import CliRunner

from common.auth.principals import Right
from common.kernel.config import Settings
from common.kernel.memory_names import memory_namespace
from memory_service_grpc_client import ClientSecurity
from memory_service_grpc_client import MemoryClient
from memory_service_grpc_client.memory.v1 import audit_service_pb2
from memory_service_grpc_client.memory.v1 import document_service_pb2
from memory_service_grpc_client.memory.v1 import memory_service_pb2
from memory_service_grpc_client.memory.v1 import observation_service_pb2
from memory_service_tools.cli import app as cli_app
from memory_service_tools.console import ConsoleConfig
from memory_service_tools.console import create_app
from memory_service_tools.token_writer import add_token
from tests.e2e.conftest import token_secured_services
from tests.e2e.mcp_http import free_port
from tests.e2e.note_observations import asserted_fact
from tests.e2e.note_observations import note
from tests.e2e.token_grants import grant

ROOT = Path(__file__).resolve().parents[2]


EXAMPLE = ROOT / "tests" / "data" / "example"




AXE = ROOT / ".tools" / "console" / "node_modules" / "axe-core" / "axe.min.js"


SCREENSHOTS = ROOT / "build" / "console-screenshots"


@dataclass
class Console:
    """A console served by uvicorn in a thread; ``url`` is its base address."""

    server: uvicorn.Server
    thread: threading.Thread
    url: str

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(10)


def serve_console(config: ConsoleConfig) -> Console:
    port = free_port()
    server = uvicorn.Server(
        uvicorn.Config(create_app(config), host="127.0.0.1", port=port, log_level="warning", lifespan="on")
    )
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        assert time.monotonic() < deadline, "the console did not start"
        time.sleep(0.05)
    return Console(server, thread, f"http://127.0.0.1:{port}")


@dataclass
class World:
    """Services, console, tokens and what was loaded."""

    ingest_addr: str
    query_addr: str
    console: Console
    tokens: dict[str, str]
    scoped_ns: str
    secret_observation: str
    memory_user: str
    audit: AuditTrail


@dataclass(frozen=True)
class AuditTrail:
    """The explicit audit events recorded in the scoped namespace, oldest first, all in ``trace_id``:
    ``(event_id, action, principal, target_key, record_time)``."""

    trace_id: str
    events: tuple[tuple[str, str, str, str, datetime], ...]


def _observation(
    ns: str, external_id: str, scopes: list[str], content: str, facts: list[tuple[str, str, str]]
) -> Any:
    assertions = [asserted_fact(s, p, o) for s, p, o in facts]
    return note(ns, "console-test", external_id, content, scopes=scopes, assertions=assertions)


def load_scoped(ingest_addr: str, query_addr: str, token: str, ns: str) -> str:
    """Public and ``workspace:alpha`` items in ``ns``; returns the scoped observation's id."""
    with MemoryClient(ingest_addr, query_addr, security=ClientSecurity(token=token)) as client:
        for key, content, scopes in (
            ("doc:public", "Zebra quasar public note about the canteen menu.", []),
            ("doc:secret", "Zebra quasar secret plan: acquire the blue company.", ["workspace:alpha"]),
        ):
            client.retain(
                document_service_pb2.RetainRequest(
                    namespace=ns, natural_key=key, title=key, content=content, scopes=scopes
                )
            )
        results = client.record_observations(
            observation_service_pb2.RecordObservationsRequest(
                observations=[
                    _observation(
                        ns,
                        "secret-1",
                        ["workspace:alpha"],
                        "Ivan works on the secret merger.",
                        [("person:ivan", "WORKS_ON", "project:merger")],
                    ),
                    _observation(
                        ns, "public-1", [], "Ivan likes tea.", [("person:ivan", "LIKES", "drink:tea")]
                    ),
                ]
            )
        ).results
    assert [r.status for r in results] == ["processed", "processed"], [r.error for r in results]
    return results[0].observation_id


def record_audit_events(ingest_addr: str, query_addr: str, tokens: dict[str, str], ns: str) -> AuditTrail:
    """Four explicit events in one trace: three by the writer (one restricted to ``workspace:alpha``, whose
    details name the secret) and one by the admin."""
    trace_id = "console-audit-" + uuid.uuid4().hex[:10]
    wanted = (
        ("writer", "review", "doc:public", [], {"note": "menu checked"}),
        ("writer", "export", "doc:public", [], {"format": "pdf"}),
        ("writer", "review", "person:ivan", ["workspace:alpha"], {"note": "the secret merger staffing"}),
        ("admin", "approve", "person:ivan", [], {"note": "approved"}),
    )
    events = []
    for who, action, target, scopes, details in wanted:
        with MemoryClient(ingest_addr, query_addr, security=ClientSecurity(token=tokens[who])) as client:
            request = audit_service_pb2.RecordAuditEventRequest(
                namespace=ns, action=action, trace_id=trace_id, target_key=target, scopes=scopes
            )
            request.details.update(details)
            event = client.record_audit_event(request).event
        events.append(
            (event.event_id, action, event.principal, target, event.record_time.ToDatetime(tzinfo=UTC))
        )
    return AuditTrail(trace_id, tuple(events))


def load_memories(ingest_addr: str, query_addr: str, token: str, user: str) -> None:
    """Three memories of ``user`` and a summary of two of them (a lineage of depth two)."""
    with MemoryClient(ingest_addr, query_addr, security=ClientSecurity(token=token)) as client:
        request = json_format.ParseDict(
            {
                "userId": user,
                "memories": [
                    {"text": "The customer prefers invoices in euros.", "tags": ["billing"]},
                    {
                        "text": "The customer asked to close the month on the last working day.",
                        "tags": ["billing"],
                    },
                    {"text": "The customer's office moved to Lisbon.", "tags": ["office"]},
                ],
            },
            memory_service_pb2.AddMemoriesRequest(),
        )
        ids = [r.memory_id for r in client.add_memories(request).results]
        client.summarize_memories(
            memory_service_pb2.SummarizeMemoriesRequest(memory_ids=ids[:2], user_id=user)
        )


@contextmanager
def console_world(settings: Settings, tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    """Both services with the world's tokens, loaded, and the console serving them."""
    tokens_file = tmp_path_factory.mktemp("console") / "tokens.yaml"
    scoped_ns = "console-" + uuid.uuid4().hex[:10]
    organization = "con" + uuid.uuid4().hex[:10]
    memory_base = memory_namespace(organization, "production")
    alpha = ["workspace:alpha"]
    tokens = {
        "admin": grant(tokens_file, "console-admin", Right.ADMIN, ["example", scoped_ns], scopes=alpha),
        "writer": grant(tokens_file, "console-writer", Right.WRITE, [scoped_ns], scopes=alpha),
        "outsider": grant(tokens_file, "console-outsider", Right.READ, [scoped_ns, "example"]),
        "insider": grant(tokens_file, "console-insider", Right.READ, [scoped_ns], scopes=alpha),
    }
    tokens["memory"], _ = add_token(
        tokens_file,
        principal="console-memory",
        namespaces={memory_base: [Right.READ, Right.WRITE]},
        memory_scope=(organization, "production", "u1"),
    )
    with token_secured_services(settings, tokens_file) as (ingest_addr, query_addr):
        runner = CliRunner()
        base = ["--ingest-addr", ingest_addr, "--query-addr", query_addr, "--token", tokens["admin"]]
        for args in (
            ["observe", "--file", str(EXAMPLE / "observations.jsonl")],
            ["retain", str(EXAMPLE / "docs"), "--namespace", "example"],
        ):
            result = runner.invoke(cli_app, [*base, *args])
            assert result.exit_code == 0, result.output
        secret = load_scoped(ingest_addr, query_addr, tokens["writer"], scoped_ns)
        trail = record_audit_events(ingest_addr, query_addr, tokens, scoped_ns)
        load_memories(ingest_addr, query_addr, tokens["memory"], "u1")
        console = serve_console(
            ConsoleConfig(ingest_addr=ingest_addr, query_addr=query_addr, namespaces=("example", scoped_ns))
        )
        try:
            yield World(ingest_addr, query_addr, console, tokens, scoped_ns, secret, "u1", trail)
        finally:
            console.stop()


def signed_in(browser: Any, world: World, who: str, *, bypass_csp: bool = False) -> Any:
    """A fresh browser context holding ``who``'s token (signed in through the login form). The console's
    Content-Security-Policy admits only its own scripts; ``bypass_csp`` lets axe-core be injected."""
    context = browser.new_context(viewport={"width": 1280, "height": 900}, bypass_csp=bypass_csp)
    page = context.new_page()
    page.goto(f"{world.console.url}/login")
    page.fill("#token", world.tokens[who])
    page.click("button[type=submit]")
    page.wait_for_load_state()
    assert [c["name"] for c in context.cookies()] == ["cb_console_token"], "signed in"
    return page


def url(world: World, path: str, **params: str) -> str:
    return f"{world.console.url}{path}?{urlencode(params)}"


def axe_violations(page: Any) -> list[dict[str, Any]]:
    """axe-core's serious and critical violations of the page."""
    assert AXE.is_file(), f"{AXE} is missing: make console-assets"
    page.add_script_tag(path=str(AXE))
    result = page.evaluate("async () => (await axe.run(document)).violations")
    return [
        {"id": v["id"], "impact": v["impact"], "nodes": [n["target"] for n in v["nodes"]][:3]}
        for v in result
        if v["impact"] in ("serious", "critical")
    ]


def pages(world: World) -> dict[str, str]:
    """One address per page on the example data (the names are the screenshots' file names)."""
    return {
        "namespaces": url(world, "/"),
        "search": url(world, "/search", ns="example", q="когда закрывается месяц"),
        "pack": url(world, "/pack", ns="example", task="who works on billing?", budget="60", dropped="3"),
        "node": url(world, "/node", ns="example", key="person:alice"),
        "graph": url(world, "/graph", ns="example", key="person:alice", depth="2"),
        "observation": url(world, "/observation", ns=world.scoped_ns, id=world.secret_observation),
        "audit": url(world, "/audit", ns="example"),
        "audit-namespace": url(world, "/audit", ns=world.scoped_ns),
        "memories": url(world, "/memories", user=world.memory_user, q="invoices"),
        "health": url(world, "/health", ns="example"),
    }

"""The web console in a real browser: Debian's Chromium driven by Playwright, against the console served by
uvicorn and both services in-process with bearer tokens, loaded with tests/data/example and a namespace of
scoped items (the patterns of tests/e2e/test_visibility_scopes.py).

Every page loads and passes axe-core with no serious or critical violation; a search shows each ranking's
score; a pack shows why each item is in it; the as-of slider moves which facts are live; a fact links to
the observation that proves it; a reader without ``workspace:alpha`` sees no scoped item on any page while
a reader with it does; the start page lists the namespaces a token can see with counts that leave out what
its scopes do not reach; the audit page lists an admin's namespace events with the service's filters and
paging, and shows a reader the service's refusal; a missing token gets the login page; a service that is
down is named; a service's field violations are shown. Screenshots of each page go to
build/console-screenshots.
"""

from __future__ import annotations

import json
import os
import re
import socket
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import pytest
import uvicorn
from google.protobuf import json_format
from memory_service_grpc_client import ClientSecurity, MemoryClient
from memory_service_grpc_client.memory.v1 import (
    audit_service_pb2,
    document_service_pb2,
    knowledge_pb2,
    memory_service_pb2,
    observation_service_pb2,
    source_service_pb2,
)
from playwright import sync_api
from typer.testing import CliRunner

from common.auth.principals import Right
from common.kernel.config import Settings
from common.kernel.memory_names import memory_namespace
from common.storage.database import Database
from memory_service_tools.cli import app as cli_app
from memory_service_tools.console import ConsoleConfig, create_app
from memory_service_tools.token_writer import add_token
from tests.e2e.conftest import token_secured_services

pytestmark = pytest.mark.e2e


ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "tests" / "data" / "example"
CHROMIUM = Path(os.environ.get("CB_CHROMIUM", "/usr/bin/chromium"))
AXE = ROOT / ".tools" / "console" / "node_modules" / "axe-core" / "axe.min.js"
SCREENSHOTS = ROOT / "build" / "console-screenshots"


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


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
    port = _free_port()
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
    return json_format.ParseDict(
        {
            "namespace": ns,
            "source": {"system": "console-test", "stream": "notes", "external_id": external_id},
            "kind": "note",
            "occurred_at": "2024-05-01T10:00:00Z",
            "subject": {"type": "person", "id": "ivan"},
            "scopes": scopes,
            "content": content,
            "assertions": [
                {"fact": {"subject": s, "predicate": p, "object": o, "valid_from": "2024-05-01T10:00:00Z"}}
                for s, p, o in facts
            ],
        },
        knowledge_pb2.Observation(),
    )


def _load_scoped(ingest_addr: str, query_addr: str, token: str, ns: str) -> str:
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


def _record_audit_events(ingest_addr: str, query_addr: str, tokens: dict[str, str], ns: str) -> AuditTrail:
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


def _load_memories(ingest_addr: str, query_addr: str, token: str, user: str) -> None:
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


@pytest.fixture(scope="module")
def world(
    settings: Settings, database: Database, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[World]:
    tokens_file = tmp_path_factory.mktemp("console") / "tokens.yaml"
    scoped_ns = "console-" + uuid.uuid4().hex[:10]
    organization = "con" + uuid.uuid4().hex[:10]
    memory_base = memory_namespace(organization, "production")
    tokens: dict[str, str] = {}
    tokens["admin"], _ = add_token(
        tokens_file,
        principal="console-admin",
        namespaces={"example": [Right.ADMIN], scoped_ns: [Right.ADMIN]},
        scopes=["workspace:alpha"],
    )
    tokens["writer"], _ = add_token(
        tokens_file,
        principal="console-writer",
        namespaces={scoped_ns: [Right.WRITE]},
        scopes=["workspace:alpha"],
    )
    tokens["outsider"], _ = add_token(
        tokens_file,
        principal="console-outsider",
        namespaces={scoped_ns: [Right.READ], "example": [Right.READ]},
    )
    tokens["insider"], _ = add_token(
        tokens_file,
        principal="console-insider",
        namespaces={scoped_ns: [Right.READ]},
        scopes=["workspace:alpha"],
    )
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
        secret = _load_scoped(ingest_addr, query_addr, tokens["writer"], scoped_ns)
        trail = _record_audit_events(ingest_addr, query_addr, tokens, scoped_ns)
        _load_memories(ingest_addr, query_addr, tokens["memory"], "u1")
        console = serve_console(
            ConsoleConfig(ingest_addr=ingest_addr, query_addr=query_addr, namespaces=("example", scoped_ns))
        )
        try:
            yield World(ingest_addr, query_addr, console, tokens, scoped_ns, secret, "u1", trail)
        finally:
            console.stop()


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    if not CHROMIUM.is_file():
        pytest.fail(f"{CHROMIUM} is missing: apt-get install chromium")
    os.environ["PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD"] = "1"
    with sync_api.sync_playwright() as playwright:
        launched = playwright.chromium.launch(
            executable_path=str(CHROMIUM), headless=True, args=["--no-sandbox", "--disable-gpu"]
        )
        yield launched
        launched.close()


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


def test_every_page_loads_passes_axe_and_is_screenshotted(browser: Any, world: World) -> None:
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    admin = signed_in(browser, world, "admin", bypass_csp=True)
    memory = signed_in(browser, world, "memory", bypass_csp=True)
    problems = {}
    addresses = pages(world)
    # The audit page on the journaled trace of a pack (what an admin follows from the pack page).
    admin.goto(addresses["pack"])
    addresses["audit"] = world.console.url + (admin.get_attribute("#budget-text a", "href") or "")
    times = {}
    for name, address in addresses.items():
        page = memory if name == "memories" else admin
        response = page.goto(address)
        assert response is not None and response.status == 200, (name, response and response.status)
        page.wait_for_load_state("networkidle")
        # Recorded for the docs, not asserted: milliseconds from request to the last byte of the page.
        times[name] = page.evaluate(
            "() => { const n = performance.getEntriesByType('navigation')[0]; return n.responseEnd - n.requestStart; }"
        )
        assert page.locator("h1").count() == 1, name
        assert page.locator(".failure, .down").count() == 0, (
            name,
            page.locator(".failure, .down").all_inner_texts(),
        )
        if violations := axe_violations(page):
            problems[name] = violations
        page.screenshot(path=str(SCREENSHOTS / f"{name}.png"), full_page=False)
    (SCREENSHOTS / "page-times.json").write_text(json.dumps(times, indent=2), encoding="utf-8")
    assert not problems, problems
    # The check can fail: an unlabelled field is a critical violation axe-core reports.
    admin.goto(pages(world)["health"])
    admin.evaluate("document.querySelector('main').append(document.createElement('input'))")
    assert any(v["id"] == "label" for v in axe_violations(admin))
    # The pages hold what they are for.
    memory.goto(pages(world)["memories"])
    assert memory.locator("li.memory").count() >= 3
    summary = memory.locator("li.memory:has(> ul)")
    assert summary.count() == 1, "the summary sits above the memories it summarizes"
    assert summary.locator("ul > li.memory").count() == 2
    memory.goto(url(world, "/memories", user=world.memory_user, q="Lisbon office"))
    recalled = memory.locator("#recalled tbody tr")
    assert recalled.count() >= 1 and "Lisbon" in recalled.first.inner_text()
    assert float(recalled.first.locator("td.num").first.inner_text()) > 0
    # The graph draws under the console's own Content-Security-Policy.
    strict = signed_in(browser, world, "admin")
    strict.goto(pages(world)["graph"])
    strict.wait_for_function("document.getElementById('graph').dataset.nodes > 1")
    assert "project:beta" in strict.locator("#edges").inner_text()
    admin.goto(pages(world)["namespaces"])
    row = admin.locator("tr[data-namespace=example]").inner_text()
    assert "not readable" not in row and re.search(r"\t\d+\t", row), row
    admin.goto(url(world, "/node", ns="example", key="doc:ledger"))
    assert "Ledger service" in admin.locator("pre.source").inner_text()
    assert admin.locator("ol.chunks > li").count() >= 1
    admin.goto(addresses["audit"])
    assert admin.locator("section.compilation").count() >= 1
    admin.goto(pages(world)["health"])
    assert admin.locator("tr[data-service=query_service] td.state-serving").count() == 2
    assert admin.locator("tr[data-service=ingest_service] td.state-serving").count() == 2


def test_search_shows_each_rankings_score_and_rank(browser: Any, world: World) -> None:
    page = signed_in(browser, world, "admin")
    page.goto(url(world, "/search", ns="example", q="BILL-42"))
    rows = page.locator("#hits tr.hit")
    assert rows.count() > 0
    first = rows.first
    assert float(first.locator("td.fused").inner_text()) > 0
    arm_cells = first.locator("td.arm").all_inner_texts()
    assert len(arm_cells) == 3
    assert any(re.fullmatch(r"\d+\.\d{4} \(#\d+\)", cell) for cell in arm_cells), arm_cells
    # The form swaps the results in place (htmx) and its values go into the address: the page is linkable.
    page.fill("input[name=q]", "ledger service")
    page.click("form.query button[type=submit]")
    page.wait_for_url(re.compile(r"q=ledger(\+|%20)service"), wait_until="commit")
    page.wait_for_selector("#hits caption")
    assert "ns=example" in page.url and page.locator("#hits tr.hit").count() > 0
    assert page.locator("h1").count() == 1, "the main part was swapped, not nested"


def test_pack_shows_reasons_dropped_candidates_budget_and_trace(browser: Any, world: World) -> None:
    page = signed_in(browser, world, "admin")
    page.goto(url(world, "/pack", ns="example", task="who works on billing?", budget="60", dropped="3"))
    items = page.locator("ol.items > li")
    assert items.count() > 0
    for reason in items.locator("p.reason").all_inner_texts():
        assert re.match(r"Why: \S+ — \S", reason), reason
    dropped = page.locator("ol.dropped > li p.reason").all_inner_texts()
    assert dropped and all(text.startswith("Dropped: ") and len(text) > len("Dropped: ") for text in dropped)
    assert re.search(r"\d+ of 60 tokens used", page.locator("#budget-text").inner_text())
    page.click("#budget-text a")
    page.wait_for_load_state()
    assert page.url.startswith(f"{world.console.url}/audit?")
    assert "compilation" in page.locator("main").inner_text()


def test_the_trace_page_shows_a_compilation_as_tables_with_the_raw_journal_folded(
    browser: Any, world: World
) -> None:
    page = signed_in(browser, world, "admin")
    page.goto(url(world, "/pack", ns="example", task="who works on billing?", budget="60", dropped="3"))
    items = page.locator("ol.items > li").count()
    counted = re.search(r"(\d+) candidates dropped", page.locator("#budget-text").inner_text())
    assert counted is not None
    dropped = int(counted.group(1))
    assert items > 0 and dropped > 0
    page.click("#budget-text a")
    page.wait_for_load_state()
    compilation = page.locator("section.compilation").last
    assert compilation.locator("dd.query").inner_text() == "who works on billing?"
    assert re.fullmatch(
        r"\d+ of 60 tokens used \(\d+%\), counted with \S+", compilation.locator(".budget-text").inner_text()
    )
    # What the compiler adds to the request is listed too; a Struct's whole numbers read without decimals.
    depth = compilation.locator("dl.request dt:text-is('search_depth') + dd")
    assert re.fullmatch(r"\d+", depth.inner_text())
    # One decision per candidate: the kept ones are the pack's items, the dropped ones its dropped count.
    kept = compilation.locator("table.decisions[id^=kept] tr.decision")
    assert kept.count() == items
    assert compilation.locator("table.decisions[id^=dropped] tr.decision").count() == dropped
    assert all(reason for reason in kept.locator("td.reason").all_inner_texts())
    assert all(float(score) > 0 for score in kept.locator("td.score").all_inner_texts())
    # The raw journal is folded away, and is the same compilation.
    raw = compilation.locator("details.raw")
    assert not raw.locator("pre").is_visible()
    raw.locator("summary").click()
    journal = json.loads(raw.locator("pre").inner_text())
    assert journal["request"]["query"] == "who works on billing?"
    assert len(journal["decisions"]) == items + dropped
    # A kept chunk links to its node page at that chunk.
    chunk_link = compilation.locator("table.decisions td.item a[href*='#chunk-']").first
    target = chunk_link.get_attribute("href") or ""
    page.goto(world.console.url + target)
    assert page.locator(f"ol.chunks li#{target.rsplit('#', 1)[1]}").count() == 1


def test_badges_link_to_what_they_name(browser: Any, world: World) -> None:
    page = signed_in(browser, world, "admin")
    # Fact states: the superseded fact's mark leads to the fact that superseded it, on the same page.
    page.goto(url(world, "/node", ns="example", key="person:alice"))
    alpha = page.locator("#facts-out tr.fact", has=page.locator("a", has_text="project:alpha"))
    beta = page.locator("#facts-out tr.fact", has=page.locator("a", has_text="project:beta"))
    mark = alpha.locator("a.mark", has_text="superseded by")
    assert mark.get_attribute("href") == f"#out-{beta.get_attribute('data-fact-id')}"
    mark.click()
    assert page.url.endswith(f"#out-{beta.get_attribute('data-fact-id')}")
    assert alpha.locator("a.state").get_attribute("href") == f"#{alpha.get_attribute('id')}"
    # A fact in a pack links to its row on its subject's node page.
    asked = {"task": "where does alice work?", "anchors": "person:alice", "budget": "2000"}
    page.goto(url(world, "/pack", ns="example", **asked))
    fact_link = page.locator("ol.items .provenance a[href*='#out-fact-']").first
    href, label = fact_link.get_attribute("href") or "", fact_link.inner_text()
    page.goto(world.console.url + href)
    row = page.locator(f"tr#{href.rsplit('#', 1)[1]}")
    assert row.count() == 1 and label == f"fact {row.get_attribute('data-fact-id')}"
    # A hit's node kind repeats the search among nodes of that kind only.
    page.goto(url(world, "/search", ns="example", q="billing ledger alice", top_k="20"))
    kinds = set(page.locator("#hits tr.hit a.kind").all_inner_texts())
    assert len(kinds) >= 2, kinds
    kind = sorted(kinds)[0]
    page.locator("#hits tr.hit a.kind", has_text=kind).first.click()
    page.wait_for_load_state()
    assert f"types={kind}" in page.url
    assert set(page.locator("#hits tr.hit a.kind").all_inner_texts()) == {kind}


def test_a_long_text_is_shown_a_part_at_a_time(browser: Any, world: World) -> None:
    admin = ClientSecurity(token=world.tokens["admin"])
    with MemoryClient(world.ingest_addr, world.query_addr, security=admin) as client:
        whole = client.get_source(
            source_service_pb2.GetSourceRequest(namespace="example", natural_key="doc:ledger")
        )
    content = whole.source.content
    size = 100
    assert len(content) > 2 * size, "the example document is longer than two parts"
    small = serve_console(
        ConsoleConfig(ingest_addr=world.ingest_addr, query_addr=world.query_addr, text_page_chars=size)
    )
    try:
        page = browser.new_context().new_page()
        page.goto(f"{small.url}/login")
        page.fill("#token", world.tokens["admin"])
        page.click("button[type=submit]")
        page.goto(f"{small.url}/node?" + urlencode({"ns": "example", "key": "doc:ledger"}))
        assert page.locator("#text-previous").count() == 0
        assert page.locator("#text-position").inner_text() == f"Characters 1–100 of {len(content):,}."
        # Parts follow one another without a gap until the end of the text.
        shown = page.locator("pre.source").text_content() or ""
        while page.locator("#text-next").count():
            page.click("#text-next")
            page.wait_for_load_state()
            assert page.locator("#text-previous").count() == 1
            shown += page.locator("pre.source").text_content() or ""
        assert shown == content
        # Past the end is the console's own field violation.
        response = page.goto(
            f"{small.url}/node?"
            + urlencode({"ns": "example", "key": "doc:ledger", "text_from": len(content)})
        )
        assert response is not None and response.status == 400
        assert page.locator(".failure .violations code", has_text="text_from").count() == 1
    finally:
        small.stop()


def test_as_of_slider_changes_which_facts_are_live(browser: Any, world: World) -> None:
    page = signed_in(browser, world, "admin")
    page.goto(url(world, "/node", ns="example", key="person:alice"))
    alpha = page.locator("#facts-out tr.fact", has=page.locator("a", has_text="project:alpha"))
    beta = page.locator("#facts-out tr.fact", has=page.locator("a", has_text="project:beta"))
    assert alpha.count() == 1 and beta.count() == 1

    def slide(instant: str) -> tuple[str, str]:
        seconds = int(datetime.fromisoformat(instant).replace(tzinfo=UTC).timestamp())
        page.eval_on_selector(
            "#as-of-slider",
            "(el, v) => { el.value = v; el.dispatchEvent(new Event('input')); }",
            str(seconds),
        )
        return alpha.get_attribute("data-live") or "", beta.get_attribute("data-live") or ""

    assert slide("2026-09-01T00:00:00") == ("true", "false")
    assert slide("2026-11-01T00:00:00") == ("false", "true")
    assert page.locator("#as-of-output").inner_text().startswith("2026-11-01")
    # The superseded fact is marked, and the link carries the slider's instant.
    assert "superseded by" in alpha.inner_text()
    assert "as_of=2026-11-01" in (page.get_attribute("#as-of-link", "href") or "")


def test_a_fact_links_to_the_observation_that_proves_it(browser: Any, world: World) -> None:
    page = signed_in(browser, world, "admin")
    page.goto(url(world, "/node", ns="example", key="person:alice"))
    beta = page.locator("#facts-out tr.fact", has=page.locator("a", has_text="project:beta"))
    beta.locator("a[href^='/observation']").first.click()
    page.wait_for_load_state()
    assert "staffing.moved" in page.locator("dl.fields").inner_text()
    assert "project:beta" in page.locator("#produced").inner_text()


def _scoped_pages(world: World) -> dict[str, str]:
    ns = world.scoped_ns
    return {
        "namespaces": url(world, "/", ns=ns),
        "search": url(world, "/search", ns=ns, q="Zebra quasar plan"),
        "pack": url(
            world, "/pack", ns=ns, task="what does ivan work on", anchors="person:ivan", budget="2000"
        ),
        "node": url(world, "/node", ns=ns, key="person:ivan"),
        "graph": url(world, "/graph", ns=ns, key="person:ivan", depth="2"),
        "source": url(world, "/node", ns=ns, key="doc:secret"),
        "observation": url(world, "/observation", ns=ns, id=world.secret_observation),
    }


SECRET = re.compile(r"secret plan|project:merger|secret merger|acquire the blue company", re.IGNORECASE)


def test_a_reader_without_the_scope_never_sees_a_scoped_item(browser: Any, world: World) -> None:
    outsider = signed_in(browser, world, "outsider")
    insider = signed_in(browser, world, "insider")
    seen_by_insider = set()
    for name, address in _scoped_pages(world).items():
        outsider.goto(address)
        text = outsider.locator("main").inner_text()
        assert not SECRET.search(text), (name, SECRET.search(text))
        insider.goto(address)
        if SECRET.search(insider.locator("main").inner_text()):
            seen_by_insider.add(name)
    # The same pages show the scoped items to a reader holding the scope (so the check above can fail).
    assert {"search", "node", "graph", "source", "observation"} <= seen_by_insider, seen_by_insider
    # The insider's pack trace, opened by the outsider, shows none of its hidden decisions.
    insider.goto(_scoped_pages(world)["pack"])
    trace_link = insider.locator("#budget-text a")
    assert trace_link.count() == 1
    outsider.goto(world.console.url + (trace_link.get_attribute("href") or ""))
    assert not SECRET.search(outsider.locator("main").inner_text())


COUNTED = ("observations", "nodes", "live-facts", "closed-facts", "chunks", "backlog", "memories")


def namespace_counts(page: Any, namespace: str) -> dict[str, Any]:
    """The start page's counts of ``namespace``: each column's total, and the breakdowns by kind as
    ``{"<column> by kind": {kind: count}}``."""
    row = page.locator(f"#namespaces tr[data-namespace='{namespace}']")
    assert row.count() == 1, namespace
    counts: dict[str, Any] = {
        name: int(row.locator(f"td.{name}").get_attribute("data-count") or "-1") for name in COUNTED
    }
    for name in ("observations", "nodes", "memories"):
        kinds = {}
        for item in row.locator(f"td.{name} ul.counts li").all_inner_texts():
            kind, count = item.rsplit(" ", 1)
            kinds[kind] = int(count)
        assert sum(kinds.values()) == counts[name], (name, kinds, counts[name])
        counts[f"{name} by kind"] = kinds
    return counts


def test_the_start_page_lists_visible_namespaces_with_counts_that_leave_out_scoped_items(
    browser: Any, world: World
) -> None:
    admin = signed_in(browser, world, "admin")
    admin.goto(url(world, "/"))
    listed = admin.locator("#namespaces tbody th[scope=row]").all_inner_texts()
    assert listed == sorted(["example", world.scoped_ns]), listed
    # The example data: three observations, three documents, Alice's move closed one fact.
    example = namespace_counts(admin, "example")
    assert example["observations"] == 3 and example["observations by kind"] == {"processed": 3}, example
    assert example["nodes by kind"]["document"] == 3, example
    assert example["live-facts"] >= 2 and example["closed-facts"] >= 1, example
    assert example["chunks"] >= 3 and example["memories"] == 0, example
    # The scoped namespace: the reader without workspace:alpha counts only the public half.
    outsider = signed_in(browser, world, "outsider")
    insider = signed_in(browser, world, "insider")
    outsider.goto(url(world, "/"))
    insider.goto(url(world, "/"))
    seen_out = namespace_counts(outsider, world.scoped_ns)
    seen_in = namespace_counts(insider, world.scoped_ns)
    assert seen_in["observations"] == 2 and seen_out["observations"] == 1, (seen_in, seen_out)
    assert seen_in["nodes by kind"]["document"] == 2, seen_in
    assert seen_out["nodes by kind"]["document"] == 1, seen_out
    # Each observation projects its assertion and the facts of its episode: the secret one's are not counted.
    for column in ("live-facts", "chunks", "nodes"):
        assert 0 < seen_out[column] < seen_in[column], (column, seen_in, seen_out)
    # The admin holds the scope: it counts what the insider does.
    admin.goto(url(world, "/", ns=world.scoped_ns))
    assert namespace_counts(admin, world.scoped_ns)["observations"] == 2
    # A namespace the console lists but the token may not read is one row that says so.
    assert "not readable with this token" in insider.locator("tr[data-namespace=example]").inner_text()
    assert insider.locator(".failure").count() == 0
    # The prefix narrows the list to what starts with it.
    admin.goto(url(world, "/", prefix="console-"))
    assert admin.locator("#namespaces tbody th[scope=row]").all_inner_texts() == [world.scoped_ns]


def event_rows(page: Any) -> list[tuple[str, str, str]]:
    """``(action, principal, node)`` of each row of the audit page's events table, in page order."""
    rows = page.locator("#events tr.event")
    return [
        (
            row.locator("td.action").inner_text(),
            row.locator("td.principal").inner_text(),
            row.locator("td.node").inner_text(),
        )
        for row in rows.all()
    ]


def test_the_audit_page_lists_an_admins_events_with_filters_and_pages(browser: Any, world: World) -> None:
    page = signed_in(browser, world, "admin")
    ns = world.scoped_ns
    newest_first = [(a, p, t) for _, a, p, t, _ in reversed(world.audit.events)]
    page.goto(url(world, "/audit", ns=ns))
    assert page.locator(".failure").count() == 0, page.locator(".failure").all_inner_texts()
    assert event_rows(page) == newest_first
    assert page.locator("#next-page").count() == 0
    # Details read as name and value, not JSON.
    export = page.locator("#events tr.event", has=page.locator("td.action", has_text="export"))
    assert export.locator("td.details ul.pairs li").all_inner_texts() == ["format pdf"]
    # The service filters: each one alone, then combined.
    page.goto(url(world, "/audit", ns=ns, action="review"))
    assert event_rows(page) == [row for row in newest_first if row[0] == "review"]
    page.goto(url(world, "/audit", ns=ns, principal="console-admin"))
    assert event_rows(page) == [("approve", "console-admin", "person:ivan")]
    page.goto(url(world, "/audit", ns=ns, node="doc:public"))
    assert event_rows(page) == [row for row in newest_first if row[2] == "doc:public"]
    page.goto(url(world, "/audit", ns=ns, action="review", node="person:ivan"))
    assert event_rows(page) == [("review", "console-writer", "person:ivan")]
    # The time range: since is inclusive, until exclusive.
    times = [when for *_, when in world.audit.events]
    page.goto(url(world, "/audit", ns=ns, since=times[1].isoformat(), until=times[3].isoformat()))
    assert event_rows(page) == newest_first[1:3]
    # Pages of two, the filters kept on the "next page" link.
    page.goto(url(world, "/audit", ns=ns, page_size="2"))
    assert event_rows(page) == newest_first[:2]
    page.click("#next-page")
    page.wait_for_load_state()
    assert event_rows(page) == newest_first[2:]
    assert page.locator("#next-page").count() == 0
    reviews = [row for row in newest_first if row[0] == "review"]
    page.goto(url(world, "/audit", ns=ns, action="review", page_size="1"))
    assert event_rows(page) == reviews[:1]
    page.click("#next-page")
    page.wait_for_load_state()
    assert "action=review" in page.url and event_rows(page) == reviews[1:]
    assert page.locator("#next-page").count() == 0
    # A page token sent with other filters is the service's INVALID_ARGUMENT, shown with its field.
    page.goto(url(world, "/audit", ns=ns, page_size="2"))
    token = (page.get_attribute("#next-page", "href") or "").split("page=")[-1]
    page.goto(url(world, "/audit", ns=ns, page_size="2", action="export") + f"&page={token}")
    assert "INVALID_ARGUMENT" in page.locator(".failure").inner_text()
    assert page.locator(".failure .violations code", has_text="page_token").count() == 1


def test_a_reader_gets_the_audit_listings_refusal_and_still_reads_a_trace(browser: Any, world: World) -> None:
    for who in ("outsider", "insider"):
        page = signed_in(browser, world, who)
        page.goto(url(world, "/audit", ns=world.scoped_ns))
        failure = page.locator(".failure").inner_text()
        assert "PERMISSION_DENIED" in failure and "AuditService.ListAuditEvents" in failure, failure
        assert page.locator("#events").count() == 0
    # Through the trace, a reader sees the events whose scopes it holds, as TraceService decides.
    outsider = signed_in(browser, world, "outsider")
    outsider.goto(url(world, "/audit", ns=world.scoped_ns, trace_id=world.audit.trace_id))
    assert outsider.locator(".failure").count() == 0
    seen = event_rows(outsider)
    assert ("export", "console-writer", "doc:public") in seen, seen
    assert ("review", "console-writer", "person:ivan") not in seen, seen
    assert not SECRET.search(outsider.locator("main").inner_text())
    insider = signed_in(browser, world, "insider")
    insider.goto(url(world, "/audit", ns=world.scoped_ns, trace_id=world.audit.trace_id))
    assert ("review", "console-writer", "person:ivan") in event_rows(insider)
    assert SECRET.search(insider.locator("main").inner_text())


def test_missing_or_refused_token_gets_the_login_page(browser: Any, world: World) -> None:
    context = browser.new_context()
    page = context.new_page()
    response = page.goto(url(world, "/search", ns="example", q="BILL-42"))
    assert response is not None and response.status == 401
    assert page.locator("form[action='/login'] #token").count() == 1
    page.fill("#token", "not-a-token")
    page.click("button[type=submit]")
    page.wait_for_load_state()
    assert page.locator("#token").count() == 1 and "refused" in page.locator("main").inner_text()
    page.fill("#token", world.tokens["admin"])
    page.click("button[type=submit]")
    page.wait_for_load_state()
    # Back on the page asked for, with the token only in an HttpOnly, SameSite=Strict cookie.
    assert page.locator("#hits tr.hit").count() > 0
    (cookie,) = context.cookies()
    assert cookie["httpOnly"] and cookie["sameSite"] == "Strict"
    assert world.tokens["admin"] not in page.url and world.tokens["admin"] not in page.content()
    # Sign out: the next page asks for a token again.
    page.click("form[action='/logout'] button")
    page.wait_for_load_state()
    assert context.cookies() == []


def test_a_service_that_is_down_is_named_and_the_page_still_works(browser: Any, world: World) -> None:
    down = serve_console(
        ConsoleConfig(
            ingest_addr=f"127.0.0.1:{_free_port()}", query_addr=world.query_addr, namespaces=("example",)
        )
    )
    try:
        page = browser.new_context().new_page()
        page.goto(f"{down.url}/login")
        page.fill("#token", world.tokens["admin"])
        page.click("button[type=submit]")
        page.wait_for_load_state()
        assert "ingest_service is unreachable" in page.locator(".down").inner_text()
        assert page.locator("tr[data-namespace=example]").count() == 1
        # What query_service serves still works.
        page.goto(f"{down.url}/search?" + urlencode({"ns": "example", "q": "BILL-42"}))
        assert page.locator("#hits tr.hit").count() > 0
        page.goto(f"{down.url}/health")
        assert page.locator("tr[data-service=ingest_service] td.state-unreachable").count() == 2
        assert page.locator("tr[data-service=query_service] td.state-serving").count() == 2
    finally:
        down.stop()


def test_a_services_field_violations_are_shown(browser: Any, world: World) -> None:
    page = signed_in(browser, world, "admin")
    response = page.goto(url(world, "/search", ns="example", q="BILL-42", preset="no-such-preset"))
    assert response is not None and response.status == 200
    failure = page.locator(".failure")
    assert "INVALID_ARGUMENT" in failure.inner_text()
    assert failure.locator(".violations code", has_text="preset").count() == 1
    response = page.goto(url(world, "/node", ns="example", key="person:alice", as_of="yesterday"))
    assert response is not None and response.status == 400
    assert page.locator(".failure .violations code", has_text="as_of").count() == 1

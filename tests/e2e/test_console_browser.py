"""The web console's pages in a real browser: Debian's Chromium driven by Playwright, against the console
served by uvicorn and both services in-process with bearer tokens, loaded with tests/data/example and a
namespace of scoped items (``console_world.py``).

Every page loads and passes axe-core with no serious or critical violation; a search shows each ranking's
score; a pack shows why each item is in it; a trace shows a compilation as tables; badges link to what they
name; a long text is shown a part at a time; the as-of slider moves which facts are live; a fact links to
the observation that proves it. Screenshots of each page go to build/console-screenshots. Who sees what is
in ``test_console_access.py``.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from datetime import UTC
from datetime import datetime
from typing import Any
from urllib.parse import urlencode

import pytest

from common.kernel.config import Settings
from common.storage.database import Database
from memory_service_grpc_client import ClientSecurity
from memory_service_grpc_client import MemoryClient
from memory_service_grpc_client.memory.v1 import source_service_pb2
from memory_service_tools.console import ConsoleConfig
from tests.e2e.console_world import SCREENSHOTS
from tests.e2e.console_world import World
from tests.e2e.console_world import axe_violations
from tests.e2e.console_world import console_world
from tests.e2e.console_world import pages
from tests.e2e.console_world import serve_console
from tests.e2e.console_world import signed_in
from tests.e2e.console_world import url

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def world(settings: Settings, database: Database, tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    with console_world(settings, tmp_path_factory) as world:
        yield world


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

"""Who sees what in the web console, in a real browser (Debian's Chromium driven by Playwright) against the
console served by uvicorn and both services in-process with bearer tokens (``console_world.py``).

A reader without ``workspace:alpha`` sees no scoped item on any page while a reader with it does; the
start page lists the namespaces a token can see with counts that leave out what its scopes do not reach;
the audit page lists an admin's namespace events with the service's filters and paging, and shows a reader
the service's refusal; a missing token gets the login page; a service that is down is named; a service's
field violations are shown.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any
from urllib.parse import urlencode

import pytest

from common.kernel.config import Settings
from common.storage.database import Database
from memory_service_tools.console import ConsoleConfig
from tests.e2e.console_world import World
from tests.e2e.console_world import console_world
from tests.e2e.console_world import free_port
from tests.e2e.console_world import serve_console
from tests.e2e.console_world import signed_in
from tests.e2e.console_world import url

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def world(settings: Settings, database: Database, tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    with console_world(settings, tmp_path_factory) as world:
        yield world


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
            ingest_addr=f"127.0.0.1:{free_port()}", query_addr=world.query_addr, namespaces=("example",)
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

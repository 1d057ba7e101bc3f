"""idPatterns over text (ingest_service.facts.mentions.find_identifiers)."""

from __future__ import annotations

from common.packs.domain_packs import fill_template
from common.packs.domain_packs import validate_pack
from common.packs.identifier_patterns import find_identifiers
from common.packs.kind_validation import NamespaceKinds
from tests.unit.test_domain_packs import delivery_pack


def _kinds(pack: dict[str, object]) -> NamespaceKinds:
    return NamespaceKinds.of([validate_pack(pack)[1]], strict=False)


def test_matches_become_keys_in_text_order_without_duplicates() -> None:
    kinds = _kinds(delivery_pack())
    found = find_identifiers(kinds, ["Fixes PROJ-12 and PROJ-7; see PROJ-12 again", "PROJ-3"])
    assert [match.natural_key for match in found] == ["issue:PROJ-12", "issue:PROJ-7", "issue:PROJ-3"]
    assert found[0].kind == "issue" and found[0].matched == "PROJ-12"


def test_named_groups_fill_the_template_and_aliases_resolve() -> None:
    pack = delivery_pack()
    pack["kinds"][3] = {
        "kind": "issue",
        "naturalKey": "PROJ-<number>",
        "idPatterns": ["(?i)proj[ _-]?(?P<number>[0-9]+)"],
        "aliases": {"PROJ-1": "PROJ-1000"},
    }
    pack["kinds"][0]["idPatterns"] = ["checkout", "SVC-[a-z]+"]
    found = find_identifiers(_kinds(pack), ["proj 42, Proj_1 and checkout; SVC-Upper is no key"])
    assert [match.natural_key for match in found] == [
        "issue:PROJ-42",
        "issue:PROJ-1000",
        "service:checkout-svc",
    ]


def test_ids_outside_the_natural_key_are_not_identifiers() -> None:
    pack = delivery_pack()
    pack["kinds"][0]["idPatterns"] = ["[A-Za-z]+-svc"]  # naturalKey pattern ^[a-z][a-z0-9-]*$
    found = find_identifiers(_kinds(pack), ["Billing-svc and billing-svc"])
    assert [match.natural_key for match in found] == ["service:billing-svc"]


def test_the_limit_bounds_the_result_and_no_packs_find_nothing() -> None:
    kinds = _kinds(delivery_pack())
    text = " ".join(f"PROJ-{n}" for n in range(1000))
    assert len(find_identifiers(kinds, [text], limit=10)) == 10
    assert len(find_identifiers(kinds, [text])) == 100
    assert find_identifiers(NamespaceKinds(), ["PROJ-1"]) == []


def test_fill_template() -> None:
    assert fill_template("PROJ-<number>", {"number": "12"}) == "PROJ-12"
    assert fill_template("{method} {path}", {"method": "GET", "path": "/a"}) == "GET /a"
    assert fill_template("{method} {path}", {"method": "GET"}) is None

"""Pure parts of CompileTypedContext (query_service.context.typed_context): anchor resolution and relation rules."""

from __future__ import annotations

from typing import Any

from common.packs.domain_packs import validate_pack
from common.packs.kind_validation import NamespaceKinds
from query_service.context.typed_traversal import relation_rules
from query_service.context.typed_traversal import resolve_anchors
from tests.unit.test_domain_packs import delivery_pack


def _kinds(pack: dict[str, Any]) -> NamespaceKinds:
    return NamespaceKinds.of([validate_pack(pack)[1]], strict=True)


def test_anchors_resolve_through_aliases_and_id_patterns() -> None:
    kinds = _kinds(delivery_pack())
    found = resolve_anchors(
        kinds,
        ["svc:checkout", "checkout", "PROJ-12", "user:ann", "doc:readme"],
        "compare PROJ-12 with PROJ-7 and checkout",
        query_limit=20,
    )
    assert found == [
        ("svc:checkout", "service:checkout-svc", "anchor"),
        ("checkout", "checkout", "anchor"),  # as given, besides what it resolves to
        ("PROJ-12", "PROJ-12", "anchor"),
        ("PROJ-12", "issue:PROJ-12", "anchor"),
        ("user:ann", "person:ann", "anchor"),
        ("doc:readme", "doc:readme", "anchor"),
        ("PROJ-7", "issue:PROJ-7", "query"),
    ]
    assert resolve_anchors(kinds, [], "PROJ-1 PROJ-2 PROJ-3", query_limit=2) == [
        ("PROJ-1", "issue:PROJ-1", "query"),
        ("PROJ-2", "issue:PROJ-2", "query"),
    ]


def test_relation_rules_carry_kind_aliases_and_mentions() -> None:
    kinds = _kinds(delivery_pack())
    rules = {rule.relation: rule for rule in relation_rules(kinds)}
    assert sorted(rules) == ["ASSIGNED_TO", "DEPENDS_ON", "EXPOSES", "MEMBER_OF", "MENTIONS", "OWNS"]
    assert rules["MEMBER_OF"].from_kinds == {"person", "user"} and rules["MEMBER_OF"].to_kinds == {"team"}
    assert rules["DEPENDS_ON"].from_kinds == {"service", "svc"}
    assert not rules["MENTIONS"].from_kinds and not rules["MENTIONS"].to_kinds
    assert [rule.relation for rule in relation_rules(kinds, ["OWNS", "MENTIONS"])] == ["MENTIONS", "OWNS"]
    own = delivery_pack()
    own["relations"].append({"relation": "MENTIONS", "fromKinds": ["issue"], "toKinds": ["service"]})
    mentions = [rule for rule in relation_rules(_kinds(own)) if rule.relation == "MENTIONS"]
    assert len(mentions) == 1 and mentions[0].from_kinds == {"issue"}

"""Pack validation and compilation (common.packs.domain_packs) and the strict checks (kind_validation)."""

from __future__ import annotations

from typing import Any

import pytest

from common.kernel.errors import InvalidArgument
from common.packs.domain_packs import compile_template
from common.packs.domain_packs import validate_pack
from common.packs.kind_validation import NamespaceKinds


def delivery_pack(version: str = "1.0.0") -> dict[str, Any]:
    return {
        "name": "software-delivery",
        "version": version,
        "kinds": [
            {
                "kind": "service",
                "naturalKey": {"type": "string", "pattern": "^[a-z][a-z0-9-]*$"},
                "aliases": {"checkout": "checkout-svc"},
                "kindAliases": ["svc"],
                "attributes": {
                    "type": "object",
                    "properties": {"tier": {"enum": ["gold", "silver"]}, "port": {"type": "integer"}},
                    "additionalProperties": False,
                },
            },
            {"kind": "endpoint", "naturalKey": "{method} {path}"},
            {"kind": "component"},
            {"kind": "issue", "naturalKey": "PROJ-<number>", "idPatterns": ["PROJ-[0-9]+"]},
            {"kind": "person", "kindAliases": ["user"]},
            {"kind": "team"},
        ],
        "relations": [
            {"relation": "OWNS", "fromKinds": ["team"], "toKinds": ["service", "component"]},
            {"relation": "DEPENDS_ON", "fromKinds": ["service"], "toKinds": ["service"]},
            {"relation": "EXPOSES", "fromKinds": ["service"], "toKinds": ["endpoint"]},
            {"relation": "ASSIGNED_TO", "fromKinds": ["issue"], "toKinds": ["person"], "cardinality": "one"},
            {"relation": "MEMBER_OF", "fromKinds": ["person"], "toKinds": ["team"]},
        ],
    }


def violations_of(raw: dict[str, Any]) -> dict[str, str]:
    with pytest.raises(InvalidArgument) as raised:
        validate_pack(raw)
    return {violation.field: violation.description for violation in raised.value.violations}


def test_a_valid_pack_is_normalised_and_compiled() -> None:
    content, pack = validate_pack(delivery_pack())
    assert set(pack.kinds) == {"service", "endpoint", "component", "issue", "person", "team"}
    assert content["relations"][0]["temporal"] is True and content["relations"][0]["cardinality"] == "many"
    assert pack.relations["ASSIGNED_TO"].cardinality == "one"
    assert pack.kinds["issue"].id_patterns[0].search("see PROJ-12 now")


def test_struct_doubles_are_integral_again() -> None:
    raw = delivery_pack()
    raw["kinds"][0]["attributes"]["properties"]["port"]["maximum"] = 65535.0
    content, _ = validate_pack(raw)
    assert content["kinds"][0]["attributes"]["properties"]["port"]["maximum"] == 65535
    assert isinstance(content["kinds"][0]["attributes"]["properties"]["port"]["maximum"], int)


def test_the_pack_shape_is_checked_by_json_schema() -> None:
    raw = delivery_pack()
    raw["kinds"][1]["colour"] = "red"
    raw["relations"][0]["cardinality"] = "two"
    del raw["version"]
    found = violations_of(raw)
    assert "package" in found and "version" in found["package"]
    assert "package.kinds[1]" in found
    assert "package.relations[0].cardinality" in found


def test_schemas_templates_and_patterns_are_checked() -> None:
    raw = delivery_pack()
    raw["kinds"][0]["attributes"] = {"type": "object", "properties": {"tier": {"type": "colour"}}}
    raw["kinds"][2]["naturalKey"] = {"minLength": -1}
    raw["kinds"][3]["idPatterns"] = ["PROJ-[0-9"]
    raw["kinds"][1]["naturalKey"] = "{method} {method}"
    found = violations_of(raw)
    assert any(path.startswith("package.kinds[0].attributes") for path in found)
    assert any(path.startswith("package.kinds[2].naturalKey") for path in found)
    assert "package.kinds[3].idPatterns[0]" in found
    assert "package.kinds[1].naturalKey" in found


def test_reserved_name_base_kinds_duplicates_and_unknown_relation_kinds() -> None:
    raw = delivery_pack()
    raw["name"] = "default"
    raw["kinds"].append({"kind": "document"})
    raw["kinds"].append({"kind": "team"})
    raw["relations"].append({"relation": "OWNS"})
    raw["relations"].append({"relation": "BLOCKS", "fromKinds": ["ticket"]})
    found = violations_of(raw)
    assert "reserved" in found["package.name"]
    assert "base kind" in found["package.kinds[6].kind"]
    assert "package.kinds[7].kind" in found
    assert "package.relations[5].relation" in found
    assert "package.relations[6].fromKinds[0]" in found


def test_templates_compile_to_anchored_regexes() -> None:
    pattern = compile_template("{method} <path>")
    assert pattern.match("GET /api/v1/orders")
    assert not pattern.match("GET")
    assert compile_template("PROJ-<n>").match("PROJ-1") and not compile_template("PROJ-<n>").match("XPROJ-1")
    assert compile_template("a.b").match("a.b") and not compile_template("a.b").match("axb")


def kinds(strict: bool) -> NamespaceKinds:
    return NamespaceKinds.of([validate_pack(delivery_pack())[1]], strict)


def test_strict_entities_name_pack_kind_and_json_path() -> None:
    strict = kinds(True)
    key, type_, found = strict.check_entity("svc:checkout", "", {"tier": "gold"}, "assertions[0].entity")
    assert (key, type_, found) == ("service:checkout-svc", "service", [])
    _, _, found = strict.check_entity("service:Bad_Name", "", {"tier": "bronze", "x": 1}, "entities[2]")
    fields = {violation.field: violation.description for violation in found}
    assert "entities[2].key" in fields and "software-delivery" in fields["entities[2].key"]
    assert "service" in fields["entities[2].attributes.tier"]
    assert "entities[2].attributes" in fields  # additionalProperties
    _, _, found = strict.check_entity("robot:r2", "", {}, "entities[0]")
    assert [violation.field for violation in found] == ["entities[0].key"]
    assert strict.check_entity("endpoint:GET /orders", "", {}, "e")[2] == []
    assert strict.check_entity("endpoint:GET", "", {}, "e")[2] != []
    assert strict.check_entity("doc:readme", "document", None, "")[2] == []


def test_strict_relations_follow_from_and_to_kinds() -> None:
    strict = kinds(True)
    subject, obj, found = strict.check_fact("user:alice", "MEMBER_OF", "team:core", "facts[0]")
    assert (subject, obj, found) == ("person:alice", "team:core", [])
    _, _, found = strict.check_fact("team:core", "MEMBER_OF", "team:core", "facts[1]")
    assert [violation.field for violation in found] == ["facts[1].subject"]
    assert "MEMBER_OF" in found[0].description
    _, _, found = strict.check_fact("team:core", "LIKES", "team:core", "facts[2]")
    assert [violation.field for violation in found] == ["facts[2].predicate"]


def test_non_strict_resolves_aliases_and_accepts_unknown_kinds() -> None:
    loose = kinds(False)
    assert loose.check_entity("robot:r2", "", {"a": 1}, "")[2] == []
    assert loose.check_entity("svc:checkout", "", {"tier": "bronze"}, "")[:2] == (
        "service:checkout-svc",
        "service",
    )
    assert loose.check_fact("team:core", "LIKES", "robot:r2", "")[2] == []

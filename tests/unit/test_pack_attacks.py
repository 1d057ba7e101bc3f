"""Domain packs as an attack surface: references stay inside the pack, regular expressions
run in linear time on RE2, sizes are bounded. Each test fails with jsonschema's and Python's defaults
(remote retrieval, backtracking ``re``), which is what `common.packs.pack_schemas` replaces."""

from __future__ import annotations

import json
import urllib.request
from typing import Any

import pytest

from common.kernel.errors import InvalidArgument
from common.packs.domain_packs import validate_pack
from common.packs.identifier_patterns import find_identifiers
from common.packs.kind_validation import NamespaceKinds
from common.packs.pack_schemas import MAX_PACK_BYTES
from common.packs.pack_schemas import MAX_PATTERNS_PER_PACK
from common.packs.pack_schemas import MAX_SCHEMA_BYTES

# Catastrophic backtracking for Python's re: (a+)+$ against a run of a's that ends in a non-a.
EVIL_PATTERN = "(a+)+$"
EVIL_TEXT = "a" * 5000 + "!"


def _pack(**kind: Any) -> dict[str, Any]:
    return {"name": "attack", "version": "1.0.0", "kinds": [{"kind": "thing", **kind}]}


def _violations(raw: dict[str, Any]) -> dict[str, str]:
    with pytest.raises(InvalidArgument) as raised:
        validate_pack(raw)
    return {violation.field: violation.description for violation in raised.value.violations}


@pytest.fixture
def no_network(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Records every URL jsonschema's fallback retrieval would open (none must be opened)."""
    opened: list[str] = []

    def refuse(url: Any, *args: Any, **kwargs: Any) -> Any:
        opened.append(str(getattr(url, "full_url", url)))
        raise AssertionError(f"a pack reference was fetched: {url}")

    monkeypatch.setattr(urllib.request, "urlopen", refuse)
    return opened


@pytest.mark.parametrize(
    "reference",
    [
        "http://127.0.0.1:9/schema.json",
        "file:///etc/passwd",
        "https://json-schema.org/draft/2020-12/schema",
        "other.json#/x",
    ],
)
def test_references_outside_the_pack_are_refused_at_registration(
    reference: str, no_network: list[str]
) -> None:
    attributes = {"type": "object", "properties": {"owner": {"$ref": reference}}}
    violations = _violations(_pack(attributes=attributes))
    field = "package.kinds[0].attributes.properties.owner.$ref"
    assert "points outside the schema" in violations[field]
    assert "root:" not in violations[field]  # nothing of /etc/passwd reaches the caller
    assert no_network == []


def test_local_references_resolve_and_validate(no_network: list[str]) -> None:
    attributes = {
        "$defs": {"port": {"type": "integer", "minimum": 1}},
        "type": "object",
        "properties": {"port": {"$ref": "#/$defs/port"}},
    }
    _, pack = validate_pack(_pack(attributes=attributes))
    kinds = NamespaceKinds.of([pack], strict=True)
    assert kinds.check_entity("thing:a", "", {"port": 80}, "entity")[2] == []
    bad = kinds.check_entity("thing:a", "", {"port": 0}, "entity")[2]
    assert [v.field for v in bad] == ["entity.attributes.port"]
    assert no_network == []


def test_unresolvable_local_references_and_nested_ids_are_refused() -> None:
    attributes = {
        "type": "object",
        "properties": {
            "a": {"$ref": "#/$defs/missing"},
            "b": {"$id": "http://example.org/b", "type": "string"},
        },
    }
    violations = _violations(_pack(attributes=attributes))
    assert "does not resolve" in violations["package.kinds[0].attributes.properties.a.$ref"]
    assert "nested $id" in violations["package.kinds[0].attributes.properties.b.$id"]


@pytest.mark.timeout(20)
def test_an_exponential_id_pattern_runs_in_linear_time() -> None:
    _, pack = validate_pack(_pack(idPatterns=[EVIL_PATTERN, "THING-[0-9]+"]))
    kinds = NamespaceKinds.of([pack], strict=False)
    assert [m.natural_key for m in find_identifiers(kinds, [EVIL_TEXT + " THING-7"])] == ["thing:THING-7"]


@pytest.mark.timeout(20)
def test_an_exponential_schema_pattern_runs_in_linear_time() -> None:
    attributes = {"type": "object", "properties": {"code": {"type": "string", "pattern": EVIL_PATTERN}}}
    natural_key = {"type": "string", "pattern": EVIL_PATTERN}
    _, pack = validate_pack(_pack(attributes=attributes, naturalKey=natural_key))
    kinds = NamespaceKinds.of([pack], strict=True)
    violations = kinds.check_entity("thing:" + EVIL_TEXT, "", {"code": EVIL_TEXT}, "entity")[2]
    assert sorted(v.field for v in violations) == ["entity.attributes.code", "entity.key"]
    assert kinds.check_entity("thing:aaa", "", {"code": "aaaa"}, "entity")[2] == []


@pytest.mark.timeout(20)
def test_pattern_properties_and_additional_properties_keep_their_meaning_on_re2() -> None:
    attributes = {
        "type": "object",
        "properties": {"name": {"type": "string"}},
        "patternProperties": {"^x-[a-z]+$": {"type": "integer"}, EVIL_PATTERN: {"type": "string"}},
        "additionalProperties": False,
    }
    _, pack = validate_pack(_pack(attributes=attributes))
    kinds = NamespaceKinds.of([pack], strict=True)
    assert kinds.check_entity("thing:a", "", {"name": "n", "x-port": 1, "aaa": "s"}, "entity")[2] == []
    fields = sorted(v.field for v in kinds.check_entity("thing:a", "", {"x-port": "one"}, "entity")[2])
    assert fields == ["entity.attributes.x-port"]
    # "aaaa" matches (a+)+$, so its value must be a string
    wrong_type = kinds.check_entity("thing:a", "", {"aaaa": 2}, "entity")[2]
    assert [v.field for v in wrong_type] == ["entity.attributes.aaaa"]
    extra = kinds.check_entity("thing:a", "", {"other": 1, EVIL_TEXT: 2}, "entity")[2]  # neither key matches
    assert [v.field for v in extra] == ["entity.attributes"]
    assert "additional properties" in extra[0].description and "'other'" in extra[0].description
    assert len(extra[0].description) < 400  # a 5,000-character key is shortened in the message


@pytest.mark.parametrize(
    ("pattern", "reason"),
    [(r"(a)\1", "invalid escape"), ("(?=x)y", "perl operator"), ("(?<!x)y", "perl operator")],
)
def test_what_re2_cannot_run_is_refused_with_its_field(pattern: str, reason: str) -> None:
    attributes = {"type": "object", "properties": {"code": {"type": "string", "pattern": pattern}}}
    violations = _violations(_pack(idPatterns=[pattern], attributes=attributes))
    assert reason in violations["package.kinds[0].idPatterns[0]"]
    assert reason in violations["package.kinds[0].attributes.properties.code.pattern"]


def test_unevaluated_properties_beside_pattern_properties_is_refused() -> None:
    attributes = {"type": "object", "patternProperties": {"^x$": {}}, "unevaluatedProperties": False}
    violations = _violations(_pack(attributes=attributes))
    assert "unevaluatedProperties" in violations["package.kinds[0].attributes.unevaluatedProperties"]


def test_pack_and_schema_sizes_and_the_number_of_patterns_are_bounded() -> None:
    big_schema = {"type": "object", "description": "x" * MAX_SCHEMA_BYTES}
    assert "bytes of JSON" in _violations(_pack(attributes=big_schema))["package.kinds[0].attributes"]
    huge = _pack(attributes={"type": "object", "description": "x" * (MAX_PACK_BYTES + 1)})
    assert "at most" in _violations(huge)["package"]
    kinds = [{"kind": f"k{index}", "idPatterns": [f"K{index}-[0-9]+"] * 100} for index in range(11)]
    too_many = {"name": "attack", "version": "1.0.0", "kinds": kinds}
    assert len(json.dumps(too_many)) < MAX_PACK_BYTES
    assert f"at most {MAX_PATTERNS_PER_PACK}" in _violations(too_many)["package.kinds"]


def test_a_pack_cannot_define_or_alias_the_audit_trail() -> None:
    """Kind aliases resolve before the write paths' reserved-key checks: a pack kind ``audit_event`` with
    alias ``y`` would turn ``y:<event id>`` into ``audit_event:<event id>`` (hostile-tenant finding)."""
    raw = {
        "name": "attack",
        "version": "1.0.0",
        "kinds": [
            {"kind": "audit_event", "kindAliases": ["y"]},
            {"kind": "thing", "kindAliases": ["pc_trace"]},
        ],
        "relations": [{"relation": "IN_TRACE"}],
    }
    violations = _violations(raw)
    assert "reserved for the audit trail" in violations["package.kinds[0].kind"]
    assert "reserved for the audit trail" in violations["package.kinds[1].kindAliases[0]"]
    assert "reserved for the audit trail" in violations["package.relations[0].relation"]

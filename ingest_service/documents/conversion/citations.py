"""The citation of a chunk of a converted document: the file and the place, as a reader cites it
("manual.pdf, p. 12", "manual.pdf, pp. 12–13" for a paragraph over a page break, "deck.pptx, slide 3",
"budget.xlsx, sheet Q1, A1:D20", "guide.docx, Install / Linux")."""

from __future__ import annotations

import posixpath
from collections.abc import Mapping
from typing import Any


def document_name(source_path: str, title: str, natural_key: str) -> str:
    """The name a citation starts with: the file name of ``source_path``, else the title, else the key."""
    if source_path.strip():
        return posixpath.basename(source_path.rstrip("/")) or source_path
    return title or natural_key


def citation(name: str, location: Mapping[str, Any], heading: str) -> str:
    """``name`` and the place: page, slide, sheet and cells, message, chapter, or the heading path."""
    places: list[str] = []
    if "page" in location:
        first, last = location["page"], location.get("last_page", location["page"])
        places.append(f"p. {first}" if last == first else f"pp. {first}–{last}")
    if "slide" in location:
        places.append(f"slide {location['slide']}")
    if "sheet" in location:
        places.append(f"sheet {location['sheet']}")
        if location.get("cells"):
            places.append(str(location["cells"]))
    if "message" in location:
        places.append(f"message {location['message']}")
    if not places and heading:
        places.append(heading)
    return ", ".join([name, *places])


__all__ = ["citation", "document_name"]

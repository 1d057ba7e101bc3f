"""docs/reference/mcp-tools.md describes every registered MCP tool, and nothing else."""

from __future__ import annotations

import re
from pathlib import Path

from memory_service_tools.mcp import TOOL_NAMES

REFERENCE = Path(__file__).resolve().parents[2] / "docs" / "reference" / "mcp-tools.md"


def test_the_reference_has_a_section_per_registered_tool() -> None:
    sections = re.findall(r"^### (\w+)$", REFERENCE.read_text(encoding="utf-8"), flags=re.MULTILINE)
    assert sections == list(TOOL_NAMES)

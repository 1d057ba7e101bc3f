"""What a tool call answers: a message as proto3 JSON, the error block of a refusal, and the result of a
batch with refused items (the ``isError`` rule of docs/reference/mcp-tools.md)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from google.protobuf import json_format
from google.protobuf.message import Message
from mcp_types import CallToolResult
from mcp_types import TextContent

__all__ = ["as_json", "failure_block", "refused_items"]


def as_json(message: Message) -> dict[str, Any]:
    """``message`` as proto3 JSON with the protos' field names."""
    # Every field, defaults included (created: false says "duplicate"; an absent key would say nothing).
    result: dict[str, Any] = json_format.MessageToDict(
        message, preserving_proto_field_name=True, always_print_fields_with_no_presence=True
    )
    return result


def refused_items(response: dict[str, Any], failures: Sequence[str]) -> CallToolResult:
    """The result of a batch with failed items: a tool error (``isError: true``) whose text is the error
    block of every failed item (``failures``) followed by the JSON of the whole ``response``, which is
    also its structured content."""
    text = "\n".join([*failures, json.dumps(response, ensure_ascii=False, indent=2)])
    return CallToolResult(
        content=[TextContent(type="text", text=text)], structured_content=response, is_error=True
    )


def failure_block(head: str, violations: Sequence[str]) -> str:
    """``head`` and one ``  - field: problem`` line per violation."""
    return "\n".join([head, *(f"  - {violation}" for violation in violations)])

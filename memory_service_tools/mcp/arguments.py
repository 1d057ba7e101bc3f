"""The tools' arguments: the annotated types and models of their input schemas, the tools' own checks
of instants and natural keys, and `closed_tool` (a call naming an argument the schema lacks is refused)."""

from __future__ import annotations

from typing import Annotated

from mcp.server.mcpserver.exceptions import ToolError
from mcp.server.mcpserver.tools import Tool
from pydantic import BaseModel
from pydantic import ConfigDict
from pydantic import Field

from common.kernel.identifiers import canonical_instant
from common.kernel.identifiers import parse_instant
from memory_service_tools.mcp.results import failure_block

__all__ = [
    "FactInput",
    "Instant",
    "MemoryItem",
    "Namespace",
    "Project",
    "bad_argument",
    "closed_tool",
    "instant_argument",
    "participant_argument",
]

Namespace = Annotated[str, Field(description="namespace to use, e.g. 'example' (the user's project or team)")]
Instant = Annotated[
    str | None,
    Field(description="ISO 8601 instant such as 2026-09-01T00:00:00Z; without an offset it is UTC"),
]


Project = Annotated[str, Field(description="project of the user's memories, if the application has several")]


class FactInput(BaseModel):
    """A fact the observation asserts: subject -[predicate]-> object."""

    model_config = ConfigDict(extra="forbid")

    subject: str = Field(description="natural key of the subject, e.g. person:alice")
    predicate: str = Field(description="relation in UPPER_SNAKE, e.g. WORKS_ON")
    object: str = Field(description="natural key of the object, e.g. project:billing")
    valid_from: str | None = Field(None, description="ISO 8601 instant the fact starts; default occurred_at")
    valid_to: str | None = Field(None, description="ISO 8601 instant the fact ends; default open")
    supersedes: str | None = Field(None, description="fact_id this fact replaces (that one is closed)")


class MemoryItem(BaseModel):
    """One memory for add_memories."""

    model_config = ConfigDict(extra="forbid")

    text: str = Field(description="the memory, one or two self-contained sentences")
    key: str = Field(
        "", description="idempotency key, e.g. the message or ticket id (a retry stores nothing)"
    )
    tags: list[str] = Field(default_factory=list, description="labels such as 'preference' or 'incident'")
    importance: float | None = Field(None, ge=0, le=1, description="0..1; default 0.5")
    ttl_seconds: int | None = Field(None, ge=1, description="forget after this many seconds")
    source: str = Field("", description="where it came from, e.g. 'chat'; default 'mcp'")


def bad_argument(field: str, problem: str) -> ToolError:
    """An argument the tool's own checks refuse, in the documented ``error: CODE: message`` form."""
    return ToolError(failure_block(f"error: INVALID_ARGUMENT: {field}: {problem}", [f"{field}: {problem}"]))


def instant_argument(text: str | None, field: str) -> str | None:
    """``text`` as a canonical UTC instant (None when empty); refused with a field violation otherwise."""
    if text is None or not text.strip():
        return None
    try:
        return canonical_instant(parse_instant(text, assume_utc=True))
    except (ValueError, OverflowError) as exc:  # OverflowError: an offset past year 1 or 9999 in UTC
        raise bad_argument(
            field, f"{text!r} is not an ISO 8601 instant in years 1..9999 UTC (e.g. 2026-09-01T00:00:00Z)"
        ) from exc


def participant_argument(key: str | None, field: str) -> dict[str, str] | None:
    """A natural key ``type:id`` as an observation participant (None when empty)."""
    if key is None or not key.strip():
        return None
    type_, sep, id_ = key.partition(":")
    if not sep or not type_ or not id_:
        raise bad_argument(field, f"{key!r} is not a natural key type:id (e.g. person:alice)")
    return {"type": type_, "id": id_}


def closed_tool(tool: Tool) -> Tool:
    """``tool`` refusing arguments it does not have: its input schema says ``additionalProperties:
    false`` and the SDK's argument model (pydantic, which the SDK validates every call with) forbids
    extra inputs, so a call with an unknown or misspelt argument is a tool error naming it (``Extra
    inputs are not permitted``) instead of running without it. The nested models (`FactInput`,
    `MemoryItem`) forbid them the same way."""
    loose = tool.fn_metadata.arg_model
    closed = type(
        loose.__name__,
        (loose,),
        {
            "model_config": ConfigDict(**{**loose.model_config, "extra": "forbid"}),
            "__module__": loose.__module__,
        },
    )
    tool.fn_metadata.arg_model = closed
    tool.parameters = closed.model_json_schema(by_alias=True)
    return tool

"""The pure parts of the CLI: JSONL parsing, frontmatter, natural keys, instants (its commands:
`tests/unit/test_cli_commands.py`)."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest
from google.protobuf import json_format

from memory_service_tools.cli.option_types import parse_instant
from memory_service_tools.markdown_vault import DocumentError
from memory_service_tools.markdown_vault import default_natural_key
from memory_service_tools.markdown_vault import find_documents
from memory_service_tools.markdown_vault import read_document
from memory_service_tools.observation_file import LineError
from memory_service_tools.observation_file import ParsedObservation
from memory_service_tools.observation_file import parse_observation_lines
from tests.unit.cli_fakes import OBSERVATION
from tests.unit.cli_fakes import observation_line

# --------------------------------------------------------------------------------------------------
# JSONL parsing


def test_parse_observation_lines_reports_bad_lines_with_numbers() -> None:
    lines = [
        observation_line(),
        "",
        "{not json",
        observation_line(kind="x", unknown_field=1),
        "[1, 2]",
        observation_line(occurred_at="yesterday"),
        json.dumps({"observations": [OBSERVATION, {**OBSERVATION, "kind": "second"}]}),
        b"\xff\xfe",
        observation_line(content="Привет, мир"),
    ]
    items = list(parse_observation_lines(lines))
    assert [(type(i).__name__, i.line) for i in items] == [
        ("ParsedObservation", 1),
        ("LineError", 3),
        ("LineError", 4),
        ("LineError", 5),
        ("LineError", 6),
        ("ParsedObservation", 7),
        ("ParsedObservation", 7),
        ("LineError", 8),
        ("ParsedObservation", 9),
    ]
    first = items[0]
    assert isinstance(first, ParsedObservation)
    assert first.observation.source.external_id == "time/1.7-5"
    assert first.observation.assertions[1].fact.object.string_value == "version:time@1.7-5"
    assert first.observation.assertions[1].fact.subject.struct_value["id"] == "time"
    errors = {i.line: i.error for i in items if isinstance(i, LineError)}
    assert errors[3].startswith("invalid JSON")
    assert "unknown_field" in errors[4]
    assert "expected a JSON object" in errors[5]
    assert "occurred_at" in errors[6] or "yesterday" in errors[6]
    assert "UTF-8" in errors[8]
    second = items[6]
    assert isinstance(second, ParsedObservation) and second.observation.kind == "second"
    last = items[-1]
    assert isinstance(last, ParsedObservation) and last.observation.content == "Привет, мир"


def test_parse_errors_name_the_fix_for_naive_instants_and_string_participants() -> None:
    naive, participant = (
        item.error
        for item in parse_observation_lines(
            [observation_line(occurred_at="2026-01-01T00:00:00"), observation_line(subject="package:time")]
        )
        if isinstance(item, LineError)
    )
    assert "UTC offset, e.g. 2026-01-01T00:00:00Z" in naive
    assert '{"type": "person", "id": "alice"}' in participant


def test_parse_observation_lines_namespace_override() -> None:
    items = list(
        parse_observation_lines([observation_line(), observation_line(namespace="")], namespace="other")
    )
    assert [i.observation.namespace for i in items if isinstance(i, ParsedObservation)] == ["other", "other"]


def test_parse_observation_round_trips_proto3_json() -> None:
    (item,) = parse_observation_lines([observation_line()])
    assert isinstance(item, ParsedObservation)
    again = json_format.MessageToDict(item.observation, preserving_proto_field_name=True)
    assert again["occurred_at"] == "1999-10-02T20:00:28Z"
    assert again["data"] == {"version": "1.7-5", "urgency": "low"}


def test_parse_instant() -> None:
    assert parse_instant("2024-05-01T10:00:00Z").ToJsonString() == "2024-05-01T10:00:00Z"
    assert parse_instant("2024-05-01T13:00:00+03:00").ToJsonString() == "2024-05-01T10:00:00Z"
    assert parse_instant("2024-05-01").ToJsonString() == "2024-05-01T00:00:00Z"
    assert parse_instant("2024-05-01T10:00:00.250Z").ToJsonString() == "2024-05-01T10:00:00.250Z"
    with pytest.raises(ValueError, match="ISO 8601"):
        parse_instant("last tuesday")


# --------------------------------------------------------------------------------------------------
# Vault files


def test_default_natural_key() -> None:
    assert default_natural_key("apt/README.md") == "doc:apt/README"
    assert default_natural_key(Path("a") / "b" / "c.md") == "doc:a/b/c"
    assert default_natural_key("notes.MD") == "doc:notes"
    assert default_natural_key("Заметки/план.md") == "doc:Заметки/план"


def test_find_documents_sorted_and_skips_hidden_folders(tmp_path: Path) -> None:
    for name in (
        "b.md",
        "a/z.md",
        "a/b.md",
        "A.md",
        ".obsidian/x.md",
        "a/.hidden/y.md",
        "c.png",
        "_github/r.md",
    ):
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("# x\n")
    found = [p.relative_to(tmp_path).as_posix() for p in find_documents(tmp_path)]
    assert found == ["A.md", "_github/r.md", "a/b.md", "a/z.md", "b.md"]


def test_read_document_with_frontmatter_keeps_bytes(tmp_path: Path) -> None:
    text = (
        "---\r\n"
        'title: "APT"\r\n'
        'natural_key: "doc:apt/README"\r\n'
        'project: "project:apt"\r\n'
        "license: GPL-2.0-or-later\r\n"
        "links: doc:apt/NEWS\r\n"
        "type: readme\r\n"
        "updated: 2024-05-01\r\n"
        "---\r\n"
        "APT\r\n===\r\n\r\nТекст на русском.\r\n"
    )
    path = tmp_path / "apt" / "README.md"
    path.parent.mkdir()
    path.write_bytes(text.encode())
    request = read_document(path, tmp_path, namespace="docs")
    assert request.namespace == "docs"
    assert request.content.encode() == path.read_bytes()  # frontmatter and CRLF kept
    assert request.natural_key == "doc:apt/README"
    assert request.title == "APT"
    assert request.type == "readme"
    assert list(request.links) == ["doc:apt/NEWS"]
    assert request.source_path == "apt/README.md"
    assert json_format.MessageToDict(request.provenance) == {
        "path": "apt/README.md",
        "sha256": hashlib.sha256(text.encode()).hexdigest(),
    }
    assert json_format.MessageToDict(request.meta) == {
        "project": "project:apt",
        "license": "GPL-2.0-or-later",
        "updated": "2024-05-01",
    }


def test_read_document_defaults_and_link_lists(tmp_path: Path) -> None:
    plain = tmp_path / "guides" / "setup.md"
    plain.parent.mkdir()
    plain.write_text("# Setup\n\nNo frontmatter.\n", encoding="utf-8")
    request = read_document(plain, tmp_path, namespace="ns")
    assert request.natural_key == "doc:guides/setup"
    assert request.title == "" and request.type == "" and list(request.links) == []
    assert not request.HasField("meta")

    listed = tmp_path / "list.md"
    listed.write_text("---\nlinks:\n  - doc:a\n  - doc:b\npii: 'false'\nscopes: workspace:x\n---\nbody\n")
    request = read_document(listed, tmp_path, namespace="ns")
    assert list(request.links) == ["doc:a", "doc:b"]
    assert list(request.scopes) == ["workspace:x"]
    assert request.pii is False


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (b"---\ntitle: [unclosed\n---\nbody\n", "bad frontmatter"),
        (b"PK\x03\x04\x00\x00 a zip under a Markdown name", "not text"),
        (b"---\nlinks: {a: 1}\n---\nbody\n", "links"),
        (b"---\nmeta: [1, 2]\n---\nbody\n", "meta"),
    ],
)
def test_read_document_errors(tmp_path: Path, data: bytes, message: str) -> None:
    path = tmp_path / "bad.md"
    path.write_bytes(data)
    with pytest.raises(DocumentError, match=message):
        read_document(path, tmp_path, namespace="ns")


def test_a_markdown_file_in_cp1251_is_read_as_the_server_reads_text(tmp_path: Path) -> None:
    path = tmp_path / "note.md"
    path.write_bytes("# Заметка\n\nТекст.\n".encode("cp1251"))
    assert read_document(path, tmp_path, namespace="ns").content == "# Заметка\n\nТекст.\n"

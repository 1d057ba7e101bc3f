"""``cb --version``, ``cb health`` (exit code by state) and ``--json`` on ``observe``, ``retain`` and
``token list``, against small in-process servicers behind the real server host."""

from __future__ import annotations

import json
import re
import socket
from collections.abc import Callable
from pathlib import Path
from typing import Any

import grpc
import pytest
from typer.testing import CliRunner

from common.auth.principals import Right
from memory_service_grpc_client import wait_for_serving
from memory_service_grpc_client.memory.v1 import source_service_pb2_grpc
from memory_service_tools.cli import app
from memory_service_tools.token_writer import add_token
from tests.unit.cli_fakes import FakeDocuments
from tests.unit.cli_fakes import FakeObservations
from tests.unit.cli_fakes import document_server
from tests.unit.cli_fakes import observation_line
from tests.unit.cli_fakes import observation_server

runner = CliRunner()


def _sources(server: grpc.Server) -> list[str]:
    source_service_pb2_grpc.add_SourceServiceServicer_to_server(
        source_service_pb2_grpc.SourceServiceServicer(), server
    )
    return ["memory.v1.SourceService"]


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def test_version_prints_the_installed_version() -> None:
    from importlib.metadata import version

    result = runner.invoke(app, ["--version"])
    assert result.exit_code == 0
    assert result.stdout.strip() == f"cb (memory-service) {version('memory-service')}"


def _health(ingest: str, query: str, *extra: str) -> tuple[int, dict[str, object]]:
    result = runner.invoke(
        app, ["--ingest-addr", ingest, "--query-addr", query, "health", "--json", "--no-database", *extra]
    )
    return result.exit_code, json.loads(result.stdout)


def test_health_exit_code_follows_the_state(serve: Callable[..., str]) -> None:
    serving, not_serving = serve(_sources), serve(_sources, ready=False)
    assert wait_for_serving(serving, timeout=30)  # a server is NOT_SERVING until readiness first passes
    code, report = _health(serving, serving)
    assert code == 0 and report["state"] == "healthy"
    assert [c["state"] for c in report["components"]] == ["SERVING", "SERVING"]  # type: ignore[index]
    code, report = _health(serving, not_serving)
    assert code == 1 and report["state"] == "degraded"
    code, report = _health(f"127.0.0.1:{_closed_port()}", serving)
    assert code == 3 and report["state"] == "down"
    assert report["components"][0]["state"] == "UNREACHABLE"  # type: ignore[index]


def test_health_reports_an_unreachable_database(
    serve: Callable[..., str], monkeypatch: pytest.MonkeyPatch
) -> None:
    serving = serve(_sources)
    assert wait_for_serving(serving, timeout=30)
    monkeypatch.setenv("CB_DATABASE_URL", f"postgresql://nobody:secret@127.0.0.1:{_closed_port()}/x")
    result = runner.invoke(app, ["--ingest-addr", serving, "--query-addr", serving, "health", "--json"])
    report = json.loads(result.stdout)
    assert result.exit_code == 1, result.output
    database = report["components"][2]
    assert database["component"] == "database" and database["state"] == "unreachable"
    assert "secret" not in result.stdout and "password=***" in database["address"]


def test_observe_json_prints_the_summary_object(serve: Callable[..., str], tmp_path: Path) -> None:
    fake = FakeObservations()
    address = observation_server(serve, fake)
    file = tmp_path / "obs.jsonl"
    file.write_text(
        "\n".join([observation_line(), observation_line(kind="dup"), observation_line(kind="bad"), "{broken"])
        + "\n"
    )
    result = runner.invoke(app, ["--ingest-addr", address, "observe", "-f", str(file), "--json"])
    assert result.exit_code == 1
    assert json.loads(result.stdout) == {
        "created": 1,
        "duplicate": 1,
        "failed": 1,
        "unparsable_lines": 1,
        "lines_not_sent": 0,
    }
    assert "line 3: obs-" in result.stderr  # per-item errors still on stderr


def test_retain_json_prints_the_summary_object(serve: Callable[..., str], tmp_path: Path) -> None:
    fake = FakeDocuments()
    address = document_server(serve, fake)
    vault = tmp_path / "vault"
    vault.mkdir()
    (vault / "a.md").write_bytes(b"---\nlinks: [doc:nowhere]\n---\n# A\n")
    result = runner.invoke(
        app, ["--ingest-addr", address, "retain", str(vault), "-n", "docs", "--concurrency", "1", "--json"]
    )
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout) == {
        "created": 1,
        "updated": 0,
        "unchanged": 0,
        "failed": 0,
        "chunks": 2,
        "missing_links": [{"from": "doc:a", "to": "doc:nowhere"}],
    }


def test_token_list_json_lists_principals_without_hashes(tmp_path: Path) -> None:
    tokens_file = tmp_path / "tokens.yaml"
    token, _ = add_token(tokens_file, principal="loader", namespaces={"debian": [Right.WRITE]}, note="ci")
    result = runner.invoke(app, ["token", "list", "--tokens-file", str(tokens_file), "--json"])
    assert result.exit_code == 0, result.output
    listed = json.loads(result.stdout)
    assert listed["tokens_file"] == str(tokens_file)
    (entry,) = listed["tokens"]
    assert entry["principal"] == "loader" and entry["namespaces"] == {"debian": ["write"]}
    assert entry["note"] == "ci" and entry["pii_clearance"] is False
    assert token not in result.stdout and "sha256" not in result.stdout
    assert entry["memory_scope"] is None


def test_token_list_shows_the_memory_scope_of_each_token(tmp_path: Path) -> None:
    """The trial's finding: two desk tokens of users 8821 and 9999 looked identical in `cb token list`."""
    tokens_file = tmp_path / "tokens.yaml"
    for user in ("8821", "9999"):
        add_token(tokens_file, principal="desk", namespaces={}, memory_scope=("acme", "production", user))
    result = runner.invoke(app, ["token", "list", "--tokens-file", str(tokens_file), "--json"])
    assert result.exit_code == 0, result.output
    scopes = [entry["memory_scope"] for entry in json.loads(result.stdout)["tokens"]]
    assert scopes == [
        {"organization": "acme", "environment": "production", "user": user} for user in ("8821", "9999")
    ]
    table = runner.invoke(app, ["token", "list", "--tokens-file", str(tokens_file)])
    assert "acme/production/8821" in table.stdout and "acme/production/9999" in table.stdout


def test_every_option_has_one_long_spelling_and_each_spelling_one_meaning() -> None:
    """One spelling for each flag across commands (``--concurrency``, not also ``--workers``),
    and a flag spelled alike means the same option everywhere (``--json``, ``--namespace``, ...)."""
    import typer

    root = typer.main.get_command(app)
    several: list[str] = []
    meanings: dict[str, set[str]] = {}

    def walk(command: object, path: str) -> None:
        for name, sub in getattr(command, "commands", {}).items():
            walk(sub, f"{path} {name}")
        for param in getattr(command, "params", []):
            if getattr(param, "param_type_name", "") != "option":
                continue
            spellings = [flag for flag in param.opts if flag.startswith("--")]
            if len(spellings) != 1:
                several.append(f"{path}: {spellings}")
            for flag in spellings:
                meanings.setdefault(flag, set()).add(param.name.rstrip("s_"))

    walk(root, "cb")
    assert several == []
    assert {flag: names for flag, names in meanings.items() if len(names) > 1} == {}


def every_help() -> dict[str, tuple[str, list[Any]]]:
    """``{"cb memory list": (its --help text, its options)}`` for ``cb`` and every command and group."""
    import typer

    found: dict[str, tuple[str, list[Any]]] = {}

    def walk(command: Any, path: list[str]) -> None:
        result = runner.invoke(app, [*path, "--help"], terminal_width=200)
        assert result.exit_code == 0 and "Usage:" in result.output, (path, result.output)
        options = [
            p for p in command.params if getattr(p, "param_type_name", "") == "option" and not p.hidden
        ]
        found[" ".join(["cb", *path])] = (result.output, options)
        for name, sub in getattr(command, "commands", {}).items():
            walk(sub, [*path, name])

    walk(typer.main.get_command(app), [])
    return found


def test_help_shows_no_value_type_after_a_flag() -> None:
    # new-user trial: "--json <bool>" read as if --json took a value
    helps = every_help()
    typed = 0
    for path, (text, options) in helps.items():
        for option in [*options, None]:
            flags = ["--help"] if option is None else [f for f in option.opts if f.startswith("--")]
            for flag in flags:
                # The option's own row: "│ [*] --flag [-f] [<type>]  help" (not a mention in a help text).
                row = re.search(
                    r"^│\s+(?:\*\s+)?" + re.escape(flag) + r"(?![\w-])(?:\s+-\w)?\s+(<[^>]+>)?",
                    text,
                    re.MULTILINE,
                )
                assert row is not None, (path, flag)
                if option is None or option.is_flag:
                    assert row.group(1) is None, (path, flag, row.group(0))
                else:
                    typed += row.group(1) is not None
    # Options that take a value still name its type (so the check above reads the right column).
    assert typed > 50, typed
    assert re.search(r"--namespace\s+-n\s+<str>", helps["cb search"][0])


@pytest.mark.parametrize(
    ("metadata", "message"),
    [("[1]", "a JSON object is required, got a JSON list"), ("{bad", "not JSON")],
)
def test_memory_add_names_what_is_wrong_with_metadata(metadata: str, message: str) -> None:
    # new-user trial: '[1]' answered "not a JSON object: 'list' object has no attribute 'items'"
    result = runner.invoke(app, ["memory", "add", "some text", "--metadata", metadata])
    assert result.exit_code == 2
    assert message in " ".join(result.output.split()) and "attribute" not in result.output

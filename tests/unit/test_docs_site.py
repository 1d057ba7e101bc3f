"""The documentation site (mkdocs.yml, docs/) builds with ``mkdocs build --strict``, and what it generates
and lists matches the code.

A broken link, a page missing from the navigation or a generator that fails stops the build, so this
test fails on them; the generated pages are checked against their sources (every RPC, command, setting
and benchmark is on its page), and the hand-written table of error reasons against the reasons the code
raises.
"""

from __future__ import annotations

import ast
import importlib
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import typer.main
from google.protobuf import descriptor_pool

from common.kernel.config import Settings

ROOT = Path(__file__).resolve().parents[2]
SOURCE_PACKAGES = ("common", "ingest_service", "query_service")
UPPER_SNAKE = re.compile(r"^[A-Z][A-Z0-9_]+$")
QUIET = {"DISABLE_MKDOCS_2_WARNING": "true", "NO_MKDOCS_2_WARNING": "1"}


def build(config: Path, site: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "mkdocs",
            "build",
            "--strict",
            "--config-file",
            str(config),
            "--site-dir",
            str(site),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, **QUIET},
    )


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("site")
    result = build(ROOT / "mkdocs.yml", out)
    assert result.returncode == 0, result.stdout + result.stderr
    return out


def page(site: Path, name: str) -> str:
    return (site / name / "index.html").read_text(encoding="utf-8")


def test_the_strict_build_fails_on_a_page_that_does_not_exist(tmp_path: Path) -> None:
    # The project's configuration (strict mode and validation included) without the generators, and with
    # one navigation entry more.
    config = tmp_path / "mkdocs.yml"
    config.write_text(
        f"INHERIT: {ROOT / 'mkdocs.yml'}\ndocs_dir: {ROOT / 'docs'}\nplugins:\n  - search\n"
        "nav:\n  - Home: index.md\n  - Missing: no-such-page.md\n"
    )
    result = build(config, tmp_path / "site")
    assert result.returncode != 0
    assert "no-such-page.md" in result.stdout + result.stderr


def test_every_rpc_and_message_of_the_protos_is_on_its_reference_page(site: Path) -> None:
    pool = descriptor_pool.Default()
    checked = 0
    rpcs_in_source = 0
    for proto in sorted((ROOT / "protos" / "memory" / "v1").glob("*.proto")):
        importlib.import_module(
            f"memory_service_grpc_client.memory.v1.{proto.stem}_pb2"
        )  # registers the file in the default pool
        rpcs_in_source += len(re.findall(r"^\s*rpc\s", proto.read_text(encoding="utf-8"), flags=re.MULTILINE))
        file = pool.FindFileByName(f"memory/v1/{proto.name}")
        html = page(site, f"reference/grpc/{proto.stem}")
        for service in file.services_by_name.values():
            for method in service.methods:
                assert f'id="memory-v1-{service.name.lower()}-{method.name.lower()}"' in html, (
                    method.full_name
                )
                checked += 1
        for message in file.message_types_by_name.values():
            assert f'id="memory-v1-{message.name.lower()}"' in html, message.full_name
    assert checked == rpcs_in_source > 0


def cli_module() -> str:
    """The module of the typer app, as the CLI page's generator names it (one place to change)."""
    tree = ast.parse((ROOT / "docs" / "gen_cli_reference.py").read_text(encoding="utf-8"))
    return next(
        node.value.value
        for node in tree.body
        if isinstance(node, ast.Assign)
        and any(isinstance(t, ast.Name) and t.id == "CLI_MODULE" for t in node.targets)
        and isinstance(node.value, ast.Constant)
    )


def test_every_cli_command_is_on_the_cli_page(site: Path) -> None:
    app = importlib.import_module(cli_module()).app
    html = page(site, "reference/cli")
    root = typer.main.get_command(app)
    ctx = root.context_class(root, info_name="cb")
    names = []
    for name in root.list_commands(ctx):
        command = root.get_command(ctx, name)
        if hasattr(command, "list_commands"):
            sub_ctx = command.context_class(command, info_name=name, parent=ctx)
            names += [f"cb {name} {sub}" for sub in command.list_commands(sub_ctx)]
        names.append(f"cb {name}")
    assert len(names) > 20
    missing = [name for name in names if f"<code>{name}</code>" not in html]
    assert not missing


def test_every_setting_is_in_the_configuration_table(site: Path) -> None:
    html = page(site, "reference/configuration")
    missing = [
        f"CB_{name.upper()}"
        for name in Settings.model_fields
        if f"<code>CB_{name.upper()}</code>" not in html
    ]
    assert not missing


def test_the_benchmarks_page_shows_every_benchmark_of_bench_results(site: Path) -> None:
    html = page(site, "benchmarks")
    names = set()
    for path in (ROOT / "bench" / "results").glob("*.json"):
        json.loads(path.read_text(encoding="utf-8"))  # every result file is valid JSON
        names.add(re.sub(r"-\d{8}T\d{6}Z$", "", path.stem))
    assert names
    missing = [name for name in sorted(names) if f'id="{name}"' not in html]
    assert not missing


def reasons_raised_in_code() -> dict[str, set[str]]:
    """Every UPPER_SNAKE ErrorInfo reason the code sets: ``reason=`` arguments (literals or module-level
    string constants) and ``reason = "..."`` class attributes of the error classes."""
    found: dict[str, set[str]] = {}
    for package in SOURCE_PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            tree = ast.parse(path.read_text(encoding="utf-8"))
            constants = {
                target.id: node.value.value
                for node in tree.body
                if isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant)
                for target in node.targets
                if isinstance(target, ast.Name) and isinstance(node.value.value, str)
            }
            for node in ast.walk(tree):
                values: list[object] = []
                if isinstance(node, ast.keyword) and node.arg == "reason":
                    if isinstance(node.value, ast.Constant):
                        values.append(node.value.value)
                    elif isinstance(node.value, ast.Name):
                        values.append(constants.get(node.value.id))
                elif isinstance(node, ast.ClassDef):
                    values += [
                        stmt.value.value
                        for stmt in node.body
                        if isinstance(stmt, ast.Assign)
                        and isinstance(stmt.value, ast.Constant)
                        and any(isinstance(t, ast.Name) and t.id == "reason" for t in stmt.targets)
                    ]
                for value in values:
                    if isinstance(value, str) and UPPER_SNAKE.match(value):
                        found.setdefault(value, set()).add(str(path.relative_to(ROOT)))
    return found


def reasons_documented() -> set[str]:
    text = (ROOT / "docs" / "reference" / "errors.md").read_text(encoding="utf-8")
    return set(re.findall(r"^\| `([A-Z][A-Z0-9_]+)` \|", text, flags=re.MULTILINE))


def test_every_error_reason_raised_in_code_is_documented() -> None:
    raised = reasons_raised_in_code()
    assert {"INVALID_ARGUMENT", "SCOPE_NOT_ALLOWED", "DATABASE_TIMEOUT"} <= set(raised)  # the scan finds them
    undocumented = {
        reason: sorted(paths) for reason, paths in raised.items() if reason not in reasons_documented()
    }
    assert not undocumented, f"add these to docs/reference/errors.md: {undocumented}"


def test_every_documented_error_reason_is_raised_somewhere() -> None:
    stale = reasons_documented() - set(reasons_raised_in_code())
    assert not stale, f"docs/reference/errors.md lists reasons no code raises: {sorted(stale)}"


def test_the_readme_stays_short_and_points_at_the_docs() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert len(readme.splitlines()) <= 200
    for needle in ("make run", "make test", "make docs-serve", "docs/tutorials/first-memory.md"):
        assert needle in readme


# A page the code points at: ``docs/how-to/memory-records.md`` in a docstring, comment or proto comment.
DOCS_PAGE = re.compile(r"\bdocs/(?:[a-z0-9-]+/)*[a-z0-9-]+\.md\b")
# Shipped migrations are never edited (their text is part of the schema's history).
FROZEN = re.compile(r"^common/storage/sql/\d{4}_.*\.sql$")


def test_every_docs_page_the_code_names_exists() -> None:
    names = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    # pages the docs/gen_*.py scripts write at build time (mkdocs-gen-files) exist only in the site
    generated = {
        page for script in (ROOT / "docs").glob("gen_*.py") for page in DOCS_PAGE.findall(script.read_text())
    }
    missing = []
    for name in names.splitlines():
        if not name.endswith((".py", ".proto", ".sql", ".yaml", ".toml")) or FROZEN.match(name):
            continue
        if name.startswith(("tests/", "clients/go/", "clients/typescript/")):
            continue  # tests name made-up vault paths; the other clients are generated from the protos
        text = (ROOT / name).read_text(encoding="utf-8", errors="replace")
        pages = set(DOCS_PAGE.findall(text)) - generated
        missing += [f"{name}: {page}" for page in sorted(pages) if not (ROOT / page).is_file()]
    assert not missing, missing

"""Each checkout's development database (`memory_service_tools.cli.checkout_database`) and `make run`, which
lets `cb up` start the database so that Ctrl-C stops it again."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

from memory_service_tools.cli.checkout_database import checkout_database_name
from memory_service_tools.cli.checkout_database import checkout_root

ROOT = Path(__file__).resolve().parents[2]


def test_the_checkout_is_found_from_the_code() -> None:
    assert checkout_root() == ROOT


def test_two_checkouts_get_two_valid_database_names(tmp_path: Path) -> None:
    first, second = tmp_path / "a" / "memory-service", tmp_path / "b" / "memory-service"
    names = {checkout_database_name(first), checkout_database_name(second)}
    assert len(names) == 2
    for name in names:
        assert re.fullmatch(r"cb_memory_service_[0-9a-f]{8}", name) and len(name) <= 63
    assert checkout_database_name(first) == checkout_database_name(first)  # stable across runs
    long = tmp_path / ("Ä-" * 80)
    assert re.fullmatch(r"cb_[a-z0-9_]{1,40}_[0-9a-f]{8}", checkout_database_name(long))


def test_make_run_leaves_starting_the_database_to_cb_up() -> None:
    plan = subprocess.run(
        ["make", "-n", "run", "VENV=.venv"], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout
    assert "cb up" in plan
    assert "embedded_db up" not in plan  # started by `make db` before, so `cb up` never stopped it


def test_the_database_is_created_once_on_the_server(settings) -> None:  # type: ignore[no-untyped-def]
    import uuid

    import psycopg
    from psycopg import sql

    from memory_service_tools.cli.checkout_database import ensure_checkout_database

    server = settings.database_url.rsplit("/", 1)[0] + "/postgres"
    name = "cb_test_" + uuid.uuid4().hex[:8]
    try:
        url, created = ensure_checkout_database(server, name)
        again, created_again = ensure_checkout_database(server, name)
        assert (created, created_again) == (True, False) and url == again and url.endswith(f"/{name}")
        with psycopg.connect(url) as conn:
            assert conn.execute("SELECT current_database()").fetchone() == (name,)
    finally:
        with psycopg.connect(server, autocommit=True) as admin:
            admin.execute(sql.SQL("DROP DATABASE IF EXISTS {}").format(sql.Identifier(name)))


def test_cb_health_checks_the_database_cb_up_gives_this_checkout(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """A second shell without CB_DATABASE_URL: the health check looks at this checkout's development
    database on the embedded server, not at the server's default database."""
    import json

    from typer.testing import CliRunner

    from memory_service_tools.cli.app import app

    monkeypatch.delenv("CB_DATABASE_URL", raising=False)
    monkeypatch.delenv("CB_READ_DATABASE_URL", raising=False)
    result = CliRunner().invoke(
        app,
        ["--ingest-addr", "127.0.0.1:1", "--query-addr", "127.0.0.1:1", "health", "--json", "--timeout", "1"],
    )
    rows = {row["component"]: row for row in json.loads(result.stdout)["components"]}
    assert f"dbname={checkout_database_name(checkout_root())}" in rows["database"]["address"], rows

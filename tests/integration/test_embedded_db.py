"""Integration tests of the embedded database (root only; builds the rootfs on first use).

They bring the database up (idempotently) and leave it running: other tests share it, so nothing here
ever stops it.
"""

from __future__ import annotations

import os
import socket

import psycopg
import pytest

from memory_service_tools import embedded_db
from memory_service_tools.embedded_db import DSN
from memory_service_tools.embedded_db import database_status
from memory_service_tools.embedded_db import database_up

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(os.geteuid() != 0, reason="the embedded database runs in a chroot: root only"),
]


def _accepts_connections() -> bool:
    try:
        with socket.create_connection((embedded_db.HOST, embedded_db.PORT), timeout=2):
            return True
    except OSError:
        return False


def test_up_is_idempotent_and_returns_the_dsn() -> None:
    assert database_up() == DSN
    first = database_status()
    assert first.running
    assert first.rootfs_ready
    assert first.pid is not None
    assert first.dsn == DSN
    assert (first.data_dir / "PG_VERSION").read_text(encoding="ascii").strip() == "17"

    assert database_up() == DSN
    second = database_status()
    assert second.running
    assert second.pid == first.pid, "a second `up` must not restart the server"
    assert _accepts_connections()


def test_server_is_configured_as_designed() -> None:
    dsn = database_up()
    with psycopg.connect(dsn, connect_timeout=10, autocommit=True) as conn:
        settings = {
            name: conn.execute(f"SHOW {name}").fetchone()
            for name in ("shared_preload_libraries", "listen_addresses", "port", "max_connections", "shared_buffers")
        }
        available = {
            row[0]
            for row in conn.execute(
                "SELECT name FROM pg_available_extensions WHERE name IN ('age', 'vector', 'pg_trgm')"
            )
        }
        version = conn.execute("SHOW server_version_num").fetchone()
    assert settings["shared_preload_libraries"] == ("age",)
    assert settings["listen_addresses"] == ("127.0.0.1",)
    assert settings["port"] == (str(embedded_db.PORT),)
    assert settings["max_connections"] == ("200",)
    assert settings["shared_buffers"] == (embedded_db.SHARED_BUFFERS,)
    assert available == {"age", "vector", "pg_trgm"}
    assert version is not None and int(version[0]) // 10000 == 17
    assert database_status().running

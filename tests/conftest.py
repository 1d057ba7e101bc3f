"""Shared fixtures: settings, the real database (CB_DATABASE_URL or the embedded one), unique namespaces."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import psycopg
import pytest
from psycopg import sql

from common.kernel.config import Settings
from common.storage.database import Database
from common.storage.schema import migrations
from common.text_models.embeddings.factory import build_embedding_provider
from common.text_models.embeddings.provider import EmbeddingProvider

CORPORA = Path(__file__).resolve().parents[1].parent / "shared" / "corpora"


@pytest.fixture(scope="session")
def settings() -> Settings:
    return Settings()


@pytest.fixture(scope="session")
def database(settings: Settings) -> Iterator[Database]:
    db = Database(settings, prepare=migrations.apply)
    migrations.apply(db)
    yield db
    db.close()


@pytest.fixture(scope="session")
def provider(settings: Settings) -> EmbeddingProvider:
    """The configured embedding provider (the real model), loaded once for the whole run."""
    return build_embedding_provider(settings)


@pytest.fixture
def namespace() -> str:
    """A namespace of its own for each test, so tests never see each other's data."""
    return "test-" + uuid.uuid4().hex[:12]


@contextmanager
def fresh_database(settings: Settings) -> Iterator[Settings]:
    """Settings of a new, empty database on the server of ``settings`` (``CREATE DATABASE``, like
    bench/run_bench.py), dropped at the end: for tests that need a whole database of their own
    (migrations from an old state, labels on a fresh graph) and must leave the shared one untouched."""
    name = "test_" + uuid.uuid4().hex[:12]
    with psycopg.connect(settings.database_url, autocommit=True) as admin:
        admin.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    try:
        url = psycopg.conninfo.make_conninfo(settings.database_url, dbname=name)
        yield settings.model_copy(update={"database_url": url})
    finally:
        with psycopg.connect(settings.database_url, autocommit=True) as admin:
            admin.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))


@pytest.fixture
def fresh_settings(settings: Settings) -> Iterator[Settings]:
    """`fresh_database` for one test."""
    with fresh_database(settings) as fresh:
        yield fresh

"""Shared fixtures: settings, the real database (CB_DATABASE_URL or the embedded one), unique namespaces."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from common.kernel.config import Settings
from common.storage.database import Database
from common.text_models.embeddings.factory import build_embedding_provider
from common.text_models.embeddings.provider import EmbeddingProvider

CORPORA = Path(__file__).resolve().parents[1].parent / "shared" / "corpora"


@pytest.fixture(scope="session")
def settings() -> Settings:
    return Settings()


@pytest.fixture(scope="session")
def database(settings: Settings) -> Iterator[Database]:
    db = Database(settings)
    db.migrate()
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

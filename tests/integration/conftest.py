"""The domain-pack-aware writers the integration tests share: each module gets its own kind validator,
pack registry, observation recorder and document writer over the session's database and embedder (a
module that needs other ones defines its own fixture of the same name)."""

from __future__ import annotations

import pytest

from common.kernel.config import Settings
from common.packs.domain_packs import PackRegistry
from common.packs.kind_validation import KindValidator
from common.storage.database import Database
from common.text_models.embeddings.provider import EmbeddingProvider
from ingest_service.documents.writer import DocumentWriter
from ingest_service.observations.recorder import ObservationRecorder


@pytest.fixture(scope="module")
def kinds(database: Database) -> KindValidator:
    return KindValidator(database)


@pytest.fixture(scope="module")
def registry(database: Database) -> PackRegistry:
    return PackRegistry(database)


@pytest.fixture(scope="module")
def recorder(database: Database, provider: EmbeddingProvider, kinds: KindValidator) -> ObservationRecorder:
    return ObservationRecorder(database, encoder=provider, kinds=kinds)


@pytest.fixture(scope="module")
def writer(
    database: Database, provider: EmbeddingProvider, settings: Settings, kinds: KindValidator
) -> DocumentWriter:
    return DocumentWriter(database, provider, settings, kinds=kinds)

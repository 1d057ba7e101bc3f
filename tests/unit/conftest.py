"""Fixtures of the unit tests."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.unit.servicer_host import Serve
from tests.unit.servicer_host import served_hosts
from tests.unit.tokens_file_samples import write_sample_tokens_file


@pytest.fixture
def tokens_file(tmp_path: Path) -> Path:
    """A tokens file with alice and bob (see `write_sample_tokens_file`)."""
    return write_sample_tokens_file(tmp_path / "tokens.yaml")


@pytest.fixture
def serve() -> Iterator[Serve]:
    """Starts small servicers behind the real server host on port 0 (`tests.unit.servicer_host`)."""
    with served_hosts() as start:
        yield start

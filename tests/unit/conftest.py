"""Fixtures of the unit tests."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.unit.tokens_file_samples import write_sample_tokens_file


@pytest.fixture
def tokens_file(tmp_path: Path) -> Path:
    """A tokens file with alice and bob (see `write_sample_tokens_file`)."""
    return write_sample_tokens_file(tmp_path / "tokens.yaml")

"""bench/bench_vault.py's ingest step runs against a real `cb serve ingest` of a given tree and database:
three files of the docs vault sent twice (a missing argument here once broke the benchmark unnoticed)."""

from __future__ import annotations

import psycopg

from bench.bench_vault import ROOT
from bench.bench_vault import VAULT
from bench.bench_vault import ingest_twice
from common.kernel.config import Settings
from memory_service_tools.vault_source import VaultSource
from memory_service_tools.vault_source import directory_documents


def test_ingest_twice_writes_the_vault_into_the_given_database_then_finds_it_unchanged(
    fresh_settings: Settings,
) -> None:
    everything = directory_documents(VAULT)
    source = VaultSource(everything.documents[:3], source=everything.source)
    runs = ingest_twice(source, ROOT, fresh_settings.database_url)
    full, unchanged = runs["full"], runs["unchanged"]
    assert full["documents_new"] == 3 and full["chunks_embedded"] > 0
    assert full["chunks_written"] == full["chunks_embedded"]
    assert unchanged["documents_unchanged"] == 3 and unchanged["chunks_embedded"] == 0
    assert runs["commit"]
    with psycopg.connect(fresh_settings.database_url) as conn:
        row = conn.execute("SELECT count(*) FROM chunks").fetchone()
    assert row is not None and row[0] == full["chunks_written"]  # written where it was told, nowhere else

"""A file the client cannot read is left out of a vault run, and the run then sweeps nothing: a file left
out is not a deleted file (docs/how-to/vault-ingest.md). A Markdown file in cp1251 is read, as the
server reads text (docs/how-to/documents.md)."""

from __future__ import annotations

from pathlib import Path

import grpc
import pytest

from memory_service_tools.vault_source import directory_documents
from tests.e2e.vault_helpers import ingest
from tests.e2e.vault_helpers import source_or_none
from tests.e2e.vault_helpers import statuses
from tests.e2e.vault_helpers import write

pytestmark = pytest.mark.e2e


def test_an_unreadable_markdown_file_is_left_out_and_nothing_is_swept(
    tmp_path: Path, ingest_channel: grpc.Channel, query_channel: grpc.Channel, namespace: str
) -> None:
    write(tmp_path, "a.md", "# A\n\nThe first note.\n")
    write(tmp_path, "b.md", "# B\n\nThe second note.\n")
    write(tmp_path, "c.md", "# C\n\nThe third note.\n")
    assert statuses(ingest(ingest_channel, tmp_path, namespace)) == {
        "a.md": "new",
        "b.md": "new",
        "c.md": "new",
    }

    (tmp_path / "b.md").write_bytes(b"# B\x00\x01 saved by a tool that wrote binary\n")
    (tmp_path / "c.md").unlink()  # a real deletion, which this run must not act on either
    source = directory_documents(tmp_path)
    assert [path for path, _ in source.skipped] == ["b.md"]
    response = ingest(ingest_channel, source, namespace)
    assert statuses(response) == {"a.md": "unchanged"}
    assert not response.swept and list(response.swept_keys) == []
    kept = [source_or_none(query_channel, namespace, key) for key in ("doc:b", "doc:c")]
    assert [source.content.splitlines()[-1] if source else None for source in kept] == [
        "The second note.",
        "The third note.",
    ]

    (tmp_path / "b.md").write_bytes("# Б\n\nВторая заметка.\n".encode("cp1251"))
    response = ingest(ingest_channel, tmp_path, namespace)
    assert statuses(response) == {"a.md": "unchanged", "b.md": "changed"}
    assert response.swept and list(response.swept_keys) == ["doc:c"]
    again = source_or_none(query_channel, namespace, "doc:b")
    assert again is not None and again.content.splitlines()[-1] == "Вторая заметка."

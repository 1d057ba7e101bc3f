"""Helpers of the vault ingest e2e tests: run `cb ingest`'s stream against the real ingest service, a small
vault of linked notes, and a source as the query service reads it."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
from google.protobuf.message import Message

from memory_service_grpc_client.memory.v1 import source_service_pb2
from memory_service_grpc_client.memory.v1 import source_service_pb2_grpc
from memory_service_grpc_client.memory.v1 import vault_service_pb2
from memory_service_grpc_client.memory.v1 import vault_service_pb2_grpc
from memory_service_tools.cli.vault_commands import vault_messages
from memory_service_tools.vault_source import VaultSource
from memory_service_tools.vault_source import directory_documents

STATUS = {
    vault_service_pb2.VAULT_DOCUMENT_STATUS_NEW: "new",
    vault_service_pb2.VAULT_DOCUMENT_STATUS_CHANGED: "changed",
    vault_service_pb2.VAULT_DOCUMENT_STATUS_UNCHANGED: "unchanged",
    vault_service_pb2.VAULT_DOCUMENT_STATUS_CONFLICT: "conflict",
    vault_service_pb2.VAULT_DOCUMENT_STATUS_REJECTED: "rejected",
}


def ingest(
    channel: grpc.Channel,
    source: VaultSource | Path,
    namespace: str,
    *,
    dry_run: bool = False,
    allow_mass_sweep: bool = False,
    metadata: Any = None,
) -> vault_service_pb2.IngestVaultResponse:
    """One IngestVault run of ``source`` (a folder or a read source), as `cb ingest` sends it."""
    if isinstance(source, Path):
        source = directory_documents(source)
    stub = vault_service_pb2_grpc.VaultServiceStub(channel)
    response: vault_service_pb2.IngestVaultResponse = stub.IngestVault(
        vault_messages(source, namespace, dry_run=dry_run, allow_mass_sweep=allow_mass_sweep),
        timeout=3600,
        metadata=metadata,
    )
    return response


def statuses(response: vault_service_pb2.IngestVaultResponse) -> dict[str, str]:
    """path -> status name of every document of a run."""
    return {d.path: STATUS[d.status] for d in response.documents}


def cut_short(messages: Iterator[Message], after: int) -> Iterator[Message]:
    """The first ``after`` messages of a stream, then a client-side failure (the stream is cancelled)."""
    for index, message in enumerate(messages):
        if index == after:
            raise RuntimeError("the client dies mid-run")
        yield message


def write(root: Path, relative: str, text: str) -> Path:
    """Writes a vault file (folders created)."""
    path = root / relative
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


GUIDE = """---
title: Setup Guide
aliases: [setup]
superseded_by: guide-v2.md
---
# Setup

Install the widget with `make install`. See [the reference](ref/api.md#calls) and [[Glossary]].
External [site](https://example.org) and a broken [[Nowhere Page]].

```
[[not a link inside code]]
```
"""


GUIDE_V2 = "---\ntitle: Setup Guide v2\n---\n# Setup v2\n\nThe new guide links back to [[setup]].\n"


API = "# API\n\nCalls of the widget: `widget.start()` and [up](../guide.md).\n"


GLOSSARY = "---\nnatural_key: doc:glossary\n---\n# Glossary\n\nWidget: a thing.\n"


def small_vault(root: Path) -> Path:
    write(root, "guide.md", GUIDE)
    write(root, "guide-v2.md", GUIDE_V2)
    write(root, "ref/api.md", API)
    write(root, "notes/Glossary.md", GLOSSARY)
    write(root, "todo.md", "# Todo\n\nBack to the [guide](guide.md).\n")
    write(root, "old/obsolete.md", "# Obsolete\n\nNothing here.\n")
    return root


def source_or_none(query: grpc.Channel, namespace: str, key: str) -> source_service_pb2.Source | None:
    stub = source_service_pb2_grpc.SourceServiceStub(query)
    try:
        return stub.GetSource(
            source_service_pb2.GetSourceRequest(namespace=namespace, natural_key=key), timeout=60
        ).source
    except grpc.RpcError as error:
        if error.code() == grpc.StatusCode.NOT_FOUND:
            return None
        raise

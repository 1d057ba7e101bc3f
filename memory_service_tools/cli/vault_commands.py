"""``cb ingest``: a vault run through VaultService.IngestVault, a gRPC client like any other."""

from __future__ import annotations

import logging
from collections.abc import Callable
from collections.abc import Iterator
from pathlib import Path
from typing import Annotated

import typer
from google.protobuf.message import Message
from rich.markup import escape

from memory_service_grpc_client import ServiceError
from memory_service_tools.cli.option_types import JsonOption
from memory_service_tools.cli.option_types import WriteNamespaceOption
from memory_service_tools.cli.option_types import mass_sweep_option
from memory_service_tools.cli.rpc_output import memory_client
from memory_service_tools.cli.rpc_output import print_json
from memory_service_tools.cli.terminal import err
from memory_service_tools.cli.terminal import error_lines
from memory_service_tools.cli.terminal import fail
from memory_service_tools.cli.terminal import out
from memory_service_tools.cli.terminal import progress_bar
from memory_service_tools.vault_source import SourceDocument
from memory_service_tools.vault_source import SourceError
from memory_service_tools.vault_source import VaultSource

DOCUMENTS_PER_MESSAGE = 16
MESSAGE_BYTES = (
    2 * 1024 * 1024
)  # a message is closed once it holds this much text (one big file may exceed it)
UNRESOLVED_SHOWN = 20
MASS_SWEEP_REFUSED = "MASS_SWEEP_REFUSED"  # the ErrorInfo reason of the server's mass-deletion guard
SENT = "documents sent to the server"
WAITING = "all documents sent; waiting for the server's report"


def vault_messages(
    source: VaultSource,
    namespace: str,
    *,
    dry_run: bool = False,
    allow_mass_sweep: bool = False,
    on_document: Callable[[int], None] | None = None,
) -> Iterator[Message]:
    """The IngestVault stream of ``source``: the header, the documents in messages of at most
    `DOCUMENTS_PER_MESSAGE` documents (or about `MESSAGE_BYTES` of text), then the end message.
    ``on_document(n)`` is called after the n-th document was handed to the stream."""
    from common.grpc.proto_mapping import dict_to_struct
    from memory_service_grpc_client.memory.v1 import vault_service_pb2

    yield vault_service_pb2.IngestVaultRequest(
        header=vault_service_pb2.IngestVaultHeader(
            namespace=namespace,
            dry_run=dry_run,
            allow_mass_sweep=allow_mass_sweep,
            source=source.source,
            source_incomplete=bool(source.skipped),
            branch=source.branch,
            commit_sha=source.commit_sha,
        )
    )
    batch: list[SourceDocument] = []
    size = sent = 0

    def message(documents: list[SourceDocument]) -> Message:
        return vault_service_pb2.IngestVaultRequest(
            documents=vault_service_pb2.IngestVaultDocuments(
                documents=[
                    vault_service_pb2.VaultDocument(
                        path=d.path,
                        content=d.content,
                        original=d.original,
                        media_type=d.media_type,
                        provenance=dict_to_struct(d.provenance) if d.provenance else None,
                    )
                    for d in documents
                ]
            )
        )

    for document in source.documents:
        weight = len(document.content) + len(document.original)
        if batch and (len(batch) >= DOCUMENTS_PER_MESSAGE or size + weight > MESSAGE_BYTES):
            yield message(batch)
            sent += len(batch)
            if on_document:
                on_document(sent)
            batch, size = [], 0
        batch.append(document)
        size += weight
    if batch:
        yield message(batch)
        sent += len(batch)
        if on_document:
            on_document(sent)
    yield vault_service_pb2.IngestVaultRequest(end=vault_service_pb2.IngestVaultEnd(document_count=sent))


def ingest(
    ctx: typer.Context,
    location: Annotated[
        str,
        typer.Argument(
            help="folder of Markdown files (and PDF, DOCX, HTML, ...), or with --git a repository path or URL"
        ),
    ],
    namespace: WriteNamespaceOption,
    git: Annotated[
        bool, typer.Option("--git", help="read the documents of a Git repository's branch")
    ] = False,
    branch: Annotated[str, typer.Option(help="with --git: the branch (default: the checked-out one)")] = "",
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="report what a run would do, write nothing")
    ] = False,
    timeout: Annotated[float, typer.Option(min=1.0, help="seconds for the whole run")] = 3600.0,
    allow_mass_sweep: Annotated[
        bool,
        mass_sweep_option(
            "let the sweep remove every document of NAMESPACE, or more than the server's share"
        ),
    ] = False,
    as_json: JsonOption = False,
) -> None:
    """Project a Markdown vault (or a Git repository's documents) into NAMESPACE: mark-and-sweep.

    Every ``*.md`` file, and every file of a format the server converts (PDF, DOCX, PPTX, XLSX, HTML,
    EPUB, EML, MBOX, TXT; docs/how-to/documents.md), hidden folders skipped and ``.gitignore`` honoured,
    becomes a document of origin
    ``vault`` with its chunks, LINKS_TO edges for links that resolve and facts for frontmatter relations;
    unchanged files are only marked seen; documents of an earlier run that are gone are swept (each
    deletion audited). A sweep that would remove every document of NAMESPACE, or more than the server's
    share (CB_MASS_SWEEP_SHARE, default 50%), is refused and removes nothing unless --allow-mass-sweep is
    given; --dry-run shows the count and whether it would be refused. A run cut short sweeps nothing: run it again. The progress bar counts documents
    sent; the server's own counts are the final report. Exits 1 when documents were rejected (then
    nothing was swept) or the run failed, 130 when interrupted (Ctrl-C cancels the run: nothing swept).
    A file that cannot be read (or a Markdown file that is not text) is listed on stderr and left out, and
    then the run sweeps nothing (exit 1). A LOCATION that holds no such file changes nothing and is said
    so on stderr (exit 0).
    """
    from memory_service_tools.vault_source import directory_documents
    from memory_service_tools.vault_source import git_documents

    try:
        source = git_documents(location, branch) if git else directory_documents(Path(location))
    except SourceError as error:
        fail([f"error: {error}"])
    for path, why in source.skipped:
        err.print(escape(f"{path}: skipped: {why}"))
    logging.getLogger("grpc._channel").setLevel(logging.CRITICAL)
    total = len(source.documents)
    with memory_client(ctx) as client, progress_bar() as progress:
        # The stream is one call with one answer: the bar counts documents handed to the server (it
        # projects them as they arrive, so it trails by at most what is in flight); what the server did
        # is its report, printed at the end.
        task = progress.add_task(SENT, total=total)

        def sent(count: int) -> None:
            progress.update(task, completed=count, description=SENT if count < total else WAITING)

        try:
            response = client.ingest_vault(
                vault_messages(
                    source, namespace, dry_run=dry_run, allow_mass_sweep=allow_mass_sweep, on_document=sent
                ),
                timeout=timeout,
            )
        except KeyboardInterrupt:
            progress.stop()
            err.print(
                "interrupted: the run was cancelled and nothing was swept; documents the server projected "
                "so far stay (run the command again to complete the run)"
            )
            raise typer.Exit(130) from None
        except ServiceError as exc:
            if exc.reason == MASS_SWEEP_REFUSED:
                fail(
                    [*error_lines(exc), "nothing was swept; if that is what you mean, add --allow-mass-sweep"]
                )
            fail([*error_lines(exc), "nothing was swept; run the command again"])
    if as_json:
        print_json(response)
    else:
        _print_report(response, unread=len(source.skipped))
    if not total and not response.counts.documents_swept:
        # A run of nothing says nothing wrong, yet the folder was likely not what was meant: for example
        # documents stored with cb retain are no vault documents, so such a run leaves them as they are.
        err.print(
            escape(
                f"warning: {location} holds no document the vault reads (no *.md file, nor a format the "
                f"server converts, outside hidden folders and ignored files): the run changed nothing in "
                f"{namespace!r}"
            ),
            soft_wrap=True,
        )
    if response.counts.documents_rejected or source.skipped:
        raise typer.Exit(1)


def _print_report(response: Message, *, unread: int = 0) -> None:
    from memory_service_grpc_client.memory.v1 import vault_service_pb2

    rejected = vault_service_pb2.VAULT_DOCUMENT_STATUS_REJECTED
    conflict = vault_service_pb2.VAULT_DOCUMENT_STATUS_CONFLICT
    for document in response.documents:  # type: ignore[attr-defined]
        if document.status in (rejected, conflict):
            what = "rejected" if document.status == rejected else "conflict"
            err.print(escape(f"{document.path}: {what}: {document.detail}"))
    c = response.counts  # type: ignore[attr-defined]
    dry = response.dry_run  # type: ignore[attr-defined]
    mode = " (dry run: nothing was written; the counts say what a run would do)" if dry else ""
    out.print(
        escape(
            f"{response.run_id}{mode}: the server handled {len(response.documents)} documents: "  # type: ignore[attr-defined]
            f"{c.documents_new} new, {c.documents_changed} changed, "  # type: ignore[attr-defined]
            f"{c.documents_unchanged} unchanged, {c.documents_swept} swept, {c.documents_conflicting} conflicting, "
            f"{c.documents_rejected} rejected; chunks {c.chunks_embedded} embedded, {c.chunks_written} written; "
            f"links {c.links_resolved} resolved, {c.links_unresolved} unresolved; "
            f"relations {c.relations_written} written, {c.relations_closed} closed"
        )
    )
    unresolved = list(response.unresolved_links)  # type: ignore[attr-defined]
    for link in unresolved[:UNRESOLVED_SHOWN]:
        out.print(escape(f"  unresolved {link.relation}: {link.path} -> {link.target}"))
    if len(unresolved) > UNRESOLVED_SHOWN:
        out.print(f"  ... and {len(unresolved) - UNRESOLVED_SHOWN} more (--json lists all)")
    if response.sweep_refused:  # type: ignore[attr-defined]
        out.print(
            f"the sweep of {c.documents_swept} documents would be refused as a mass sweep; "
            "add --allow-mass-sweep to let it run"
        )
    if unread:
        files = "1 file" if unread == 1 else f"{unread} files"
        out.print(f"not swept: {files} could not be read (listed on stderr); fix them and run again")
    elif not response.swept and not response.dry_run:  # type: ignore[attr-defined]
        out.print("not swept: documents were rejected; fix them and run again")


__all__ = ["ingest", "vault_messages"]

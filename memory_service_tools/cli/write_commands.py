"""The write commands (ingest_service): ``cb observe``, ``cb reconcile``, ``cb retain``, ``cb delete``.

``observe`` and ``retain`` send many calls with a progress bar, retry each on UNAVAILABLE (the RPCs are
idempotent, `memory_service_grpc_client.call_policy`) and report every failed line or file; ``reconcile``
streams a snapshot file; ``delete`` is one call printed with `call_and_print`.
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import json
import logging
import shutil
import tempfile
import threading
from collections.abc import Callable
from collections.abc import Iterable
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures import as_completed
from pathlib import Path
from typing import Annotated

import typer
from google.protobuf import json_format
from google.protobuf.message import Message
from rich.markup import escape

from memory_service_grpc_client import ServiceError
from memory_service_grpc_client import call_policy
from memory_service_grpc_client import is_unavailable
from memory_service_grpc_client import rpc_failure
from memory_service_grpc_client.memory.v1 import document_service_pb2
from memory_service_grpc_client.memory.v1 import observation_service_pb2
from memory_service_grpc_client.memory.v1 import observation_service_pb2_grpc
from memory_service_tools.cli.cli_state import cli_state
from memory_service_tools.cli.option_types import JsonOption
from memory_service_tools.cli.option_types import WriteNamespaceOption
from memory_service_tools.cli.option_types import input_file_option
from memory_service_tools.cli.option_types import key_value_pairs
from memory_service_tools.cli.option_types import mass_sweep_option
from memory_service_tools.cli.rpc_output import call_and_print
from memory_service_tools.cli.rpc_output import memory_client
from memory_service_tools.cli.rpc_output import print_json
from memory_service_tools.cli.terminal import err
from memory_service_tools.cli.terminal import error_lines
from memory_service_tools.cli.terminal import fail
from memory_service_tools.cli.terminal import out
from memory_service_tools.cli.terminal import progress_bar
from memory_service_tools.markdown_vault import DocumentError
from memory_service_tools.markdown_vault import find_documents
from memory_service_tools.markdown_vault import read_document
from memory_service_tools.observation_file import LineError
from memory_service_tools.observation_file import ParsedObservation
from memory_service_tools.observation_file import parse_observation_lines
from memory_service_tools.observation_loader import DEFAULT_OBSERVE_CONCURRENCY
from memory_service_tools.observation_loader import record_observations

MAX_BATCH = 1000  # the largest --batch-size of `cb observe` (the largest batch RecordObservations takes)


@contextlib.contextmanager
def _regular_file(path: Path) -> Iterator[Path]:
    """``path`` itself when it is a regular file; otherwise (a pipe such as ``--file /dev/stdin``) its
    content spooled once to a temporary file, because the commands read their input twice (to count
    lines for the progress bar, then to send them) and a pipe can be read only once."""
    if path.is_file():
        yield path
        return
    with tempfile.NamedTemporaryFile(prefix="cb-input-", suffix=".jsonl") as spooled:
        with path.open("rb") as source:
            shutil.copyfileobj(source, spooled)
        spooled.flush()
        yield Path(spooled.name)


def _count_nonblank(path: Path) -> int:
    with path.open("rb") as handle:
        return sum(1 for line in handle if line.strip())


@dataclasses.dataclass
class _ObserveTally:
    created: int = 0
    duplicate: int = 0
    failed: int = 0
    bad_lines: int = 0
    not_sent: int = 0


def observe(
    ctx: typer.Context,
    file: Annotated[Path, input_file_option("JSONL of Observations")],
    batch_size: Annotated[int, typer.Option(min=1, max=MAX_BATCH, help="observations per RPC")] = 200,
    namespace: Annotated[
        str | None, typer.Option("--namespace", "-n", help="override the namespace of every observation")
    ] = None,
    concurrency: Annotated[
        int,
        typer.Option(
            "--concurrency",
            min=1,
            max=32,
            help="RecordObservations calls in flight (1: sequential)",
        ),
    ] = DEFAULT_OBSERVE_CONCURRENCY,
    as_json: JsonOption = False,
) -> None:
    """Record observations from a JSONL file (one proto3 JSON Observation per line).

    Sends RecordObservations in batches, ``--concurrency`` of them in flight (lanes by subject, see
    `record_observations`; each call retried on UNAVAILABLE: the RPC is idempotent), prints every
    failed item with its line number, and exits 1 if any line or item failed. Safe to re-run: recorded
    observations are duplicates. ``--file /dev/stdin`` reads a pipe. ``--json`` prints the summary as
    one JSON object (``created``, ``duplicate``, ``failed``, ``unparsable_lines``, ``lines_not_sent``).
    """
    with _regular_file(file) as path:
        _observe(ctx, path, batch_size, namespace, concurrency, as_json)


def _observe(
    ctx: typer.Context, file: Path, batch_size: int, namespace: str | None, concurrency: int, as_json: bool
) -> None:
    tally = _ObserveTally()
    total_lines = _count_nonblank(file)
    lines_done = 0
    # Observations read per line and not yet answered: a line is done when all of its are.
    open_lines: collections.Counter[int] = collections.Counter()
    with cli_state(ctx).client() as client, progress_bar() as progress:
        # The concurrent loader sends batches on the client's channel (its own retries and lanes).
        stub = observation_service_pb2_grpc.ObservationServiceStub(client.ingest_channel)
        task = progress.add_task("lines", total=total_lines)

        def report(text: str) -> None:
            progress.console.print(escape(text), soft_wrap=True)

        def counted(
            items: Iterable[ParsedObservation | LineError],
        ) -> Iterator[ParsedObservation | LineError]:
            for item in items:
                open_lines[item.line] += 1
                yield item

        def advance(batch: list[ParsedObservation | LineError]) -> None:
            nonlocal lines_done
            for item in batch:
                open_lines[item.line] -= 1
                if open_lines[item.line] <= 0:
                    del open_lines[item.line]
                    lines_done += 1
            progress.update(task, completed=min(lines_done, total_lines))

        give_up = threading.Event()
        with file.open("rb") as handle:
            items = counted(parse_observation_lines(handle, namespace=namespace))
            for outcome in record_observations(
                stub, items, batch_size=batch_size, concurrency=concurrency, on_retry=report, stop=give_up
            ):
                batch, parsed = outcome.batch, outcome.parsed
                for item in batch:
                    if isinstance(item, LineError):
                        tally.bad_lines += 1
                        report(f"line {item.line}: {item.error} (not sent)")
                if outcome.error is not None:
                    where = f"lines {parsed[0].line}-{parsed[-1].line}"
                    for text in rpc_failure(outcome.error).lines():
                        report(f"{where}: {text}")
                    tally.failed += len(parsed)
                    if is_unavailable(outcome.error) and not give_up.is_set():
                        give_up.set()
                        report(
                            "giving up: the service stayed unavailable for "
                            f"{call_policy.RETRY_MAX_SECONDS:.0f} s"
                        )
                elif outcome.response is not None:
                    _tally_results(parsed, outcome.response, tally, report)
                advance(batch)
        if give_up.is_set():
            tally.not_sent = total_lines - lines_done
    if as_json:
        _print_summary(
            created=tally.created,
            duplicate=tally.duplicate,
            failed=tally.failed,
            unparsable_lines=tally.bad_lines,
            lines_not_sent=tally.not_sent,
        )
    else:
        summary = f"created {tally.created}, duplicate {tally.duplicate}, failed {tally.failed}"
        if tally.bad_lines:
            summary += f", unparsable lines {tally.bad_lines}"
        if tally.not_sent:
            summary += f", lines not sent {tally.not_sent}"
        out.print(summary)
    if tally.failed or tally.bad_lines or tally.not_sent:
        raise typer.Exit(1)


def _print_summary(**fields: object) -> None:
    """The summary of a bulk command as one JSON object on stdout (``--json``)."""
    typer.echo(json.dumps(fields, ensure_ascii=False))


def _tally_results(
    parsed: list[ParsedObservation],
    response: observation_service_pb2.RecordObservationsResponse,
    tally: _ObserveTally,
    report: Callable[[str], None],
) -> None:
    results = list(response.results)
    if len(results) != len(parsed):
        report(
            f"lines {parsed[0].line}-{parsed[-1].line}: error: the service returned {len(results)} results "
            f"for {len(parsed)} observations"
        )
        tally.failed += len(parsed)
        return
    for item, result in zip(parsed, results):
        if result.status == "failed" or result.error:
            tally.failed += 1
            where = (
                f"line {item.line}: {result.observation_id}" if result.observation_id else f"line {item.line}"
            )
            report(f"{where}: {result.error or result.status}")
            for violation in result.field_violations:
                if violation != result.error:
                    report(f"  - {violation}")
        elif result.created:
            tally.created += 1
        else:
            tally.duplicate += 1


def reconcile(
    ctx: typer.Context,
    file: Annotated[
        Path,
        input_file_option(
            'JSONL: {"header": {...}} first, then {"items": {"entities": [...], "facts": [...]}} lines'
        ),
    ],
    namespace: Annotated[
        str | None, typer.Option("--namespace", "-n", help="override the header's namespace")
    ] = None,
    part_items: Annotated[int, typer.Option(min=1, max=10_000, help="entities + facts per message")] = 1000,
    timeout: Annotated[float, typer.Option(min=1.0, help="seconds for the whole stream")] = 3600.0,
    allow_mass_sweep: Annotated[
        bool,
        mass_sweep_option(
            "let the snapshot close every open fact of its scope, or more than the server's share"
        ),
    ] = False,
    as_json: JsonOption = False,
) -> None:
    """Reconcile a snapshot from a JSONL file with SnapshotService.ReconcileStream (`memory_service_tools.snapshot_file`).

    The file is read and sent as it streams (never whole in memory), with a progress bar over its lines.
    Atomic on the server: if the stream breaks, nothing is written and the same command can simply be
    run again. Exits 1 on a bad line or a refused snapshot (field violations name each item's position).
    """
    from memory_service_tools.snapshot_file import SnapshotFileError
    from memory_service_tools.snapshot_file import stream_requests

    bad_line: list[SnapshotFileError] = []
    logging.getLogger("grpc._channel").setLevel(logging.CRITICAL)  # a bad line is reported below

    def messages(lines: Iterable[bytes], advance: Callable[[int], None]) -> Iterator[Message]:
        try:
            yield from stream_requests(
                lines,
                namespace=namespace,
                part_items=part_items,
                on_line=advance,
                allow_mass_sweep=allow_mass_sweep,
            )
        except SnapshotFileError as error:
            bad_line.append(error)
            raise  # cancels the stream: the server rolls the run back

    with (
        _regular_file(file) as path,
        cli_state(ctx).client() as client,
        progress_bar() as progress,
        path.open("rb") as handle,
    ):
        task = progress.add_task("lines", total=_count_nonblank(path))
        try:
            response = client.reconcile_stream(
                messages(handle, lambda line: progress.update(task, completed=line)), timeout=timeout
            )
        except ServiceError as exc:
            lines = [f"{file}:{bad_line[0]} (nothing was reconciled)"] if bad_line else error_lines(exc)
            fail(lines)
    if as_json:
        print_json(response)
        return
    counts = json_format.MessageToDict(response.counts, preserving_proto_field_name=True)
    summary = ", ".join(f"{name.replace('_', ' ')} {value}" for name, value in counts.items()) or "no changes"
    state = "already reconciled (nothing changed)" if response.unchanged else "reconciled"
    after = f" after {response.previous_snapshot_id}" if response.previous_snapshot_id else ""
    out.print(escape(f"{response.snapshot_id}: {state}{after}: {summary}"))


def retain(
    ctx: typer.Context,
    directory: Annotated[Path, typer.Argument(exists=True, help="a folder of Markdown files and documents (PDF, DOCX, HTML, ...), or one such file")],
    namespace: WriteNamespaceOption,
    concurrency: Annotated[
        int,
        typer.Option(
            "--concurrency",
            min=1,
            max=16,
            help="Retain calls in flight",
        ),
    ] = 2,
    meta: Annotated[
        list[str] | None,
        typer.Option("--meta", help="consumer tag key=value on every document, e.g. collection=faq (repeatable)"),
    ] = None,
    as_json: JsonOption = False,
) -> None:
    """Retain every ``*.md`` file under DIRECTORY (sorted), or the one file DIRECTORY names, as a document;
    safe to re-run (upsert).

    PDF, DOCX, PPTX, XLSX, HTML, EPUB, EML, MBOX and TXT files are sent as their bytes and converted on
    the server (key ``doc:<relative path>``, extension kept; docs/how-to/documents.md).

    Frontmatter gives natural_key (default ``doc:<relative path without .md>``; for a single file, its name),
    title, type, links. A link to a document of the same run that was not stored yet when its source was
    sent is resolved in the same run: the source is sent once more after the others. Links to documents
    stored nowhere are skipped by the server and counted at the end. ``--json``
    prints the summary as one JSON object (``created``, ``updated``, ``unchanged``, ``failed``, ``chunks``,
    ``missing_links``: ``[{"from": key, "to": key}]``). A document the server already held exactly as sent
    counts as unchanged (RetainResponse.unchanged), not as updated.
    """
    tags = key_value_pairs(meta, "--meta")
    if directory.is_file():
        paths, directory = [directory], directory.parent
    else:
        paths = find_documents(directory)
    if not paths:
        fail([f"error: no *.md or other document files (pdf, docx, html, ...) under {directory}"])
    failures = 0
    created = updated = unchanged = chunks = 0
    missing: list[tuple[str, str]] = []
    keys: set[str] = set()
    sent: dict[str, tuple[str, document_service_pb2.RetainRequest]] = {}
    with cli_state(ctx).client() as client, progress_bar() as progress:
        task = progress.add_task("documents", total=len(paths))

        def report(text: str) -> None:
            progress.console.print(escape(text), soft_wrap=True)

        def send(request: document_service_pb2.RetainRequest) -> document_service_pb2.RetainResponse:
            # Retain is an upsert: the client retries it on UNAVAILABLE.
            return client.retain(request, on_retry=lambda text: report(f"{request.source_path}: {text}"))

        with ThreadPoolExecutor(max_workers=concurrency, thread_name_prefix="cb-retain") as pool:
            futures = {}
            for path in paths:  # submitted in order: a link to an earlier document finds it
                relative = path.relative_to(directory).as_posix()
                try:
                    request = read_document(path, directory, namespace=namespace)
                    request.meta.update(tags)
                except DocumentError as exc:
                    failures += 1
                    report(f"{relative}: error: {exc}")
                    progress.advance(task)
                    continue
                if request.natural_key in keys:
                    report(
                        f"{relative}: warning: natural key {request.natural_key} is used by an earlier file"
                    )
                keys.add(request.natural_key)
                sent[request.natural_key] = (relative, request)
                futures[pool.submit(send, request)] = relative
            for future in as_completed(futures):
                relative = futures[future]
                try:
                    response = future.result()
                except ServiceError as exc:
                    failures += 1
                    for text in error_lines(exc):
                        report(f"{relative}: {text}")
                else:
                    created += int(response.created)
                    unchanged += int(response.unchanged)
                    updated += int(not response.created and not response.unchanged)
                    chunks += response.chunk_count
                    missing.extend((response.natural_key, link) for link in response.missing_links)
                progress.advance(task)
            # Links point both ways in a folder and Retain runs concurrently, so a source may be stored before
            # its target: once every document is stored, those sources are sent again and their links resolve.
            again = sorted({source for source, target in missing if target in keys and source in sent})
            resent = {pool.submit(send, sent[source][1]): source for source in again}
            for future in as_completed(resent):
                source = resent[future]
                try:
                    response = future.result()
                except ServiceError as exc:
                    for text in error_lines(exc):
                        report(f"{sent[source][0]}: {text}")
                    continue
                missing = [pair for pair in missing if pair[0] != source]
                missing.extend((source, link) for link in response.missing_links)
    later = sum(1 for _, target in missing if target in keys)
    if as_json:
        _print_summary(
            created=created,
            updated=updated,
            unchanged=unchanged,
            failed=failures,
            chunks=chunks,
            missing_links=[{"from": source, "to": target} for source, target in missing],
        )
    else:
        out.print(
            f"documents: {created} created, {updated} updated, {unchanged} unchanged, {failures} failed; "
            f"{chunks} chunks; {len(missing)} missing links",
            soft_wrap=True,  # one line, however narrow the terminal
        )
    if later and not as_json:
        out.print(
            f"{later} of the missing links point to documents of this folder: run `cb retain` again to link them"
        )
    if failures:
        raise typer.Exit(1)


def delete_node(
    ctx: typer.Context,
    key: Annotated[str, typer.Argument(help="natural key of the node to delete, e.g. doc:apt/README")],
    namespace: WriteNamespaceOption,
    reason: Annotated[str, typer.Option("--reason", help="why; kept in the audit event")] = "",
    trace_id: Annotated[str | None, typer.Option("--trace-id", help="trace of the audit event")] = None,
    as_json: JsonOption = False,
) -> None:
    """Delete a node with its chunks, edges and facts (DocumentService.DeleteNode); the deletion is
    audited (read it back with `cb trace`). Audit nodes are protected; a missing key is NOT_FOUND."""

    def render(response: document_service_pb2.DeleteNodeResponse) -> None:
        err.print(
            escape(
                f"deleted {response.natural_key} ({response.type}): {response.chunks_deleted} chunks, "
                f"{response.facts_deleted} facts, {response.edges_deleted} other edges"
            )
        )
        err.print(escape(f"audit event {response.audit_event_id} in trace {response.trace_id}"))

    request = document_service_pb2.DeleteNodeRequest(
        namespace=namespace, natural_key=key, reason=reason, trace_id=trace_id or ""
    )
    call_and_print(memory_client(ctx).delete_node, request, as_json=as_json, render=render)

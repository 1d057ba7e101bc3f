"""The read commands: ``cb search``, ``cb facts``, ``cb source``, ``cb trace`` (query_service).

Each builds its request, calls it with `call_and_print` (``--json`` prints the response as proto3
JSON) and renders the response for humans: results on stdout, details on stderr. An empty answer from a
namespace that holds nothing the caller can see exits with `flag_empty_namespace`'s code and hint. The context
packs (``cb context``, ``cb typed-context``) are in `memory_service_tools.cli.context_commands`.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer
from google.protobuf import json_format
from google.protobuf import timestamp_pb2
from rich.markup import escape

from common.grpc.proto_mapping import dict_to_struct
from common.grpc.proto_mapping import instant
from common.grpc.proto_mapping import struct_to_dict
from common.kernel.identifiers import canonical_instant
from memory_service_grpc_client.memory.v1 import fact_query_service_pb2
from memory_service_grpc_client.memory.v1 import retrieval_service_pb2
from memory_service_grpc_client.memory.v1 import source_service_pb2
from memory_service_grpc_client.memory.v1 import trace_service_pb2
from memory_service_tools.cli.namespace_commands import flag_empty_namespace
from memory_service_tools.cli.option_types import AsOfOption
from memory_service_tools.cli.option_types import JsonOption
from memory_service_tools.cli.option_types import NamespaceOption
from memory_service_tools.cli.option_types import as_of_timestamp
from memory_service_tools.cli.option_types import key_value_pairs
from memory_service_tools.cli.rpc_output import call_and_print
from memory_service_tools.cli.rpc_output import memory_client
from memory_service_tools.cli.terminal import column_table
from memory_service_tools.cli.terminal import err
from memory_service_tools.cli.terminal import fail
from memory_service_tools.cli.terminal import out
from memory_service_tools.cli.terminal import print_text
from memory_service_tools.cli.terminal import print_wide
from memory_service_tools.cli.terminal import printed_none


def _excerpt(text: str, limit: int = 160) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


def _format_instant(stamp: timestamp_pb2.Timestamp) -> str:
    return canonical_instant(instant(stamp))


def search(
    ctx: typer.Context,
    query: Annotated[str, typer.Argument(help="what to look for")],
    namespace: NamespaceOption,
    top_k: Annotated[int, typer.Option("--top-k", min=1, max=100)] = 10,
    types: Annotated[list[str] | None, typer.Option("--type", help="node type to keep (repeatable)")] = None,
    meta: Annotated[
        list[str] | None, typer.Option("--meta", help="chunk meta filter key=value (repeatable)")
    ] = None,
    preset: Annotated[
        str,
        typer.Option("--preset", help="ranking preset: documents or conversations (default: the service's)"),
    ] = "",
    as_json: JsonOption = False,
) -> None:
    """Hybrid search (vector + full text + trigram) over the chunks of a namespace."""
    request = retrieval_service_pb2.SearchRequest(
        namespace=namespace, query=query, top_k=top_k, types=types or [], preset=preset
    )
    filters = key_value_pairs(meta, "--meta")
    if filters:
        request.meta.CopyFrom(dict_to_struct(filters))
    response = call_and_print(memory_client(ctx).search, request, as_json=as_json, render=_print_hits)
    if not response.hits:
        flag_empty_namespace(ctx, namespace)


def _print_hits(response: retrieval_service_pb2.SearchResponse) -> None:
    if printed_none(response.hits, "no hits"):
        return
    table = column_table("#", "score", "document", "text", right=("#", "score"), show_lines=True)
    for rank, hit in enumerate(response.hits, start=1):
        where = f"{hit.node_key}#{hit.chunk_order}"
        if hit.title and hit.title != hit.node_key:
            where += f"\n{hit.title}"
        if hit.heading:
            where += f"\n§ {hit.heading}"
        if hit.provenance.citation:  # the file and the place: "manual.pdf, p. 12"
            where += f"\n{hit.provenance.citation}"
        elif hit.source_path:
            where += f"\n{hit.source_path}"
        scores = (
            f"{hit.score:.4f}\nv {hit.vector_score:.3f}\nt {hit.text_score:.3f}\ng {hit.trigram_score:.3f}"
        )
        table.add_row(str(rank), scores, escape(where), escape(_excerpt(hit.text, 300)))
    out.print(table)


def facts(
    ctx: typer.Context,
    namespace: NamespaceOption,
    subject: Annotated[str | None, typer.Option(help="subject natural key, e.g. package:openssl")] = None,
    predicate: Annotated[str | None, typer.Option(help="edge type, e.g. HAS_VERSION")] = None,
    object_: Annotated[str | None, typer.Option("--object", help="object natural key")] = None,
    as_of: AsOfOption = None,
    include_history: Annotated[
        bool, typer.Option("--include-history", help="include superseded and closed facts")
    ] = False,
    history: Annotated[
        bool, typer.Option("--history", hidden=True, help="deprecated: the former name of --include-history")
    ] = False,
    page_size: Annotated[int, typer.Option("--page-size", min=1, max=1000)] = 500,
    as_json: JsonOption = False,
) -> None:
    """List facts by subject / predicate / object, valid at an instant or with their history."""
    if history:  # accepted for one release
        err.print("--history is deprecated: use --include-history")
        include_history = True
    request = fact_query_service_pb2.ListFactsRequest(
        namespace=namespace,
        subject=subject or "",
        predicate=predicate or "",
        object=object_ or "",
        include_history=include_history,
        page_size=page_size,
        as_of=as_of_timestamp(as_of),
    )
    # Every page, following next_page_token, in one response.
    collected = call_and_print(memory_client(ctx).list_every_fact, request, as_json=as_json, render=_print_facts)
    if not collected.facts:
        flag_empty_namespace(ctx, namespace)


def _print_facts(collected: fact_query_service_pb2.ListFactsResponse) -> None:
    if printed_none(collected.facts, "no facts"):
        return
    table = column_table("subject", "predicate", "object", "valid", "evidence", "flags")
    for fact in collected.facts:
        flags = [
            flag
            for flag, on in (
                ("conflict", fact.conflict),
                ("evidence lost", fact.evidence_lost),
                (f"superseded by {fact.superseded_by}", bool(fact.superseded_by)),
            )
            if on
        ]
        valid_from = _format_instant(fact.valid_from) if fact.HasField("valid_from") else "?"
        valid_to = _format_instant(fact.valid_to) if fact.HasField("valid_to") else "now"
        table.add_row(
            escape(fact.subject),
            escape(fact.predicate),
            escape(fact.object),
            f"{valid_from} → {valid_to}",
            escape(f"{fact.evidence} {fact.confidence:.2f}".strip()),
            escape(", ".join(flags)),
        )
    print_wide(table)  # keys and fact ids whole, however narrow the terminal
    out.print(f"{len(collected.facts)} facts")


def source(
    ctx: typer.Context,
    key: Annotated[str, typer.Argument(help="natural key of the node, e.g. doc:apt/README")],
    namespace: NamespaceOption,
    original: Annotated[
        Path | None,
        typer.Option(
            "--original",
            dir_okay=False,
            help="also write the file the document was converted from (PDF, DOCX, ...) to this path, byte for byte",
        ),
    ] = None,
    as_json: JsonOption = False,
) -> None:
    """Print the original text of a node (or its chunks re-assembled) with its provenance.

    With --original, a document retained from a file also gets that file written back, byte for byte
    (its sha256 is the one GetSource reports); a node with no such file exits 1 and writes nothing.
    """
    request = source_service_pb2.GetSourceRequest(
        namespace=namespace, natural_key=key, include_original=original is not None
    )

    def get_source(request: source_service_pb2.GetSourceRequest) -> source_service_pb2.GetSourceResponse:
        response = memory_client(ctx).get_source(request)
        if original is not None:
            _write_original(response.source, original)
        return response

    try:
        call_and_print(get_source, request, as_json=as_json, render=_print_source)
    except typer.Exit:
        flag_empty_namespace(ctx, namespace)  # a misspelt namespace, rather than a missing node?
        raise


def _write_original(found: source_service_pb2.Source, path: Path) -> None:
    """Writes the original file of ``found`` to ``path`` and drops its bytes from the response (so
    --json does not print them), or exits 1 when the node was stored as text (no original file)."""
    if not found.HasField("original"):
        fail([f"{found.natural_key} was stored as text, not converted from a file: it has no original file"])
    path.write_bytes(found.original.data)
    err.print(
        escape(
            f"original written to {path}: {found.original.media_type}, {found.original.size_bytes} bytes, "
            f"sha256 {found.original.sha256}"
        ),
        soft_wrap=True,
    )
    found.original.ClearField("data")


def _print_source(response: source_service_pb2.GetSourceResponse) -> None:
    found = response.source
    err.print(f"[bold]{escape(found.title or found.natural_key)}[/bold]  ({escape(found.natural_key)})")
    details = [f"content: {found.content_source}"]
    if found.type:
        details.append(f"type: {found.type}")
    if found.provenance.source_path:
        details.append(f"source: {found.provenance.source_path}")
    if found.chunk_count:
        details.append(f"chunks: {found.chunk_count}")
    err.print(escape("; ".join(details)))
    if found.provenance.HasField("metadata") and found.provenance.metadata.fields:
        err.print(escape("provenance: " + json.dumps(json_format.MessageToDict(found.provenance.metadata))))
    print_text(found.content)


def trace(
    ctx: typer.Context,
    trace_id: Annotated[str, typer.Argument(help="the trace id (a CompileContext trace_id, a request id)")],
    namespace: NamespaceOption,
    as_json: JsonOption = False,
) -> None:
    """Print the trail of a trace (TraceService.GetTrace): audit events and context compilations, by time."""
    request = trace_service_pb2.GetTraceRequest(namespace=namespace, trace_id=trace_id)
    call_and_print(
        memory_client(ctx).get_trace,
        request,
        as_json=as_json,
        render=lambda response: _print_trace(trace_id, response),
    )


def _print_trace(trace_id: str, response: trace_service_pb2.GetTraceResponse) -> None:
    title = f"trace {trace_id}: {len(response.trace.entries)} entries"
    table = column_table("time", "entry", "who / request", "what", title=title)
    for entry in response.trace.entries:
        when = _format_instant(entry.time)
        if entry.HasField("audit_event"):
            event = entry.audit_event
            details = json.dumps(struct_to_dict(event.details), ensure_ascii=False)
            what = _excerpt(f"{event.target_key} {details}")
            table.add_row(when, f"audit: {event.action}", escape(event.principal), escape(what))
        else:
            compilation = entry.context_compilation
            asked = json_format.MessageToDict(compilation.request)
            kept = sum(1 for d in compilation.decisions if d.fields["decision"].string_value == "kept")
            table.add_row(
                when,
                "context compilation",
                escape(_excerpt(str(asked.get("query", "")))),
                f"{kept} kept of {len(compilation.decisions)} shown ({compilation.hidden_decision_count} hidden)",
            )
    err.print(table)

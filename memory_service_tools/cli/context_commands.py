"""The context-pack commands: ``cb context`` (CompileContext) and ``cb typed-context``
(CompileTypedContext).

Both print the same way (`_print_pack`): a table of the pack's items on stderr, titled with the item
count and the tokens used of the budget, then the dropped count and the trace id on stderr, then the
pack text on stdout; only the table's columns differ.
"""

from __future__ import annotations

from collections.abc import Iterable
from collections.abc import Sequence
from typing import Annotated
from typing import TypeVar

import typer
from rich.markup import escape

from memory_service_grpc_client.memory.v1 import context_service_pb2
from memory_service_tools.cli.namespace_commands import flag_empty_namespace
from memory_service_tools.cli.option_types import AsOfOption
from memory_service_tools.cli.option_types import JsonOption
from memory_service_tools.cli.option_types import NamespaceOption
from memory_service_tools.cli.option_types import as_of_timestamp
from memory_service_tools.cli.rpc_output import call_and_print
from memory_service_tools.cli.rpc_output import memory_client
from memory_service_tools.cli.terminal import column_table
from memory_service_tools.cli.terminal import err
from memory_service_tools.cli.terminal import print_text

BudgetOption = Annotated[int, typer.Option("--budget", min=1, max=100000, help="token budget")]
TraceIdOption = Annotated[str | None, typer.Option("--trace-id")]
RequestT = TypeVar(
    "RequestT", context_service_pb2.CompileContextRequest, context_service_pb2.CompileTypedContextRequest
)


def _compile_request(
    request_type: type[RequestT],
    namespace: str,
    query: str,
    anchors: list[str] | None,
    budget: int,
    as_of: str | None,
    trace_id: str | None,
) -> RequestT:
    """A CompileContext or CompileTypedContext request with the fields both have, from the options.

    Raises:
        typer.BadParameter: ``--as-of`` is not an ISO 8601 instant.
    """
    return request_type(
        namespace=namespace,
        query=query,
        anchors=anchors or [],
        token_budget=budget,
        trace_id=trace_id or "",
        as_of=as_of_timestamp(as_of),
    )


def _print_pack(
    pack: context_service_pb2.ContextPack | context_service_pb2.TypedContextPack,
    *,
    budget: int,
    columns: Sequence[str],
    right_aligned: Iterable[str],
    rows: Iterable[Sequence[str]],
    note: str = "",
) -> None:
    """The items table (and ``note`` under it) and the dropped count and trace id on stderr; the pack text
    on stdout."""
    title = f"{len(pack.items)} items, {pack.token_count}/{pack.token_budget or budget} tokens"
    table = column_table(*columns, right=set(right_aligned), title=title)
    for row in rows:
        table.add_row(*row)
    err.print(table)
    if note:
        err.print(note)
    if pack.dropped_count:
        err.print(
            f"{pack.dropped_count} candidates left out: over the budget, or adding nothing to what was kept"
            " (cb trace TRACE_ID gives each reason)"
        )
    if pack.trace_id:
        err.print(f"trace: {escape(pack.trace_id)}")
    print_text(pack.text)


def context(
    ctx: typer.Context,
    query: Annotated[str, typer.Argument(help="the task or question")],
    namespace: NamespaceOption,
    anchors: Annotated[
        list[str] | None, typer.Option("--anchor", help="natural key the task is about (repeatable)")
    ] = None,
    budget: BudgetOption = 2000,
    as_of: AsOfOption = None,
    trace_id: TraceIdOption = None,
    dropped: Annotated[
        int,
        typer.Option(
            "--dropped", min=0, max=100, help="also list this many of the best candidates left out, with why"
        ),
    ] = 0,
    as_json: JsonOption = False,
) -> None:
    """Compile a context pack for a task: ranked chunks and facts fitted to a token budget."""
    request = _compile_request(
        context_service_pb2.CompileContextRequest, namespace, query, anchors, budget, as_of, trace_id
    )
    request.dropped_limit = dropped

    def render(response: context_service_pb2.CompileContextResponse) -> None:
        rows = []
        for number, item in enumerate(response.pack.items, start=1):
            origin = item.provenance.fact_id or item.provenance.node_key
            if item.provenance.citation or item.provenance.source_path:  # "manual.pdf, p. 12"
                origin += f" ({item.provenance.citation or item.provenance.source_path})"
            if item.conflict:
                origin += " [conflict]"
            rule = item.selection.rule if item.HasField("selection") else ""
            rows.append(
                (str(number), item.kind, rule, f"{item.score:.4f}", str(item.token_count), escape(origin))
            )
        _print_pack(
            response.pack,
            budget=budget,
            columns=("#", "kind", "rule", "score", "tokens", "from"),
            right_aligned=("#", "score", "tokens"),
            rows=rows,
        )
        if response.pack.dropped:
            title = f"best {len(response.pack.dropped)} candidates left out"
            table = column_table(
                "kind", "rule", "score", "tokens", "from", "why", right=("score", "tokens"), title=title
            )
            for candidate in response.pack.dropped:
                table.add_row(
                    candidate.kind,
                    candidate.selection.rule if candidate.HasField("selection") else "",
                    f"{candidate.score:.4f}",
                    str(candidate.token_count),
                    escape(candidate.provenance.fact_id or candidate.provenance.node_key),
                    escape(candidate.drop_reason),
                )
            err.print(table)

    response = call_and_print(memory_client(ctx).compile_context, request, as_json=as_json, render=render)
    if not response.pack.items:
        flag_empty_namespace(ctx, namespace)


def typed_context(
    ctx: typer.Context,
    namespace: NamespaceOption,
    query: Annotated[
        str, typer.Argument(help="the task; identifiers in it (the packs' idPatterns) become anchors")
    ] = "",
    anchors: Annotated[
        list[str] | None,
        typer.Option("--anchor", help="natural key to start from; kind and id aliases resolve (repeatable)"),
    ] = None,
    depth: Annotated[int, typer.Option("--depth", min=0, max=4, help="steps from an anchor (0: 2)")] = 0,
    relations: Annotated[
        list[str] | None, typer.Option("--relation", help="follow only this relation (repeatable)")
    ] = None,
    budget: BudgetOption = 2000,
    as_of: AsOfOption = None,
    trace_id: TraceIdOption = None,
    as_json: JsonOption = False,
) -> None:
    """Compile a typed context pack: traversal from anchors along the namespace's domain-pack relations."""
    request = _compile_request(
        context_service_pb2.CompileTypedContextRequest, namespace, query, anchors, budget, as_of, trace_id
    )
    request.max_depth = depth
    request.relations.extend(relations or [])

    def render(response: context_service_pb2.CompileTypedContextResponse) -> None:
        pack = response.pack
        for anchor in pack.anchors:
            found = "found" if anchor.found else "not found"
            err.print(escape(f"anchor {anchor.input} -> {anchor.natural_key} ({anchor.source}, {found})"))
        rows = []
        for number, item in enumerate(pack.items, start=1):
            label = (
                item.provenance.fact_id if item.kind == "fact" else f"{item.natural_key} [{item.node_type}]"
            )
            path = " > ".join(f"{step.relation}({step.direction})" for step in item.path)
            rows.append(
                (str(number), item.kind, str(item.depth), f"{item.score:.4f}", escape(label), escape(path))
            )
        _print_pack(
            pack,
            budget=budget,
            columns=("#", "kind", "depth", "score", "item", "path"),
            right_aligned=("#", "depth", "score"),
            rows=rows,
            note="the walk stopped at its row limit" if pack.truncated else "",
        )

    call_and_print(memory_client(ctx).compile_typed_context, request, as_json=as_json, render=render)

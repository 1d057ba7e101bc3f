"""``cb namespaces`` and ``cb stats NAMESPACE`` (NamespaceService), and the check the read commands make
when an answer is empty: a namespace that holds nothing the caller can see is said to be so, with the
closest existing name, and the command exits with `EMPTY_NAMESPACE_EXIT`."""

from __future__ import annotations

from typing import Annotated

import grpc
import typer
from rich.markup import escape

from common.auth.principals import closest_namespace
from memory_service_grpc_client import ServiceError
from memory_service_grpc_client.memory.v1 import namespace_service_pb2
from memory_service_tools.cli.option_types import JsonOption
from memory_service_tools.cli.rpc_output import call_and_print
from memory_service_tools.cli.rpc_output import memory_client
from memory_service_tools.cli.terminal import column_table
from memory_service_tools.cli.terminal import err
from memory_service_tools.cli.terminal import out
from memory_service_tools.cli.terminal import print_wide
from memory_service_tools.cli.terminal import printed_none

EMPTY_NAMESPACE_EXIT = 3
"""Exit code of a read whose namespace holds nothing the caller can see (a misspelt name, usually); the
output on stdout (``--json`` included) is what it was, the explanation goes to stderr."""

HINT_NAMESPACES = 1000
"""At most this many namespaces are read to name the closest one to a misspelt name (every page counts
what its namespaces hold, so the hint does not read a whole large deployment)."""


def namespaces(
    ctx: typer.Context,
    prefix: Annotated[str, typer.Option("--prefix", help="only namespaces whose name starts with this")] = "",
    as_json: JsonOption = False,
) -> None:
    """List the namespaces that hold something you can see, with counts (only what your token's scopes
    reach)."""
    call_and_print(
        memory_client(ctx).list_every_namespace,
        namespace_service_pb2.ListNamespacesRequest(prefix=prefix),
        as_json=as_json,
        render=_print_namespaces,
    )


def _print_namespaces(response: namespace_service_pb2.ListNamespacesResponse) -> None:
    if printed_none(response.namespaces, "no namespaces hold anything yet"):
        return
    counts = ("observations", "nodes", "facts", "chunks")
    table = column_table("namespace", *counts, right=counts)
    for item in response.namespaces:
        table.add_row(
            escape(item.namespace),
            str(item.observation_count),
            str(item.node_count),
            str(item.fact_count),
            str(item.chunk_count),
        )
    print_wide(table)
    out.print(f"{len(response.namespaces)} namespaces")


def stats(
    ctx: typer.Context,
    namespace: Annotated[str, typer.Argument(help="the namespace to count")],
    as_json: JsonOption = False,
) -> None:
    """Count one namespace: observations by status, nodes by type, live and closed facts, chunks and the
    embedding backlog, memories by tier (only what your token's scopes reach)."""
    response = call_and_print(
        memory_client(ctx).get_namespace_stats,
        namespace_service_pb2.GetNamespaceStatsRequest(namespace=namespace),
        as_json=as_json,
        render=_print_stats,
    )
    if not (response.observations_by_status or response.nodes_by_type or response.chunk_count):
        flag_empty_namespace(ctx, namespace)


def _print_stats(response: namespace_service_pb2.GetNamespaceStatsResponse) -> None:
    table = column_table("what", "count", right=("count",), title=f"namespace {escape(response.namespace)}")

    def group(title: str, counts: dict[str, int]) -> None:
        table.add_row(f"{title}", str(sum(counts.values())))
        for key in sorted(counts):
            table.add_row(f"  {escape(key)}", str(counts[key]))

    group("observations", dict(response.observations_by_status))
    group("nodes", dict(response.nodes_by_type))
    table.add_row("facts live", str(response.live_fact_count))
    table.add_row("facts closed", str(response.closed_fact_count))
    table.add_row("chunks", str(response.chunk_count))
    table.add_row("  embedding backlog", str(response.embedding_backlog))
    group("memories", dict(response.memories_by_tier))
    print_wide(table)


def flag_empty_namespace(ctx: typer.Context, namespace: str) -> None:
    """When ``namespace`` holds nothing the caller can see: says so on stderr, names the closest namespace
    that does hold something, and exits with `EMPTY_NAMESPACE_EXIT`. Returns quietly when it holds
    something (an empty answer is then a real one) or when the service cannot list namespaces."""
    client = memory_client(ctx)
    try:
        # the name itself sorts first among the names it prefixes: a page of one tells if it holds something
        first = client.list_namespaces(
            namespace_service_pb2.ListNamespacesRequest(prefix=namespace, page_size=1)
        )
        if [item.namespace for item in first.namespaces] == [namespace]:
            return
        listed = [item.namespace for item in client.iter_namespaces(limit=HINT_NAMESPACES)]
    except (grpc.RpcError, ServiceError):
        return  # a service without NamespaceService: the empty answer stands as it is
    close = closest_namespace(namespace, listed)
    if close:
        hint = f"; did you mean {close!r}?"
    elif listed:
        hint = "; namespaces with data: " + ", ".join(repr(name) for name in listed[:10])
    else:
        hint = "; no namespace holds anything yet"
    err.print(escape(f"namespace {namespace!r} holds nothing you can see{hint}"), soft_wrap=True)
    raise typer.Exit(EMPTY_NAMESPACE_EXIT)

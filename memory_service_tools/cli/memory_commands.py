"""``cb memory add|recall|get|list|summarize|maintain``: memory records (docs/how-to/memory-records.md).

Every command but ``maintain`` calls the services through `MemoryClient` (the scope comes from the
token, the project from ``--project``, sent as ``x-project-id``); ``--json`` prints the response as
proto3 JSON. ``maintain`` runs the tier policy and the expiry sweep once, in process, on the database of
the settings (``CB_DATABASE_URL``), like ``cb init-db``.
"""

from __future__ import annotations

import json
from typing import Annotated

import typer
from google.protobuf import duration_pb2
from google.protobuf import json_format
from rich.markup import escape

from memory_service_grpc_client.memory.v1 import memory_query_service_pb2
from memory_service_grpc_client.memory.v1 import memory_record_pb2
from memory_service_grpc_client.memory.v1 import memory_service_pb2
from memory_service_tools.cli.option_types import JsonOption
from memory_service_tools.cli.option_types import mass_sweep_option
from memory_service_tools.cli.rpc_output import call_and_print
from memory_service_tools.cli.rpc_output import memory_client
from memory_service_tools.cli.terminal import column_table
from memory_service_tools.cli.terminal import err
from memory_service_tools.cli.terminal import out
from memory_service_tools.cli.terminal import printed_none

memory_app = typer.Typer(
    help="Memory records (docs/how-to/memory-records.md): add, recall, read, summarise, maintain.", no_args_is_help=True
)

ProjectOption = Annotated[str, typer.Option("--project", help="project (sent as x-project-id); empty: none")]
UserOption = Annotated[str, typer.Option("--user", help="owner; empty: the token's user (dev mode: any)")]
TagOption = Annotated[list[str] | None, typer.Option("--tag", help="tag (repeatable)")]
TierOption = Annotated[list[str] | None, typer.Option("--tier", help="hot, warm or cold (repeatable)")]
_TIERS = {
    "hot": memory_record_pb2.MEMORY_TIER_HOT,
    "warm": memory_record_pb2.MEMORY_TIER_WARM,
    "cold": memory_record_pb2.MEMORY_TIER_COLD,
}


def _tiers(values: list[str] | None) -> list[memory_record_pb2.MemoryTier.ValueType]:
    out_values = []
    for value in values or []:
        if value not in _TIERS:
            raise typer.BadParameter(f"{value!r}: expected hot, warm or cold", param_hint="--tier")
        out_values.append(_TIERS[value])
    return out_values


def _short(text: str, limit: int = 120) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


def _tier(value: int) -> str:
    return {v: k for k, v in _TIERS.items()}.get(value, "")  # type: ignore[call-overload]


@memory_app.command("add")
def add(
    ctx: typer.Context,
    text: Annotated[str, typer.Argument(help="the memory's text")],
    key: Annotated[str, typer.Option("--key", help="idempotency key (a retry returns the same id)")] = "",
    source: Annotated[str, typer.Option(help="e.g. api, chat, support_ticket")] = "",
    event_type: Annotated[str, typer.Option("--event-type", help="e.g. incident_resolved")] = "",
    tags: TagOption = None,
    importance: Annotated[float | None, typer.Option(min=0.0, max=1.0, help="0..1 (default 0.5)")] = None,
    memory_type: Annotated[
        str, typer.Option("--memory-type", help="fact, event, decision, insight, ...")
    ] = "",
    ttl: Annotated[int | None, typer.Option("--ttl", min=1, help="seconds to live")] = None,
    metadata: Annotated[str, typer.Option("--metadata", help="JSON object of caller metadata")] = "",
    project: ProjectOption = "",
    user: UserOption = "",
    as_json: JsonOption = False,
) -> None:
    """Add one memory (AddMemories with one item); prints its id and whether it was created."""
    item = memory_service_pb2.NewMemory(
        idempotency_key=key, text=text, source=source, event_type=event_type, tags=tags or []
    )
    if importance is not None:
        item.importance = importance
    if memory_type:
        try:
            item.memory_type = memory_record_pb2.MemoryType.Value("MEMORY_TYPE_" + memory_type.upper())
        except ValueError:
            raise typer.BadParameter(
                f"unknown memory type {memory_type!r}", param_hint="--memory-type"
            ) from None
    if ttl is not None:
        item.ttl.CopyFrom(duration_pb2.Duration(seconds=ttl))
    if metadata:
        try:
            parsed = json.loads(metadata)
        except ValueError as exc:
            raise typer.BadParameter(f"not JSON: {exc}", param_hint="--metadata") from None
        if not isinstance(parsed, dict):
            raise typer.BadParameter(
                f"a JSON object is required, got a JSON {type(parsed).__name__}", param_hint="--metadata"
            )
        item.metadata.update(parsed)
    request = memory_service_pb2.AddMemoriesRequest(memories=[item], user_id=user)
    client = memory_client(ctx)
    call_and_print(
        lambda r: client.add_memories(r, project_id=project), request, as_json=as_json, render=_print_added
    )


def _print_added(response: memory_service_pb2.AddMemoriesResponse) -> None:
    for result in response.results:
        if result.status == "failed":
            out.print(escape("failed: " + "; ".join(result.field_violations)))
            raise typer.Exit(1)
        out.print(f"{result.memory_id} {result.status}")


@memory_app.command("recall")
def recall(
    ctx: typer.Context,
    query: Annotated[str, typer.Argument(help="what the memories should be relevant to")],
    top_k: Annotated[int, typer.Option("--top-k", min=1, max=100)] = 10,
    preset: Annotated[str, typer.Option(help="balanced, similarity, recent, important")] = "",
    tiers: TierOption = None,
    tags: TagOption = None,
    expand: Annotated[bool, typer.Option("--expand", help="expand lossless summaries")] = False,
    no_touch: Annotated[bool, typer.Option("--no-touch", help="do not count this recall")] = False,
    project: ProjectOption = "",
    user: UserOption = "",
    as_json: JsonOption = False,
) -> None:
    """Recall the most relevant memories (similarity, recency, importance)."""
    request = memory_query_service_pb2.RecallMemoriesRequest(
        query=query,
        top_k=top_k,
        preset=preset,
        filter=memory_record_pb2.MemoryFilter(tiers=_tiers(tiers), tags=tags or []),
        expand_summaries=expand,
        user_id=user,
    )
    if no_touch:
        request.touch = False
    client = memory_client(ctx)
    call_and_print(
        lambda r: client.recall_memories(r, project_id=project),
        request,
        as_json=as_json,
        render=_print_recalled,
    )


def _print_recalled(response: memory_query_service_pb2.RecallMemoriesResponse) -> None:
    if printed_none(response.memories, "no memories"):
        return
    table = column_table("#", "score", "memory", "text", show_lines=True)
    for rank, item in enumerate(response.memories, start=1):
        scores = (
            f"{item.score:.3f}\nsim {item.similarity:.3f}\nrec {item.recency:.3f}\nimp {item.importance:.2f}"
        )
        where = f"{item.memory.memory_id}\n{_tier(item.memory.tier)}" + (
            " summary" if item.memory.is_summary else ""
        )
        text = _short(item.memory.text, 300) + "".join(
            f"\n  ↳ {o.memory_id}: {_short(o.text, 80)}" for o in item.expanded
        )
        table.add_row(str(rank), scores, escape(where), escape(text))
    out.print(table)


@memory_app.command("get")
def get(
    ctx: typer.Context,
    memory_id: Annotated[str, typer.Argument(help="mem-...")],
    project: ProjectOption = "",
    user: UserOption = "",
    as_json: JsonOption = False,
) -> None:
    """Read one memory (also expired or summarised ones)."""
    client = memory_client(ctx)
    call_and_print(
        lambda r: client.get_memory(r, project_id=project),
        memory_query_service_pb2.GetMemoryRequest(memory_id=memory_id, user_id=user),
        as_json=as_json,
        render=lambda response: out.print_json(
            json.dumps(json_format.MessageToDict(response.memory), ensure_ascii=False)
        ),
    )


@memory_app.command("list")
def list_memories(
    ctx: typer.Context,
    tags: TagOption = None,
    tiers: TierOption = None,
    page_size: Annotated[int, typer.Option("--page-size", min=1, max=500)] = 50,
    page_token: Annotated[str, typer.Option("--page-token")] = "",
    include_expired: Annotated[bool, typer.Option("--include-expired")] = False,
    include_summarized: Annotated[bool, typer.Option("--include-summarized")] = False,
    project: ProjectOption = "",
    user: UserOption = "",
    as_json: JsonOption = False,
) -> None:
    """List memories, newest first (one page; --page-token continues)."""
    request = memory_query_service_pb2.ListMemoriesRequest(
        filter=memory_record_pb2.MemoryFilter(tags=tags or [], tiers=_tiers(tiers)),
        page_size=page_size,
        page_token=page_token,
        include_expired=include_expired,
        include_summarized=include_summarized,
        user_id=user,
    )
    client = memory_client(ctx)
    call_and_print(
        lambda r: client.list_memories(r, project_id=project), request, as_json=as_json, render=_print_list
    )


def _print_list(response: memory_query_service_pb2.ListMemoriesResponse) -> None:
    table = column_table("memory", "tier", "importance", "tags", "text")
    for memory in response.memories:
        table.add_row(
            escape(memory.memory_id),
            _tier(memory.tier) + (" expired" if memory.expired else ""),
            f"{memory.importance:.2f}",
            escape(", ".join(memory.tags)),
            escape(_short(memory.text)),
        )
    out.print(table)
    if response.next_page_token:
        out.print(f"next page: --page-token {response.next_page_token}")


@memory_app.command("summarize")
def summarize(
    ctx: typer.Context,
    memory_ids: Annotated[list[str] | None, typer.Argument(help="memories to summarise (or --tag)")] = None,
    tags: TagOption = None,
    lossless: Annotated[bool, typer.Option("--lossless", help="keep the originals recallable")] = False,
    sentences: Annotated[int, typer.Option("--sentences", min=1, max=20)] = 3,
    project: ProjectOption = "",
    user: UserOption = "",
    as_json: JsonOption = False,
) -> None:
    """Summarise memories (by ids, or every unsummarised memory with the --tag filter) into a summary record."""
    request = memory_service_pb2.SummarizeMemoriesRequest(
        memory_ids=memory_ids or [], lossless=lossless, max_sentences=sentences, user_id=user
    )
    if tags:
        request.filter.CopyFrom(memory_record_pb2.MemoryFilter(tags=tags))
    client = memory_client(ctx)
    call_and_print(
        lambda r: client.summarize_memories(r, project_id=project),
        request,
        as_json=as_json,
        render=lambda response: out.print(
            escape(
                f"{response.summary.memory_id} ({'created' if response.created else 'existing'}, "
                f"{len(response.summary.summarized_ids)} originals): {response.summary.text}"
            )
        ),
    )


@memory_app.command("maintain")
def maintain(
    ctx: typer.Context,
    namespaces: Annotated[
        list[str] | None,
        typer.Option(
            "--namespace", help="Only the memories of this namespace (repeatable; default: every namespace)."
        ),
    ] = None,
    allow_mass_sweep: Annotated[
        bool,
        mass_sweep_option(
            "expire memories even where that removes more than the share of a namespace (clock jump)"
        ),
    ] = False,
    as_json: JsonOption = False,
) -> None:
    """Run the tier policy and the expiry sweep once on the database (CB_DATABASE_URL).

    A namespace where the pass would expire more than CB_MASS_SWEEP_SHARE of its memories (at least
    CB_MEMORY_EXPIRY_MASS_FLOOR) is left alone and named; exits 1 then, unless --allow-mass-sweep."""
    from common.kernel.errors import DomainError
    from common.storage.database import Database
    from common.storage.schema import migrations
    from common.text_models.embeddings.factory import build_embedding_provider
    from ingest_service.memories.maintenance import MemoryMaintenance
    from ingest_service.memories.writer import MemoryWriter
    from memory_service_tools.cli.cli_state import cli_state
    from memory_service_tools.cli.terminal import error_lines
    from memory_service_tools.cli.terminal import fail

    settings = cli_state(ctx).settings()
    provider = build_embedding_provider(settings)
    database = Database(settings, embedding_model=provider.model_id, prepare=migrations.apply)
    try:
        report = MemoryMaintenance(database, MemoryWriter(database, provider), settings).run(
            namespaces=tuple(namespaces or ()), allow_mass_sweep=allow_mass_sweep or None
        )
    except (DomainError, OSError) as exc:
        fail(error_lines(exc))
    finally:
        database.close()
    result: dict[str, object] = {  # lowerCamelCase, as the proto3 JSON the other --json outputs print
        "movedToWarm": report.moved_to_warm,
        "movedToCold": report.moved_to_cold,
        "expiredDeleted": report.expired_deleted,
        "auditEventIds": list(report.audit_event_ids),
    }
    if report.refused:  # omitted when empty, as proto3 JSON omits an empty list
        result["refused"] = [
            {"namespace": item.namespace, "wouldSweep": item.due, "total": item.total}
            for item in report.refused
        ]
    if as_json:
        typer.echo(json.dumps(result, indent=2))
    else:
        out.print(
            f"{report.moved_to_warm} moved to warm, {report.moved_to_cold} moved to cold, "
            f"{report.expired_deleted} expired memories deleted"
        )
        for item in report.refused:
            err.print(
                escape(
                    f"{item.namespace}: refused as a mass sweep: {item.due} of {item.total} memories would "
                    "expire; nothing expired there (add --allow-mass-sweep if the clock is right)"
                )
            )
    if report.refused:
        raise typer.Exit(1)

"""``cb watch``: follows a namespace's change feed (ChangeFeedService.WatchChanges, query_service).

One line per change (``--json``: one proto3 JSON object per line, for pipes), resumed automatically after
the last cursor when the stream breaks (`MemoryClient.iter_changes`); ``--limit`` and ``--seconds`` end it.
"""

from __future__ import annotations

import json
import time
from typing import Annotated

import typer
from google.protobuf import json_format

from common.tooling.cli.option_types import JsonOption, NamespaceOption
from common.tooling.cli.rpc_output import memory_client
from common.tooling.cli.terminal import err, reported_errors


def watch(
    ctx: typer.Context,
    namespace: NamespaceOption,
    resume_after: Annotated[int, typer.Option("--resume-after", min=0, help="last cursor processed")] = 0,
    event_type: Annotated[
        list[str] | None, typer.Option("--type", help="event type or family (fact.superseded, fact.*); repeatable")
    ] = None,
    prefix: Annotated[
        list[str] | None, typer.Option("--prefix", help="item or subject key prefix; repeatable")
    ] = None,
    predicate: Annotated[list[str] | None, typer.Option("--predicate", help="fact predicate; repeatable")] = None,
    limit: Annotated[int, typer.Option("--limit", min=0, help="stop after this many changes; 0 = never")] = 0,
    seconds: Annotated[float, typer.Option("--seconds", min=0, help="stop after this long; 0 = never")] = 0,
    as_json: JsonOption = False,
) -> None:
    """Print the changes of a namespace as they commit (replaying those after --resume-after first)."""
    client = memory_client(ctx)
    deadline = time.monotonic() + seconds if seconds else None
    count = 0

    def stop() -> bool:
        return (limit > 0 and count >= limit) or (deadline is not None and time.monotonic() >= deadline)

    changes = client.iter_changes(
        namespace,
        resume_after=resume_after,
        event_types=event_type or (),
        key_prefixes=prefix or (),
        predicates=predicate or (),
        heartbeat_seconds=1 if deadline is not None else 0,
        on_resume=lambda cursor, code: err.print(f"stream ended ({code}); resuming after cursor {cursor}"),
        stop=stop,
    )
    with reported_errors():
        for change in changes:
            count += 1
            if as_json:
                typer.echo(json.dumps(json_format.MessageToDict(change), ensure_ascii=False))
            else:
                typer.echo(
                    f"{change.cursor}\t{change.event_type}\t{change.item_key}"
                    + (f"\t{change.subject_key} {change.predicate} {change.object_key}" if change.predicate else "")
                )
            if stop():
                break

"""``cb watch``: follows a namespace's change feed (ChangeFeedService.WatchChanges, query_service);
``cb webhook create|list|delete|dead-letters|replay``: its webhooks (WebhookService, ingest_service).

``cb watch`` prints one line per change (``--json``: one proto3 JSON object per line, for pipes), resumed
automatically after the last cursor when the stream breaks (`MemoryClient.iter_changes`); ``--limit`` and
``--seconds`` end it.
"""

from __future__ import annotations

import json
import time
from typing import Annotated

import typer
from google.protobuf import json_format
from rich.markup import escape

from memory_service_grpc_client.memory.v1 import webhook_service_pb2
from memory_service_tools.cli.option_types import JsonOption
from memory_service_tools.cli.option_types import NamespaceOption
from memory_service_tools.cli.option_types import WriteNamespaceOption
from memory_service_tools.cli.rpc_output import call_and_print
from memory_service_tools.cli.rpc_output import memory_client
from memory_service_tools.cli.terminal import err
from memory_service_tools.cli.terminal import out
from memory_service_tools.cli.terminal import print_lines
from memory_service_tools.cli.terminal import reported_errors

webhook_app = typer.Typer(
    help="Webhooks of the change feed: CloudEvents posted to an HTTP endpoint.", no_args_is_help=True
)
TypesOption = Annotated[
    list[str] | None,
    typer.Option("--event-type", help="event type or family (fact.superseded, fact.*); repeatable"),
]
PrefixOption = Annotated[
    list[str] | None, typer.Option("--prefix", help="item or subject key prefix; repeatable")
]
PredicateOption = Annotated[list[str] | None, typer.Option("--predicate", help="fact predicate; repeatable")]


def watch(
    ctx: typer.Context,
    namespace: NamespaceOption,
    resume_after: Annotated[int, typer.Option("--resume-after", min=0, help="last cursor processed")] = 0,
    event_type: TypesOption = None,
    prefix: PrefixOption = None,
    predicate: PredicateOption = None,
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
                    + (
                        f"\t{change.subject_key} {change.predicate} {change.object_key}"
                        if change.predicate
                        else ""
                    )
                )
            if stop():
                break


@webhook_app.command("create")
def webhook_create(
    ctx: typer.Context,
    url: Annotated[str, typer.Argument(help="the endpoint, http:// or https://")],
    namespace: WriteNamespaceOption,
    event_type: TypesOption = None,
    prefix: PrefixOption = None,
    predicate: PredicateOption = None,
    as_json: JsonOption = False,
) -> None:
    """Subscribe an endpoint to the namespace's changes; prints the id and the signing secret (shown once)."""
    request = webhook_service_pb2.CreateWebhookSubscriptionRequest(
        namespace=namespace,
        target_url=url,
        event_types=event_type or [],
        key_prefixes=prefix or [],
        predicates=predicate or [],
    )

    def render(response: webhook_service_pb2.CreateWebhookSubscriptionResponse) -> None:
        out.print(escape(f"{response.subscription.subscription_id}\t{response.secret}"))
        err.print("keep the secret: it signs every delivery and is not shown again")

    call_and_print(memory_client(ctx).create_webhook_subscription, request, as_json=as_json, render=render)


@webhook_app.command("list")
def webhook_list(ctx: typer.Context, namespace: NamespaceOption, as_json: JsonOption = False) -> None:
    """List the namespace's webhook subscriptions."""

    def render(response: webhook_service_pb2.ListWebhookSubscriptionsResponse) -> None:
        lines = [
            f"{sub.subscription_id}\t{sub.target_url}\tcursor {sub.cursor}\t"
            + " ".join([*sub.event_types, *sub.key_prefixes, *sub.predicates])
            for sub in response.subscriptions
        ]
        print_lines(lines, none="no webhook subscriptions")

    request = webhook_service_pb2.ListWebhookSubscriptionsRequest(namespace=namespace)
    call_and_print(memory_client(ctx).list_webhook_subscriptions, request, as_json=as_json, render=render)


@webhook_app.command("delete")
def webhook_delete(
    ctx: typer.Context,
    subscription_id: Annotated[str, typer.Argument(help="the subscription, whk-...")],
    namespace: WriteNamespaceOption,
    as_json: JsonOption = False,
) -> None:
    """Delete a subscription with its pending deliveries and dead letters."""
    request = webhook_service_pb2.DeleteWebhookSubscriptionRequest(
        namespace=namespace, subscription_id=subscription_id
    )
    call_and_print(
        memory_client(ctx).delete_webhook_subscription,
        request,
        as_json=as_json,
        render=lambda _: err.print(escape(f"{subscription_id}: deleted")),
    )


@webhook_app.command("dead-letters")
def webhook_dead_letters(
    ctx: typer.Context,
    namespace: NamespaceOption,
    subscription_id: Annotated[str, typer.Option("--subscription", help="only this subscription's")] = "",
    page_size: Annotated[int, typer.Option("--page-size", min=1, max=1000)] = 100,
    as_json: JsonOption = False,
) -> None:
    """List deliveries whose attempts ran out (admin)."""

    def render(response: webhook_service_pb2.ListDeadLettersResponse) -> None:
        lines = [
            f"{letter.subscription_id}\t{letter.event_id}\t{letter.cursor}\t{letter.event_type}"
            f"\t{letter.attempts} attempts\t{letter.last_error}"
            for letter in response.dead_letters
        ]
        print_lines(lines, none="no dead letters")

    request = webhook_service_pb2.ListDeadLettersRequest(
        namespace=namespace, subscription_id=subscription_id, page_size=page_size
    )
    call_and_print(memory_client(ctx).list_dead_letters, request, as_json=as_json, render=render)


@webhook_app.command("replay")
def webhook_replay(
    ctx: typer.Context,
    subscription_id: Annotated[str, typer.Argument(help="the subscription, whk-...")],
    namespace: WriteNamespaceOption,
    event_id: Annotated[
        list[str] | None, typer.Option("--event", help="only this event id; repeatable")
    ] = None,
    all_dead_letters: Annotated[
        bool, typer.Option("--all", help="replay every dead letter of the subscription")
    ] = False,
    as_json: JsonOption = False,
) -> None:
    """Put dead letters back in the queue (admin): --event ids, or --all."""
    request = webhook_service_pb2.ReplayDeadLettersRequest(
        namespace=namespace,
        subscription_id=subscription_id,
        event_ids=event_id or [],
        all_dead_letters=all_dead_letters,
    )
    call_and_print(
        memory_client(ctx).replay_dead_letters,
        request,
        as_json=as_json,
        render=lambda response: err.print(f"{response.replayed} dead letters replayed"),
    )

"""``cb erase``, ``cb receipt``, ``cb hold ...`` and ``cb retention ...``: DataProtectionService
(docs/how-to/data-protection.md)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape

from memory_service_grpc_client.memory.v1 import data_protection_service_pb2 as dp
from memory_service_tools.cli.option_types import JsonOption
from memory_service_tools.cli.option_types import WriteNamespaceOption
from memory_service_tools.cli.rpc_output import call_and_print
from memory_service_tools.cli.rpc_output import memory_client
from memory_service_tools.cli.rpc_output import print_json
from memory_service_tools.cli.terminal import err
from memory_service_tools.cli.terminal import out
from memory_service_tools.cli.terminal import print_lines
from memory_service_tools.cli.terminal import reported_errors

hold_app = typer.Typer(
    help="legal holds: stop every deletion of a namespace or subject", no_args_is_help=True
)
retention_app = typer.Typer(help="retention rules per data class of a namespace", no_args_is_help=True)


def _print_receipt(response: dp.EraseSubjectResponse | dp.GetErasureReceiptResponse) -> None:
    receipt = response.receipt
    label = "preview (nothing erased)" if receipt.validate_only else f"receipt {receipt.receipt_id}"
    out.print(escape(f"{label}: {receipt.selector_kind} in {receipt.namespace} by {receipt.principal}"))
    for kind, count in sorted(receipt.counts.items()):
        out.print(escape(f"  {kind:28} {count}"))
    out.print(escape(f"  matched (sha256 of salt {receipt.salt} + value): {', '.join(receipt.match_hashes)}"))
    if receipt.blocked_by_hold:
        out.print(
            escape(
                f"  refused while legal hold {receipt.blocked_by_hold} stands: an admin must lift it first"
            )
        )


def erase(
    ctx: typer.Context,
    namespace: WriteNamespaceOption,
    key: Annotated[str, typer.Option("--key", help="the subject's node key, e.g. person:alice")] = "",
    value: Annotated[str, typer.Option("--value", help="an exact personal-data value (e-mail, phone)")] = "",
    memory_user: Annotated[str, typer.Option("--memory-user", help="a memory user id")] = "",
    reason: Annotated[str, typer.Option("--reason", help="why (only its length is kept)")] = "",
    yes: Annotated[bool, typer.Option("--yes", help="erase for real (without it: a preview)")] = False,
    as_json: JsonOption = False,
) -> None:
    """Erase one data subject everywhere in a namespace and print the receipt (admin right).
    Without --yes it only previews what would go."""
    request = dp.EraseSubjectRequest(
        namespace=namespace,
        node_key=key,
        value=value,
        memory_user=memory_user,
        reason=reason,
        confirm=yes,
        validate_only=not yes,
    )
    call_and_print(memory_client(ctx).erase_subject, request, as_json=as_json, render=_print_receipt)


def receipt(
    ctx: typer.Context,
    receipt_id: Annotated[str, typer.Argument(help="the receipt id (era-...)")],
    namespace: WriteNamespaceOption,
    as_json: JsonOption = False,
) -> None:
    """Print a stored erasure receipt."""
    request = dp.GetErasureReceiptRequest(namespace=namespace, receipt_id=receipt_id)
    call_and_print(memory_client(ctx).get_erasure_receipt, request, as_json=as_json, render=_print_receipt)


def _hold_line(hold: dp.LegalHold) -> str:
    what = hold.subject_key or "(whole namespace)"
    state = f"lifted by {hold.lift_principal}" if hold.lift_principal else "active"
    return f"{hold.hold_id}  {what}  {state}  set by {hold.create_principal}: {hold.reason}"


def _print_hold(response: dp.CreateLegalHoldResponse | dp.LiftLegalHoldResponse) -> None:
    out.print(escape(_hold_line(response.hold)))


@hold_app.command("set")
def hold_set(
    ctx: typer.Context,
    namespace: WriteNamespaceOption,
    subject: Annotated[
        str, typer.Option("--subject", help="a node key, memory-user:<id> or value; none: all")
    ] = "",
    reason: Annotated[str, typer.Option("--reason", help="the matter or case")] = "",
    as_json: JsonOption = False,
) -> None:
    """Place a legal hold (admin right)."""
    request = dp.CreateLegalHoldRequest(namespace=namespace, subject_key=subject, reason=reason)
    call_and_print(memory_client(ctx).create_legal_hold, request, as_json=as_json, render=_print_hold)


@hold_app.command("lift")
def hold_lift(
    ctx: typer.Context,
    hold_id: Annotated[str, typer.Argument(help="the hold id (hold-...)")],
    namespace: WriteNamespaceOption,
    as_json: JsonOption = False,
) -> None:
    """Lift a legal hold (admin right)."""
    request = dp.LiftLegalHoldRequest(namespace=namespace, hold_id=hold_id)
    call_and_print(memory_client(ctx).lift_legal_hold, request, as_json=as_json, render=_print_hold)


@hold_app.command("list")
def hold_list(
    ctx: typer.Context,
    namespace: WriteNamespaceOption,
    include_lifted: Annotated[bool, typer.Option("--include-lifted", help="lifted holds too")] = False,
    as_json: JsonOption = False,
) -> None:
    """List the legal holds of a namespace."""
    request = dp.ListLegalHoldsRequest(namespace=namespace, include_lifted=include_lifted)

    def render(response: dp.ListLegalHoldsResponse) -> None:
        print_lines([_hold_line(hold) for hold in response.holds], none="no holds")

    call_and_print(memory_client(ctx).list_legal_holds, request, as_json=as_json, render=render)


@retention_app.command("set")
def retention_set(
    ctx: typer.Context,
    data_class: Annotated[
        str,
        typer.Argument(
            help="observations, memories, documents, personal_data, context_traces or audit_events"
        ),
    ],
    days: Annotated[float, typer.Option("--days", help="maximum age in days")],
    namespace: WriteNamespaceOption,
    selector: Annotated[
        str,
        typer.Option(
            "--selector", help="observation kind, memory tier, document collection or personal-data category"
        ),
    ] = "",
    as_json: JsonOption = False,
) -> None:
    """Create or replace a retention rule (admin right)."""
    rule = dp.RetentionRule(namespace=namespace, data_class=data_class, selector=selector)
    rule.max_age.FromTimedelta(timedelta(days=days))
    call_and_print(
        memory_client(ctx).set_retention_rule,
        dp.SetRetentionRuleRequest(rule=rule),
        as_json=as_json,
        render=lambda r: err.print(
            escape(f"kept: {data_class}/{selector or '*'} for {_age(timedelta(days=days))}")
        ),
    )


@retention_app.command("delete")
def retention_delete(
    ctx: typer.Context,
    data_class: Annotated[str, typer.Argument(help="the rule's data class")],
    namespace: WriteNamespaceOption,
    selector: Annotated[str, typer.Option("--selector", help="the rule's selector")] = "",
    as_json: JsonOption = False,
) -> None:
    """Remove a retention rule: data of that class is kept again."""
    request = dp.DeleteRetentionRuleRequest(namespace=namespace, data_class=data_class, selector=selector)
    call_and_print(
        memory_client(ctx).delete_retention_rule,
        request,
        as_json=as_json,
        render=lambda r: err.print("removed"),
    )


@retention_app.command("show")
def retention_show(
    ctx: typer.Context,
    namespace: WriteNamespaceOption,
    as_json: JsonOption = False,
) -> None:
    """Explain what the retention rules will delete and when: each rule, its cut-off as of now, how many
    items are past it (the worker's next round deletes them), and a hold that stops it."""

    def render(response: dp.PreviewRetentionResponse) -> None:
        if not response.previews:
            err.print("no retention rules: everything is kept")
            return
        for p in response.previews:
            age = p.rule.max_age.ToTimedelta()
            cutoff = p.cutoff_time.ToDatetime().strftime("%Y-%m-%dT%H:%M:%SZ")
            line = (
                f"{p.rule.data_class}/{p.rule.selector or '*'}: kept {_age(age)}; items older than"
                f" {cutoff} go: {p.due_count} due now"
            )
            if p.blocked_by_hold:
                line += f" (stopped by legal hold {p.blocked_by_hold})"
            out.print(escape(line))

    call_and_print(
        memory_client(ctx).preview_retention,
        dp.PreviewRetentionRequest(namespace=namespace),
        as_json=as_json,
        render=render,
    )


ARCHIVE_TIMEOUT_SECONDS = 3600.0
IMPORT_PIECE_BYTES = 256 * 1024


def export(
    ctx: typer.Context,
    namespace: WriteNamespaceOption,
    output: Annotated[Path, typer.Option("--output", "-o", help="archive file to write (JSON lines)")],
    key: Annotated[str, typer.Option("--key", help="only this subject's node key, e.g. person:alice")] = "",
    value: Annotated[str, typer.Option("--value", help="only this personal-data value (e-mail, phone)")] = "",
    memory_user: Annotated[str, typer.Option("--memory-user", help="only this memory user's data")] = "",
) -> None:
    """Export a namespace as a versioned archive (admin right); items your token's scopes do not reach
    are left out, and the archive's header says so. With --key, --value or --memory-user: only what an
    erasure of that subject would match (a data-subject access request)."""
    client = memory_client(ctx)
    written = 0
    request = dp.ExportNamespaceRequest(
        namespace=namespace, node_key=key, value=value, memory_user=memory_user
    )
    with reported_errors(), output.open("wb") as sink:
        for piece in client.export_namespace(request, timeout=ARCHIVE_TIMEOUT_SECONDS):
            sink.write(piece)
            written += len(piece)
    with output.open("rb") as source:
        header = json.loads(source.readline() or b"{}")
    note = " (scopes filtered: hidden items left out)" if header.get("scopes_filtered") else ""
    err.print(escape(f"wrote {written} bytes to {output}{note}"))


def import_(
    ctx: typer.Context,
    archive: Annotated[Path, typer.Argument(help="archive file made by cb export")],
    namespace: WriteNamespaceOption,
    as_json: JsonOption = False,
) -> None:
    """Import an archive into this service's database (admin right): the same ids; what exists stays."""

    def messages() -> Iterator[dp.ImportNamespaceRequest]:
        with archive.open("rb") as source:
            first = True
            while piece := source.read(IMPORT_PIECE_BYTES):
                yield dp.ImportNamespaceRequest(namespace=namespace if first else "", data=piece)
                first = False

    client = memory_client(ctx)
    with reported_errors():
        response = client.import_namespace(messages(), timeout=ARCHIVE_TIMEOUT_SECONDS)
    if as_json:
        print_json(response)
        return
    for kind, count in sorted(response.read_counts.items()):
        out.print(escape(f"{kind:18} read {count:>8}  written {response.written_counts.get(kind, 0):>8}"))


__all__ = ["erase", "export", "hold_app", "import_", "receipt", "retention_app"]


def _age(age: timedelta) -> str:
    """A rule's maximum age as a person reads it: "30 days", "1 day", "12 hours", "1.5 days"."""
    days = age.total_seconds() / 86400
    if days < 1:
        hours = round(age.total_seconds() / 3600, 1)
        return f"{hours:g} hour{'' if hours == 1 else 's'}"
    return f"{round(days, 2):g} day{'' if days == 1 else 's'}"

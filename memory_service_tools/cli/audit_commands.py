"""``cb audit``: the audit trail of a namespace (AuditService.ListAuditEvents on query_service).

Answers an auditor's questions: who read personal data (``--action pii_access``), what was deleted and
by whom (``--action delete``), in a period (``--since`` / ``--until``). Every page is fetched and printed
as one list, newest first; ``--json`` prints it as one ListAuditEventsResponse in proto3 JSON. The call
needs the admin right on the namespace (docs/how-to/audit.md).
"""

from __future__ import annotations

import json
from typing import Annotated

import typer
from google.protobuf import timestamp_pb2
from rich.markup import escape

from common.grpc.proto_mapping import instant
from common.grpc.proto_mapping import struct_to_dict
from common.kernel.identifiers import canonical_instant
from memory_service_grpc_client.memory.v1 import audit_service_pb2
from memory_service_tools.cli.option_types import JsonOption
from memory_service_tools.cli.option_types import NamespaceOption
from memory_service_tools.cli.option_types import parse_instant
from memory_service_tools.cli.rpc_output import call_and_print
from memory_service_tools.cli.rpc_output import memory_client
from memory_service_tools.cli.terminal import column_table
from memory_service_tools.cli.terminal import out
from memory_service_tools.cli.terminal import print_wide
from memory_service_tools.cli.terminal import printed_none


def _instant_option(text: str | None, hint: str) -> timestamp_pb2.Timestamp | None:
    if text is None or not text.strip():
        return None
    try:
        return parse_instant(text)
    except ValueError as exc:
        raise typer.BadParameter(str(exc), param_hint=hint) from exc


def audit(
    ctx: typer.Context,
    namespace: NamespaceOption,
    action: Annotated[
        str, typer.Option("--action", help="only this action: pii_access, delete, redact, or an explicit one")
    ] = "",
    principal: Annotated[
        str, typer.Option("--principal", help="only events recorded by this principal")
    ] = "",
    node_key: Annotated[
        str, typer.Option("--node-key", help="only events about this node (target key or a key it lists)")
    ] = "",
    since: Annotated[
        str | None, typer.Option("--since", help="ISO 8601 instant, inclusive (no zone: UTC)")
    ] = None,
    until: Annotated[
        str | None, typer.Option("--until", help="ISO 8601 instant, exclusive (no zone: UTC)")
    ] = None,
    page_size: Annotated[int, typer.Option("--page-size", min=1, max=1000)] = 500,
    as_json: JsonOption = False,
) -> None:
    """List the audit events of a namespace, newest first (needs the admin right on it)."""
    request = audit_service_pb2.ListAuditEventsRequest(
        namespace=namespace,
        action=action,
        principal=principal,
        node_key=node_key,
        start_time=_instant_option(since, "--since"),
        end_time=_instant_option(until, "--until"),
        page_size=page_size,
    )
    client = memory_client(ctx)

    def every_page(
        first: audit_service_pb2.ListAuditEventsRequest,
    ) -> audit_service_pb2.ListAuditEventsResponse:
        return audit_service_pb2.ListAuditEventsResponse(events=list(client.iter_audit_events(first)))

    call_and_print(every_page, request, as_json=as_json, render=_print_events)


def _print_events(response: audit_service_pb2.ListAuditEventsResponse) -> None:
    if printed_none(response.events, "no audit events"):
        return
    table = column_table("time", "action", "principal", "target", "details", "trace")
    for event in response.events:
        details = json.dumps(struct_to_dict(event.details), ensure_ascii=False, sort_keys=True)
        table.add_row(
            canonical_instant(instant(event.record_time)),
            escape(event.action),
            escape(event.principal),
            escape(event.target_key),
            escape(details if len(details) <= 200 else details[:199] + "…"),
            escape(event.trace_id),
        )
    print_wide(table)
    out.print(f"{len(response.events)} events")

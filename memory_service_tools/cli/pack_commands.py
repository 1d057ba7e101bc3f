"""``cb pack register|enable``: domain packs (DomainPackService on ingest_service)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from google.protobuf import json_format
from rich.markup import escape

from memory_service_grpc_client.memory.v1 import domain_pack_service_pb2
from memory_service_tools.cli.option_types import JsonOption
from memory_service_tools.cli.option_types import WriteNamespaceOption
from memory_service_tools.cli.option_types import input_file_option
from memory_service_tools.cli.rpc_output import call_and_print
from memory_service_tools.cli.rpc_output import memory_client
from memory_service_tools.cli.terminal import err

pack_app = typer.Typer(
    help="Domain packs: register a versioned pack, enable packs in a namespace.", no_args_is_help=True
)


@pack_app.command("register")
def pack_register(
    ctx: typer.Context,
    file: Annotated[Path, input_file_option("the pack as JSON {name, version, kinds, relations}")],
    as_json: JsonOption = False,
) -> None:
    """Register a domain pack (DomainPackService.RegisterPackage). A version is immutable: the same content
    again is a no-op, other content under the same version is ALREADY_EXISTS."""
    try:
        package = json_format.Parse(file.read_text("utf-8"), domain_pack_service_pb2.DomainPackage())
    except (json_format.ParseError, UnicodeDecodeError) as exc:
        raise typer.BadParameter(
            f"{file}: not a domain pack in proto3 JSON: {exc}", param_hint="--file"
        ) from exc

    def render(response: domain_pack_service_pb2.RegisterPackageResponse) -> None:
        state = "registered" if response.created else "already registered with this content"
        err.print(escape(f"{package.name}@{package.version}: {state}"))

    request = domain_pack_service_pb2.RegisterPackageRequest(package=package)
    call_and_print(memory_client(ctx).register_package, request, as_json=as_json, render=render)


@pack_app.command("enable")
def pack_enable(
    ctx: typer.Context,
    packages: Annotated[
        list[str], typer.Argument(help="packs as name@version, e.g. software-delivery@1.0.0")
    ],
    namespace: WriteNamespaceOption,
    strict: Annotated[
        bool, typer.Option("--strict/--no-strict", help="reject writes outside the packs")
    ] = False,
    as_json: JsonOption = False,
) -> None:
    """Set the packs of a namespace (DomainPackService.SetNamespaceKinds); replaces the previous set."""
    refs = []
    for text in packages:
        name, separator, version = text.partition("@")
        if not separator or not name or not version:
            raise typer.BadParameter(
                f"{text!r} is not name@version (e.g. software-delivery@1.0.0)", param_hint="PACKAGES"
            )
        refs.append(domain_pack_service_pb2.PackageRef(name=name, version=version))

    def render(response: domain_pack_service_pb2.SetNamespaceKindsResponse) -> None:
        mode = "strict" if strict else "non-strict"
        err.print(escape(f"{namespace}: {', '.join(packages)} enabled ({mode})"))

    request = domain_pack_service_pb2.SetNamespaceKindsRequest(
        namespace=namespace, packages=refs, strict=strict
    )
    call_and_print(memory_client(ctx).set_namespace_kinds, request, as_json=as_json, render=render)

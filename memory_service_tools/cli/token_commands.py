"""``cb token create|list``: bearer tokens of the tokens file (it holds their sha256 hashes only).

The file is ``--tokens-file`` or ``CB_TOKENS_FILE``; a new token is printed once on stdout.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape

from memory_service_tools.cli.cli_state import cli_state
from memory_service_tools.cli.option_types import JsonOption
from memory_service_tools.cli.terminal import column_table
from memory_service_tools.cli.terminal import err
from memory_service_tools.cli.terminal import fail
from memory_service_tools.cli.terminal import out
from memory_service_tools.cli.terminal import print_wide
from memory_service_tools.cli.terminal import printed_none

token_app = typer.Typer(
    help="Bearer tokens: the tokens file holds their sha256 hashes only.", no_args_is_help=True
)

TokensFileOption = Annotated[
    Path | None,
    typer.Option("--tokens-file", help="tokens file (default: CB_TOKENS_FILE)", dir_okay=False),
]


def _tokens_path(ctx: typer.Context, tokens_file: Path | None) -> Path:
    if tokens_file is not None:
        return tokens_file
    configured = cli_state(ctx).settings().tokens_file
    if not configured:
        fail(["error: no tokens file: pass --tokens-file or set CB_TOKENS_FILE"])
    return Path(configured)


def parse_namespace_grant(text: str) -> tuple[str, list[str]]:
    """``"NS:read,write"`` -> ``("NS", ["read", "write"])`` (the last ``:`` separates the rights).

    Raises:
        ValueError: no ``:``, an empty namespace, no right, or an unknown right.
    """
    from common.auth.principals import Right

    namespace, sep, rights_text = text.rpartition(":")
    if not sep or not namespace.strip():
        raise ValueError(f"{text!r}: expected NAMESPACE:RIGHT[,RIGHT...], e.g. debian:read,write")
    rights = [r.strip() for r in rights_text.split(",") if r.strip()]
    if not rights:
        raise ValueError(f"{text!r}: list at least one right (read, write, admin)")
    return namespace.strip(), [Right.parse(r).label for r in rights]


@token_app.command("create")
def token_create(
    ctx: typer.Context,
    principal: Annotated[str, typer.Option(help="who the token stands for, e.g. ci-loader")],
    namespaces: Annotated[
        list[str] | None,
        typer.Option(
            "--namespace",
            "-n",
            help="NS:read,write,admin (repeatable; admin implies write implies read; '*' = every namespace)",
        ),
    ] = None,
    scopes: Annotated[
        list[str] | None,
        typer.Option("--scope", help="visibility scope the caller may see: workspace:x or principal:y"),
    ] = None,
    pii_clearance: Annotated[
        bool, typer.Option("--pii-clearance", help="may receive personal data unmasked")
    ] = False,
    note: Annotated[str | None, typer.Option(help="free text kept next to the hash")] = None,
    organization: Annotated[
        str | None, typer.Option(help="memory scope: the token's organisation (with --environment, --user)")
    ] = None,
    environment: Annotated[
        str | None, typer.Option(help="memory scope: development | staging | production")
    ] = None,
    user: Annotated[str | None, typer.Option(help="memory scope: the user the token acts for")] = None,
    tokens_file: TokensFileOption = None,
) -> None:
    """Create a token: prints it once on stdout and appends only its sha256 to the tokens file.

    The file is created with mode 0600 when missing. Running services pick the new token up within
    a second, without a restart. With ``--organization acme --environment production --user 8821`` the
    token acts for that user's memory records (docs/how-to/memory-records.md) and, unless a ``--namespace``
    names it, is granted read and write on ``org:acme:env:production`` (which covers its projects).
    """
    from common.auth.principals import Right
    from common.auth.tokens_file import TokensFileError
    from memory_service_tools.token_writer import add_token

    path = _tokens_path(ctx, tokens_file)
    grants: dict[str, list[Right]] = {}
    memory_scope = None
    if organization is not None or environment is not None or user is not None:
        if organization is None or environment is None or user is None:
            raise typer.BadParameter("--organization, --environment and --user go together")
        memory_scope = (organization, environment, user)
    if not namespaces and memory_scope is None:
        raise typer.BadParameter("give at least one --namespace", param_hint="--namespace")
    for text in namespaces or []:
        try:
            namespace, rights = parse_namespace_grant(text)
        except ValueError as exc:
            raise typer.BadParameter(str(exc), param_hint="--namespace") from exc
        grants.setdefault(namespace, []).extend(Right.parse(r) for r in rights)
    if memory_scope is not None:
        from common.kernel.memory_names import memory_namespace

        grants.setdefault(memory_namespace(organization or "", environment or ""), [Right.READ, Right.WRITE])
    try:
        token, entry = add_token(
            path,
            principal=principal,
            namespaces=grants,
            scopes=scopes or [],
            pii_clearance=pii_clearance,
            note=note,
            memory_scope=memory_scope,
        )
    except (TokensFileError, OSError) as exc:
        fail([f"error: {exc}"])
    granted = ", ".join(f"{ns}:{','.join(rights)}" for ns, rights in entry.namespaces.items())
    err.print(
        escape(f"token for {entry.principal} ({granted}) added to {path}; it is shown only once:"),
        soft_wrap=True,
    )
    typer.echo(token)


@token_app.command("list")
def token_list(ctx: typer.Context, tokens_file: TokensFileOption = None, as_json: JsonOption = False) -> None:
    """List the principals of the tokens file with their rights, scopes and PII clearance.

    ``--json`` prints ``{"tokens_file": path, "tokens": [{principal, namespaces, scopes, pii_clearance,
    memory_scope, created, note}]}`` (never the hashes); ``memory_scope`` is ``{organization, environment,
    user}`` for a token with a memory scope, else null. The table shows it as ``organisation/environment/user``.
    """
    from common.auth.tokens_file import TokensFileError
    from common.auth.tokens_file import read_tokens_file

    path = _tokens_path(ctx, tokens_file)
    try:
        parsed = read_tokens_file(path)
    except TokensFileError as exc:
        fail([f"error: {exc}"])
    if as_json:
        entries = [
            {
                "principal": entry.principal,
                "namespaces": entry.namespaces,
                "scopes": entry.scopes,
                "pii_clearance": entry.pii_clearance,
                "memory_scope": (
                    {"organization": entry.organization, "environment": entry.environment, "user": entry.user}
                    if entry.user is not None
                    else None
                ),
                "created": entry.created,
                "note": entry.note,
            }
            for entry in parsed.tokens
        ]
        typer.echo(json.dumps({"tokens_file": str(path), "tokens": entries}, ensure_ascii=False, indent=2))
        return
    if printed_none(parsed.tokens, f"no tokens in {escape(str(path))}"):
        return
    table = column_table("principal", "namespaces", "scopes", "pii", "memory scope", "created", "note")
    for entry in parsed.tokens:
        table.add_row(
            escape(entry.principal),
            escape("\n".join(f"{ns}: {', '.join(rights)}" for ns, rights in entry.namespaces.items())),
            escape("\n".join(entry.scopes)),
            "cleared" if entry.pii_clearance else "",
            escape(
                f"{entry.organization}/{entry.environment}/{entry.user}" if entry.user is not None else ""
            ),
            escape(entry.created or ""),
            escape(entry.note or ""),
        )
    print_wide(table)  # principals and scopes are copied from it: never cut or broken over lines
    out.print(f"{len(parsed.tokens)} tokens in {escape(str(path))}")

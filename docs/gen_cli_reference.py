"""Generates the CLI reference (docs/reference/cli.md) from the typer application at build time.

typer.main.get_command turns the app into its click command tree; each command's help text (Markdown,
the app's rich_markup_mode), usage and parameters are read from there, so the page is what `cb --help`
says. Typer carries its own copy of click, so commands and parameters are told apart by what they have
(``list_commands``, ``param_type_name``), not by click's classes.
"""

from __future__ import annotations

import importlib
import io
from typing import Any

import mkdocs_gen_files
import typer.main

# The module that holds the typer app `app` (the `cb` entry point in pyproject.toml).
CLI_MODULE = "memory_service_tools.cli"

PAGE = "reference/cli.md"


def escape(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def parameter_row(param: Any, ctx: Any) -> str | None:
    if param.param_type_name == "option":
        if param.hidden or param.name == "help":
            return None
        names = ", ".join(f"`{n}`" for n in [*param.opts, *param.secondary_opts])
        kind = "flag" if param.is_flag else param.display_type(ctx).strip("<>")
        default = None if param.required else param.default
        shown = "" if default in (None, "", (), False) or callable(default) else f"`{default}`"
        if param.envvar:
            shown = (shown + " " if shown else "") + f"env `{param.envvar}`"
        return f"| {names} | {kind} | {'yes' if param.required else ''} | {shown} | {escape(param.help or '')} |"
    if param.param_type_name == "argument":
        kind = param.display_type(ctx).strip("<>") + (" ..." if param.nargs == -1 else "")
        help_text = getattr(param, "help", None) or ""
        return f"| `{param.name.upper()}` | {kind} | {'yes' if param.required else ''} |  | {escape(help_text)} |"
    return None


def render(out: io.StringIO, command: Any, path: list[str], parent: Any) -> None:
    ctx = command.context_class(command, info_name=path[-1], parent=parent)
    level = "#" * min(len(path) + 1, 4)
    out.write(f"{level} `{' '.join(path)}`\n\n")
    if command.help:
        out.write(command.help.strip() + "\n\n")
    pieces = command.collect_usage_pieces(ctx)
    out.write(f"```text\n{' '.join(path)} {' '.join(pieces)}\n```\n\n")
    rows = [row for row in (parameter_row(p, ctx) for p in command.get_params(ctx)) if row]
    if rows:
        out.write("| parameter | type | required | default | description |\n|---|---|---|---|---|\n")
        out.write("\n".join(rows) + "\n\n")
    if hasattr(command, "list_commands"):
        for name in command.list_commands(ctx):
            sub = command.get_command(ctx, name)
            if sub is not None and not sub.hidden:
                render(out, sub, [*path, name], ctx)


def main() -> None:
    app = importlib.import_module(CLI_MODULE).app
    root = typer.main.get_command(app)
    out = io.StringIO()
    out.write("# CLI: `cb`\n\n")
    out.write(
        "Generated at build time from the typer application, so it matches `cb COMMAND --help`. "
        "`make deps` installs `cb` into `.venv/bin`. Conventions shared by every command are in "
        "[CLI conventions](cli-conventions.md).\n\n"
    )
    render(out, root, ["cb"], None)
    with mkdocs_gen_files.open(PAGE, "w") as page:
        page.write(out.getvalue())


main()

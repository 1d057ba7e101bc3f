"""Generates the CLI reference (docs/reference/cli.md) from the typer application at build time.

typer.main.get_command turns the app into its click command tree; each command's help text (Markdown,
the app's rich_markup_mode), usage and parameters are read from there, so the page is what `cb --help`
says.
"""

from __future__ import annotations

import importlib
import io

import click
import mkdocs_gen_files
import typer.main

# The module that holds the typer app `app` (the `cb` entry point in pyproject.toml).
CLI_MODULE = "common.tooling.cli"

PAGE = "reference/cli.md"


def escape(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def parameter_row(param: click.Parameter, ctx: click.Context) -> str | None:
    if isinstance(param, click.Option):
        if param.hidden:
            return None
        names = ", ".join(f"`{n}`" for n in [*param.opts, *param.secondary_opts])
        kind = "flag" if param.is_flag else param.type.name
        default = param.get_default(ctx, call=False) if not param.required else None
        shown = "" if default in (None, "", (), False) or callable(default) else f"`{default}`"
        if param.envvar:
            shown = (shown + " " if shown else "") + f"env `{param.envvar}`"
        return f"| {names} | {kind} | {'yes' if param.required else ''} | {shown} | {escape(param.help or '')} |"
    if isinstance(param, click.Argument):
        kind = param.type.name + (" ..." if param.nargs == -1 else "")
        help_text = getattr(param, "help", None) or ""
        return f"| `{param.name.upper()}` | {kind} | {'yes' if param.required else ''} |  | {escape(help_text)} |"
    return None


def render(out: io.StringIO, command: click.Command, path: list[str], parent: click.Context | None) -> None:
    ctx = click.Context(command, info_name=path[-1], parent=parent)
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
    if isinstance(command, click.Group):
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

"""Generates the configuration table of docs/reference/configuration.md from the pydantic Settings.

The hand-written part of the page (docs/reference/configuration.md) stays as it is; the table of every
setting (environment variable, type, default, description) is appended at build time from the fields of
common.kernel.config.Settings, so a new or changed setting shows up without editing the page.
"""

from __future__ import annotations

import importlib
import typing

import mkdocs_gen_files
from pydantic import SecretStr

# The module and class of the settings.
SETTINGS_MODULE = "common.kernel.config"
SETTINGS_CLASSES = ("Settings",)

PAGE = "reference/configuration.md"


def type_name(annotation: object) -> str:
    if typing.get_origin(annotation) is typing.Literal:
        return " \\| ".join(f"`{v}`" for v in typing.get_args(annotation))
    if annotation is SecretStr:
        return "secret string"
    return getattr(annotation, "__name__", str(annotation))


def default_text(value: object) -> str:
    if isinstance(value, SecretStr):
        value = value.get_secret_value()
    if value in ("", None):
        return "(empty)"
    return f"`{value}`"


def rows(settings_class: type) -> list[str]:
    prefix = settings_class.model_config.get("env_prefix", "")
    lines = []
    for name, field in settings_class.model_fields.items():
        env = f"{prefix}{name}".upper()
        description = (field.description or "").replace("|", "\\|").replace("\n", " ")
        constraints = [
            f"{label} {getattr(m, attr)}"
            for m in field.metadata
            for attr, label in (("ge", ">="), ("gt", ">"), ("le", "<="), ("lt", "<"))
            if getattr(m, attr, None) is not None
        ]
        kind = type_name(field.annotation) + (f" ({', '.join(constraints)})" if constraints else "")
        lines.append(f"| `{env}` | {kind} | {default_text(field.default)} | {description} |")
    return lines


def main() -> None:
    module = importlib.import_module(SETTINGS_MODULE)
    with mkdocs_gen_files.open(PAGE, "a") as page:
        page.write("\n## Every setting\n\n")
        page.write(f"Generated at build time from `{SETTINGS_MODULE}`.\n\n")
        page.write("| variable | type | default | description |\n|---|---|---|---|\n")
        for class_name in SETTINGS_CLASSES:
            page.write("\n".join(rows(getattr(module, class_name))) + "\n")


main()

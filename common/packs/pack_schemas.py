"""What a domain pack may run on every write: its regular expressions and JSON Schemas, made safe.

A pack is written by one tenant and runs on the writes and queries of every namespace that enables it,
so nothing in it may stall a service or reach outside the pack:

* **Regular expressions** (``idPatterns``, key templates, and the ``pattern`` / ``patternProperties``
  keywords of ``naturalKey`` and ``attributes`` schemas) run on RE2 (the ``google-re2`` binding), whose
  matching time is linear in the text: ``(a+)+$`` against ``"a" * 34 + "!"`` answers at once instead of
  backtracking for minutes. What RE2 cannot run (backreferences, look-around) is refused at registration
  with the field that holds it; `compile_regex` is the one way pack code compiles a regular expression.
* **References**: ``$ref`` / ``$dynamicRef`` must point inside the schema that holds them (``#/$defs/x``,
  ``#anchor``) and resolve there; a nested ``$id`` (which would move the base of later references) is
  refused. Validators are built on a ``referencing`` registry whose retrieval always fails, so no
  ``http://`` or ``file://`` reference is ever fetched, at registration or on a write.
* **Size**: a pack is at most `MAX_PACK_BYTES` of JSON, each schema at most `MAX_SCHEMA_BYTES`, at most
  `MAX_PATTERNS_PER_PACK` regular expressions in all (docs/how-to/domain-packs.md).

jsonschema's own ``pattern``, ``patternProperties`` and ``additionalProperties`` keywords use Python's
backtracking ``re``; `PackSchemaValidator` replaces those three with RE2 versions of the same semantics
(JSON Schema 2020-12 §6.3.3, §10.3.2.2-3). ``unevaluatedProperties`` next to ``patternProperties`` would
still reach Python's ``re`` inside jsonschema, so that combination is refused.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Iterator
from typing import Any

import re2
from jsonschema import Draft202012Validator
from jsonschema import ValidationError
from jsonschema import validators
from jsonschema.exceptions import SchemaError
from referencing import Registry
from referencing import Resource
from referencing.exceptions import NoSuchResource
from referencing.exceptions import Unresolvable
from referencing.jsonschema import DRAFT202012

from common.kernel.errors import ViolationCollector

MAX_PACK_BYTES = 1024 * 1024
MAX_SCHEMA_BYTES = 64 * 1024
MAX_PATTERNS_PER_PACK = 1000
MAX_PATTERN_LENGTH = 1024

# Keywords whose values are data, not schemas: a "pattern" or "$ref" inside them is not one.
_DATA_KEYWORDS = frozenset({"const", "enum", "default", "examples", "title", "description", "$comment"})
_REFERENCE_KEYWORDS = ("$ref", "$dynamicRef")


class PackRegexError(ValueError):
    """A regular expression RE2 cannot compile (the message says why, e.g. ``invalid perl operator: (?=``)."""


def _options() -> Any:
    options = re2.Options()
    options.log_errors = False  # RE2 would print every refused pattern to stderr
    return options


_RE2_OPTIONS = _options()


@functools.lru_cache(maxsize=4096)
def compile_regex(pattern: str) -> Any:
    """``pattern`` compiled by RE2 (``search``/``match``/``finditer``/``groupdict``/``groupindex`` as in ``re``).

    Raises:
        PackRegexError: RE2 cannot run it, or it is longer than `MAX_PATTERN_LENGTH` characters.
    """
    if len(pattern) > MAX_PATTERN_LENGTH:
        raise PackRegexError(f"longer than {MAX_PATTERN_LENGTH} characters")
    try:
        return re2.compile(pattern, _RE2_OPTIONS)
    except re2.error as error:
        reason = error.args[0] if error.args else error
        text = reason.decode("utf-8", "replace") if isinstance(reason, bytes) else str(reason)
        raise PackRegexError(text) from None


def _pattern(validator: Any, pattern: str, instance: Any, schema: Any) -> Iterator[ValidationError]:
    if validator.is_type(instance, "string") and not compile_regex(pattern).search(instance):
        yield ValidationError(f"{instance!r} does not match {pattern!r}")


def _pattern_properties(
    validator: Any, properties: Any, instance: Any, schema: Any
) -> Iterator[ValidationError]:
    if not validator.is_type(instance, "object"):
        return
    for pattern, subschema in properties.items():
        regex = compile_regex(pattern)
        for name, value in instance.items():
            if regex.search(name):
                yield from validator.descend(value, subschema, path=name, schema_path=pattern)


def _additional_properties(
    validator: Any, additional: Any, instance: Any, schema: Any
) -> Iterator[ValidationError]:
    if not validator.is_type(instance, "object"):
        return
    declared = schema.get("properties", {})
    patterns = [compile_regex(pattern) for pattern in schema.get("patternProperties", {})]
    extras = [name for name in instance if name not in declared and not any(p.search(name) for p in patterns)]
    if validator.is_type(additional, "object"):
        for name in extras:
            yield from validator.descend(instance[name], additional, path=name)
    elif not additional and extras:
        shown = [repr(name if len(name) <= 64 else name[:64] + "...") for name in sorted(extras)[:10]]
        more = f" and {len(extras) - 10} more" if len(extras) > 10 else ""
        yield ValidationError(f"additional properties are not allowed ({', '.join(shown)}{more} unexpected)")


PackSchemaValidator = validators.extend(
    Draft202012Validator,
    {
        "pattern": _pattern,
        "patternProperties": _pattern_properties,
        "additionalProperties": _additional_properties,
    },
)


def _refuse_retrieval(uri: str) -> Resource[Any]:
    raise NoSuchResource(ref=uri)


_NO_RETRIEVAL: Registry[Any] = Registry(retrieve=_refuse_retrieval)  # type: ignore[call-arg]


def json_path(base: str, path: Any) -> str:
    """``base`` followed by a JSON path: ``package.kinds[1].naturalKey.properties.id``."""
    text = base
    for part in path:
        text += f"[{part}]" if isinstance(part, int) else f".{part}"
    return text


def _walk(node: Any, path: tuple[Any, ...] = ()) -> Iterator[tuple[tuple[Any, ...], dict[str, Any]]]:
    """Every schema object of ``node`` (data keywords' values skipped), with its path from the root."""
    if isinstance(node, dict):
        yield path, node
        for key, value in node.items():
            if key not in _DATA_KEYWORDS:
                yield from _walk(value, (*path, key))
    elif isinstance(node, list):
        for index, value in enumerate(node):
            yield from _walk(value, (*path, index))


def count_schema_patterns(schema: Any) -> int:
    """How many regular expressions a schema holds (``pattern`` values and ``patternProperties`` keys)."""
    count = 0
    for _, node in _walk(schema):
        count += isinstance(node.get("pattern"), str)
        properties = node.get("patternProperties")
        count += len(properties) if isinstance(properties, dict) else 0
    return count


def compile_schema(check: ViolationCollector, schema: Any, path: str) -> Any | None:
    """A validator of a pack's ``naturalKey`` / ``attributes`` schema, or None with violations in ``check``.

    Checks, each violation named by its JSON path under ``path``: Draft 2020-12 meta-schema, size
    (`MAX_SCHEMA_BYTES`), every regular expression compiles on RE2, references stay inside the schema
    and resolve, no nested ``$id``, no ``unevaluatedProperties`` beside ``patternProperties``.
    """
    before = len(check.violations)
    try:
        Draft202012Validator.check_schema(schema)
    except SchemaError as error:
        check.add(
            json_path(path, error.absolute_path), f"not a valid JSON Schema (Draft 2020-12): {error.message}"
        )
        return None
    size = len(json.dumps(schema, ensure_ascii=False).encode())
    if size > MAX_SCHEMA_BYTES:
        check.add(path, f"schema is {size} bytes of JSON, at most {MAX_SCHEMA_BYTES} are allowed")
        return None
    root = DRAFT202012.create_resource(schema)
    resolver = _NO_RETRIEVAL.resolver_with_root(root)
    uses_pattern_properties = any("patternProperties" in node for _, node in _walk(schema))
    for where, node in _walk(schema):
        if where and "$id" in node:
            check.add(json_path(path, (*where, "$id")), "a nested $id is not allowed in a pack schema")
        pattern = node.get("pattern")
        if isinstance(pattern, str):
            _check_regex(check, pattern, json_path(path, (*where, "pattern")))
        properties = node.get("patternProperties")
        for name in properties if isinstance(properties, dict) else ():
            _check_regex(check, name, json_path(path, (*where, "patternProperties", name)))
        if uses_pattern_properties and "unevaluatedProperties" in node:
            check.add(
                json_path(path, (*where, "unevaluatedProperties")),
                "unevaluatedProperties cannot be combined with patternProperties in a pack schema",
            )
        for keyword in _REFERENCE_KEYWORDS:
            reference = node.get(keyword)
            if not isinstance(reference, str):
                continue
            field = json_path(path, (*where, keyword))
            if not reference.startswith("#"):
                check.add(
                    field,
                    f"{reference!r} points outside the schema: only references inside it such as '#/$defs/name' are allowed",
                )
                continue
            try:
                resolver.lookup(reference)
            except Unresolvable:
                check.add(field, f"{reference!r} does not resolve inside the schema")
    if len(check.violations) > before:
        return None
    return PackSchemaValidator(schema, registry=_NO_RETRIEVAL)


def _check_regex(check: ViolationCollector, pattern: str, field: str) -> None:
    try:
        compile_regex(pattern)
    except PackRegexError as error:
        check.add(field, f"invalid or unsupported regular expression (RE2 syntax, linear time): {error}")

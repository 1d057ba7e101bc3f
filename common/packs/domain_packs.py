"""Domain packs: validation, compilation and registration (docs/how-to/domain-packs.md;
docs/how-to/domain-packs.md).

A pack is versioned JSON in the proto3-JSON form of ``memory.v1.DomainPackage`` (camelCase names)::

    {"name": "delivery", "version": "1.0.0",
     "kinds": [{"kind": "service", "naturalKey": {"type": "string", "pattern": "^[a-z-]+$"},
                "aliases": {"checkout": "checkout-svc"}, "kindAliases": ["svc"],
                "idPatterns": ["SVC-[0-9]+"], "attributes": {"type": "object", ...}}],
     "relations": [{"relation": "OWNS", "fromKinds": ["team"], "toKinds": ["service"],
                    "temporal": true, "cardinality": "many"}]}

Validation uses the ``jsonschema`` library: the pack's own shape against `PACK_SCHEMA`, every
``naturalKey``/``attributes`` JSON Schema with Draft 2020-12's meta-schema. A string ``naturalKey`` is a
template whose ``<name>``/``{name}`` placeholders match one or more characters (``"{method} {path}"``);
it is compiled to an anchored regular expression. ``naturalKey`` applies to the id part of the natural
key (``service:checkout`` -> ``checkout``). ``aliases`` maps alternative ids to the canonical id;
``kindAliases`` are synonyms of the kind name. The base kinds document, entity and fact always exist and
the pack name ``default`` is reserved. A version is immutable: the same content again is a no-op, other
content is ALREADY_EXISTS.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from dataclasses import field
from datetime import datetime
from typing import Any

import re2
from jsonschema import Draft202012Validator

from common.kernel.errors import AlreadyExists
from common.kernel.errors import FieldViolation
from common.kernel.errors import InvalidArgument
from common.kernel.errors import NotFound
from common.kernel.errors import ViolationCollector
from common.kernel.identifiers import NAMESPACE_PATTERN
from common.kernel.identifiers import NAMESPACE_VIOLATION
from common.kernel.identifiers import integral_numbers
from common.kernel.page_tokens import MalformedPageToken
from common.kernel.page_tokens import decode_page_token
from common.kernel.page_tokens import encode_page_token
from common.packs.pack_schemas import MAX_PACK_BYTES
from common.packs.pack_schemas import MAX_PATTERNS_PER_PACK
from common.packs.pack_schemas import PackRegexError
from common.packs.pack_schemas import compile_regex
from common.packs.pack_schemas import compile_schema
from common.packs.pack_schemas import count_schema_patterns
from common.packs.pack_schemas import json_path
from common.storage.audit_store import AUDIT_EVENT_TYPE
from common.storage.audit_store import TRACE_EDGE
from common.storage.audit_store import TRACE_TYPE
from common.storage.database import Database
from common.storage.pack_store import PackStore

BASE_KINDS = ("document", "entity", "fact")
# Names of the audit trail (docs/explanation/knowledge-model.md): a pack can neither define these kinds (nor
# use them as kind aliases, which would let writes resolve to audit_event:/pc_trace: keys) nor a relation
# IN_TRACE.
RESERVED_KINDS = (AUDIT_EVENT_TYPE, TRACE_TYPE)
RESERVED_RELATIONS = (TRACE_EDGE,)
RESERVED_PACK = "default"
NAME_PATTERN = r"^[a-z0-9][a-z0-9._-]{0,63}$"
KIND_PATTERN = r"^[A-Za-z_][A-Za-z0-9_.-]{0,63}$"
RELATION_PATTERN = r"^[A-Za-z_][A-Za-z0-9_]{0,127}$"
MAX_KINDS = 500
MAX_RELATIONS = 1000

_STRINGS = {"type": "array", "items": {"type": "string", "minLength": 1, "maxLength": 1024}, "maxItems": 100}
PACK_SCHEMA: dict[str, Any] = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "type": "object",
    "required": ["name", "version"],
    "additionalProperties": False,
    "properties": {
        "name": {"type": "string", "pattern": NAME_PATTERN},
        "version": {
            "type": "string",
            "minLength": 1,
            "maxLength": 64,
            "pattern": r"^[A-Za-z0-9][A-Za-z0-9._+-]*$",
        },
        "kinds": {
            "type": "array",
            "maxItems": MAX_KINDS,
            "items": {
                "type": "object",
                "required": ["kind"],
                "additionalProperties": False,
                "properties": {
                    "kind": {"type": "string", "pattern": KIND_PATTERN},
                    "naturalKey": {"type": ["object", "string", "boolean"]},
                    "aliases": {"type": "object", "additionalProperties": {"type": "string", "minLength": 1}},
                    "kindAliases": {"type": "array", "items": {"type": "string", "pattern": KIND_PATTERN}},
                    "idPatterns": _STRINGS,
                    "attributes": {"type": ["object", "boolean"]},
                },
            },
        },
        "relations": {
            "type": "array",
            "maxItems": MAX_RELATIONS,
            "items": {
                "type": "object",
                "required": ["relation"],
                "additionalProperties": False,
                "properties": {
                    "relation": {"type": "string", "pattern": RELATION_PATTERN},
                    "fromKinds": {"type": "array", "items": {"type": "string", "pattern": KIND_PATTERN}},
                    "toKinds": {"type": "array", "items": {"type": "string", "pattern": KIND_PATTERN}},
                    "temporal": {"type": "boolean"},
                    "cardinality": {"enum": ["many", "one"]},
                },
            },
        },
    },
}
_PACK_VALIDATOR = Draft202012Validator(PACK_SCHEMA)
_PLACEHOLDER = re.compile(r"<([A-Za-z_][A-Za-z0-9_]*)>|\{([A-Za-z_][A-Za-z0-9_]*)\}")


def compile_template(template: str) -> Any:
    """An anchored RE2 regex of a key template: placeholders match one or more characters, the rest literally.

    Raises:
        ValueError: a placeholder name is used twice (`PackRegexError`, a ValueError: RE2 refuses it).
    """
    pattern, position, names = "", 0, set()
    for match in _PLACEHOLDER.finditer(template):
        name = match.group(1) or match.group(2)
        if name in names:
            raise ValueError(f"placeholder {name!r} appears twice")
        names.add(name)
        pattern += re2.escape(template[position : match.start()]) + f"(?P<{name}>.+?)"
        position = match.end()
    pattern += re2.escape(template[position:])
    return compile_regex(f"(?s)^{pattern}$")


def fill_template(template: str, values: dict[str, str]) -> str | None:
    """``template`` with each ``<name>``/``{name}`` placeholder replaced by ``values[name]``; None when a
    placeholder has no value (``fill_template("PROJ-<number>", {"number": "12"})`` -> ``"PROJ-12"``)."""
    missing = False

    def value(match: re.Match[str]) -> str:
        nonlocal missing
        name = match.group(1) or match.group(2)
        if values.get(name) is None:
            missing = True
            return ""
        return values[name]

    filled = _PLACEHOLDER.sub(value, template)
    return None if missing else filled


@dataclass(frozen=True)
class CompiledKind:
    """A pack kind ready for checks; ``key_schema``/``attributes_schema`` None accept anything."""

    pack: str
    kind: str
    key_schema: Any | None  # a `PackSchemaValidator` (JSON Schema with RE2 patterns, no retrieval)
    key_template: Any | None  # an RE2 regex (`pack_schemas.compile_regex`)
    key_template_text: str
    aliases: dict[str, str]
    kind_aliases: tuple[str, ...]
    id_patterns: tuple[Any, ...]  # RE2 regexes
    attributes_schema: Any | None


@dataclass(frozen=True)
class CompiledRelation:
    pack: str
    relation: str
    from_kinds: frozenset[str]
    to_kinds: frozenset[str]
    temporal: bool
    cardinality: str


@dataclass(frozen=True)
class CompiledPack:
    name: str
    version: str
    kinds: dict[str, CompiledKind]
    relations: dict[str, CompiledRelation]


def normalise_pack(raw: dict[str, Any]) -> dict[str, Any]:
    """The stored form: integral numbers as ints, output-only fields dropped, relation defaults filled."""
    pack: dict[str, Any] = integral_numbers({key: value for key, value in raw.items() if key != "createTime"})
    pack.setdefault("kinds", [])
    pack.setdefault("relations", [])
    for relation in pack["relations"] if isinstance(pack["relations"], list) else []:
        if isinstance(relation, dict):
            relation.setdefault("temporal", True)
            relation.setdefault("cardinality", "many")
    return pack


def validate_pack(raw: dict[str, Any], base: str = "package") -> tuple[dict[str, Any], CompiledPack]:
    """Validates a pack (proto3-JSON form) and compiles it.

    Returns:
        (normalised content as stored, compiled pack).

    Raises:
        InvalidArgument: every violation, with JSON paths under ``base`` (``package.kinds[0].attributes``).
    """
    size = len(json.dumps(raw, ensure_ascii=False, default=str).encode())
    if size > MAX_PACK_BYTES:
        raise InvalidArgument.single(
            base, f"the pack is {size} bytes of JSON, at most {MAX_PACK_BYTES} are allowed"
        )
    pack = normalise_pack(raw)
    violations = [
        FieldViolation(json_path(base, error.absolute_path), error.message)
        for error in sorted(_PACK_VALIDATOR.iter_errors(pack), key=lambda e: list(map(str, e.absolute_path)))
    ]
    if violations:
        raise InvalidArgument(violations)
    check = ViolationCollector()
    name = pack["name"]
    if name == RESERVED_PACK:
        check.add(f"{base}.name", f"the pack name {RESERVED_PACK!r} is reserved for the built-in base kinds")
    kinds: dict[str, CompiledKind] = {}
    names_seen: dict[str, str] = {}
    pattern_count = 0
    for index, kind in enumerate(pack["kinds"]):
        path = f"{base}.kinds[{index}]"
        kind_name = kind["kind"]
        if kind_name in BASE_KINDS:
            check.add(
                f"{path}.kind", f"{kind_name!r} is a base kind (always present); packs cannot redefine it"
            )
            continue
        for alias_index, synonym in enumerate([kind_name, *kind.get("kindAliases", [])]):
            where = f"{path}.kind" if alias_index == 0 else f"{path}.kindAliases[{alias_index - 1}]"
            if synonym in RESERVED_KINDS:
                check.add(
                    where, f"{synonym!r} is reserved for the audit trail; packs cannot define or alias it"
                )
                continue
            if synonym in names_seen or synonym in BASE_KINDS:
                check.add(
                    where,
                    f"{synonym!r} is already a kind or kind alias ({names_seen.get(synonym, 'base kind')})",
                )
            names_seen[synonym] = kind_name
        key_schema = key_template = None
        template_text = ""
        natural_key = kind.get("naturalKey")
        if isinstance(natural_key, str):
            try:
                key_template = compile_template(natural_key)
                template_text = natural_key
            except ValueError as error:
                check.add(f"{path}.naturalKey", f"invalid template: {error}")
        elif natural_key is not None:
            key_schema = compile_schema(check, natural_key, f"{path}.naturalKey")
            pattern_count += count_schema_patterns(natural_key)
        attributes_schema = None
        if kind.get("attributes") is not None:
            attributes_schema = compile_schema(check, kind["attributes"], f"{path}.attributes")
            pattern_count += count_schema_patterns(kind["attributes"])
        patterns = []
        for pattern_index, text in enumerate(kind.get("idPatterns", [])):
            pattern_count += 1
            try:
                patterns.append(compile_regex(text))
            except PackRegexError as error:
                check.add(
                    f"{path}.idPatterns[{pattern_index}]",
                    f"invalid or unsupported regular expression (RE2 syntax, linear time): {error}",
                )
        kinds[kind_name] = CompiledKind(
            pack=name,
            kind=kind_name,
            key_schema=key_schema,
            key_template=key_template,
            key_template_text=template_text,
            aliases=dict(kind.get("aliases", {})),
            kind_aliases=tuple(kind.get("kindAliases", [])),
            id_patterns=tuple(patterns),
            attributes_schema=attributes_schema,
        )
    relations: dict[str, CompiledRelation] = {}
    known_kinds = set(kinds) | set(BASE_KINDS)
    for index, relation in enumerate(pack["relations"]):
        path = f"{base}.relations[{index}]"
        if relation["relation"] in RESERVED_RELATIONS:
            check.add(f"{path}.relation", f"{relation['relation']!r} is reserved for the audit trail")
        if relation["relation"] in relations:
            check.add(f"{path}.relation", f"relation {relation['relation']!r} is defined twice")
        for side in ("fromKinds", "toKinds"):
            for kind_index, kind_name in enumerate(relation.get(side, [])):
                if names_seen.get(kind_name, kind_name) not in known_kinds:
                    check.add(
                        f"{path}.{side}[{kind_index}]", f"unknown kind {kind_name!r} (not in this pack)"
                    )
        relations[relation["relation"]] = CompiledRelation(
            pack=name,
            relation=relation["relation"],
            from_kinds=frozenset(names_seen.get(k, k) for k in relation.get("fromKinds", [])),
            to_kinds=frozenset(names_seen.get(k, k) for k in relation.get("toKinds", [])),
            temporal=bool(relation["temporal"]),
            cardinality=relation["cardinality"],
        )
    if pattern_count > MAX_PATTERNS_PER_PACK:
        check.add(
            f"{base}.kinds",
            f"{pattern_count} regular expressions (idPatterns and schema patterns); a pack may hold at most "
            f"{MAX_PATTERNS_PER_PACK}",
        )
    check.raise_if_any()
    return pack, CompiledPack(name=name, version=pack["version"], kinds=kinds, relations=relations)


def compile_stored(content: dict[str, Any]) -> CompiledPack:
    """Compiles a pack read back from storage (it was validated at registration)."""
    return validate_pack(content)[1]


@dataclass(frozen=True)
class PackView:
    """A registered pack for the API: normalised content and registration time."""

    content: dict[str, Any]
    created_at: datetime
    created: bool = False


@dataclass(frozen=True)
class NamespaceKindsView:
    namespace: str
    packages: list[dict[str, str]]
    strict: bool
    kinds: list[str] = field(default_factory=list)
    relations: list[str] = field(default_factory=list)


class PackRegistry:
    """Registration and lookup of packs, and the packs enabled per namespace."""

    def __init__(self, database: Database) -> None:
        self.database = database
        self.store = PackStore(database.settings)

    def register(self, raw: dict[str, Any]) -> PackView:
        """Registers a pack version (see the module doc).

        Raises:
            InvalidArgument: the pack is malformed (paths under ``package``).
            AlreadyExists: the version exists with other content.
            Unavailable: the database cannot be reached.
        """
        content, _ = validate_pack(raw)

        def work(conn: Any) -> PackView:
            created = self.store.insert(conn, content["name"], content["version"], content)
            stored = self.store.get(conn, content["name"], content["version"])
            assert stored is not None
            if not created and _canonical(stored.content) != _canonical(content):
                raise AlreadyExists(
                    f"pack {content['name']} version {content['version']} is already registered with other "
                    "content; versions are immutable: register a new version"
                )
            return PackView(stored.content, stored.created_at, created)

        return self.database.run_transaction(work)

    def get(self, name: str, version: str = "") -> PackView:
        """Raises: NotFound; Unavailable."""
        with self.database.connection() as conn:
            stored = self.store.get(conn, name, version)
        if stored is None:
            raise NotFound(f"pack {name}{' version ' + version if version else ''} is not registered")
        return PackView(stored.content, stored.created_at)

    def list_packs(self, page_size: int = 0, page_token: str = "") -> tuple[list[PackView], str]:
        """Packs by (name, version), with a next page token ("" on the last page).

        Raises: InvalidArgument (page_size, page_token); Unavailable.
        """
        if page_size < 0 or page_size > 1000:
            raise InvalidArgument.single("page_size", "0..1000")
        limit = page_size or 100
        after = None
        if page_token:
            try:
                name, version = decode_page_token(page_token, length=2)
            except MalformedPageToken:
                raise InvalidArgument.single("page_token", "not a token of this listing") from None
            after = (name, version)
        with self.database.connection() as conn:
            rows = self.store.list_packs(conn, after, limit + 1)
        token = ""
        if len(rows) > limit:
            rows = rows[:limit]
            token = encode_page_token([rows[-1].name, rows[-1].version])
        return [PackView(row.content, row.created_at) for row in rows], token

    def set_namespace_kinds(
        self, namespace: str, packages: list[dict[str, str]], strict: bool
    ) -> NamespaceKindsView:
        """Enables ``packages`` ([{name, version}]) in ``namespace`` with strict mode on or off.

        Raises:
            InvalidArgument: bad namespace, a reference without name or version, a package twice, or two
                packages defining the same kind or relation.
            NotFound: a referenced version is not registered.
            Unavailable: the database cannot be reached.
        """
        check = ViolationCollector()
        if not NAMESPACE_PATTERN.match(namespace):
            check.add("namespace", NAMESPACE_VIOLATION)
        seen: set[str] = set()
        for index, ref in enumerate(packages):
            if not ref.get("name"):
                check.add(f"packages[{index}].name", "required")
            if not ref.get("version"):
                check.add(f"packages[{index}].version", "required")
            if ref.get("name") in seen:
                check.add(f"packages[{index}].name", f"package {ref.get('name')!r} is listed twice")
            seen.add(str(ref.get("name")))
        check.raise_if_any()
        refs = [{"name": str(ref["name"]), "version": str(ref["version"])} for ref in packages]

        def work(conn: Any) -> NamespaceKindsView:
            compiled: list[CompiledPack] = []
            for index, ref in enumerate(refs):
                stored = self.store.get(conn, ref["name"], ref["version"])
                if stored is None:
                    raise NotFound(
                        f"packages[{index}]: pack {ref['name']} version {ref['version']} is not registered"
                    )
                compiled.append(compile_stored(stored.content))
            conflicts = _conflicts(compiled)
            if conflicts:
                raise InvalidArgument(conflicts)
            self.store.set_namespace_settings(conn, namespace, refs, strict)
            return _view(namespace, refs, strict, compiled)

        return self.database.run_transaction(work)

    def get_namespace_kinds(self, namespace: str) -> NamespaceKindsView:
        """The packs enabled in ``namespace`` (none, strict false when never set).

        Raises: InvalidArgument (namespace); Unavailable.
        """
        if not NAMESPACE_PATTERN.match(namespace):
            raise InvalidArgument.single("namespace", NAMESPACE_VIOLATION)
        with self.database.connection() as conn:
            row = self.store.namespace_settings(conn, namespace)
            if row is None:
                return _view(namespace, [], False, [])
            compiled = [
                compile_stored(stored.content)
                for ref in row.packages
                if (stored := self.store.get(conn, ref["name"], ref["version"]))
            ]
        return _view(namespace, row.packages, row.strict, compiled)


def _conflicts(packs: list[CompiledPack]) -> list[FieldViolation]:
    owners: dict[str, str] = {}
    violations = []
    for index, pack in enumerate(packs):
        names = [*pack.kinds, *(alias for kind in pack.kinds.values() for alias in kind.kind_aliases)]
        names += [f"relation {relation}" for relation in pack.relations]
        for name in names:
            if name in owners and owners[name] != pack.name:
                violations.append(
                    FieldViolation(
                        f"packages[{index}]", f"{name!r} is defined by both {owners[name]} and {pack.name}"
                    )
                )
            owners[name] = pack.name
    return violations


def _view(
    namespace: str, refs: list[dict[str, str]], strict: bool, packs: list[CompiledPack]
) -> NamespaceKindsView:
    kinds = sorted({*BASE_KINDS, *(kind for pack in packs for kind in pack.kinds)})
    relations = sorted({relation for pack in packs for relation in pack.relations})
    return NamespaceKindsView(namespace, refs, strict, kinds, relations)


def _canonical(content: dict[str, Any]) -> str:
    return json.dumps(content, sort_keys=True, separators=(",", ":"), ensure_ascii=False)

"""The one place where writes are checked against a namespace's domain packs.

Every write path calls it: entity and fact assertions of observations (`ObservationRecorder`),
``FactService.AssertFacts``, documents (``Retain``/``PutChunks`` type and key) and snapshots
(``SnapshotService.Reconcile``). For a namespace without packs the checks are free: the settings are
cached per process for `SETTINGS_TTL_SECONDS`, and a namespace without packs resolves nothing.

Resolution (strict or not): a ``kindAliases`` synonym becomes the canonical kind (``svc:checkout`` ->
``service:checkout``) and an ``aliases`` id becomes the canonical id (``service:checkout`` ->
``service:checkout-svc``).

Strict mode rejects, with violations naming pack, kind and JSON path:
- an entity of a kind that is neither a base kind (document, entity, fact) nor a kind of an enabled pack;
- a key id outside the kind's ``naturalKey`` (JSON Schema or template);
- attributes outside the kind's ``attributes`` schema (path such as ``attributes.owner``);
- a fact whose predicate is not a relation of an enabled pack, or whose subject/object kind is outside
  the relation's ``fromKinds``/``toKinds``.
Without strict mode unknown kinds and relations are stored as free nodes and edges; pack kinds are still
resolved through aliases (their schemas are checked only in strict mode).
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from dataclasses import field
from typing import Any

from common.kernel.errors import FieldViolation
from common.packs.domain_packs import BASE_KINDS
from common.packs.domain_packs import CompiledKind
from common.packs.domain_packs import CompiledPack
from common.packs.domain_packs import CompiledRelation
from common.packs.domain_packs import compile_stored
from common.packs.pack_schemas import json_path
from common.storage.database import Database
from common.storage.pack_store import PackStore

SETTINGS_TTL_SECONDS = 2.0


@dataclass(frozen=True)
class NamespaceKinds:
    """The compiled packs of one namespace. ``kinds`` maps canonical names and kindAliases to kinds."""

    strict: bool = False
    packs: tuple[CompiledPack, ...] = ()
    kinds: dict[str, CompiledKind] = field(default_factory=dict)
    relations: dict[str, CompiledRelation] = field(default_factory=dict)

    @property
    def active(self) -> bool:
        return bool(self.packs)

    @classmethod
    def of(cls, packs: list[CompiledPack], strict: bool) -> NamespaceKinds:
        kinds: dict[str, CompiledKind] = {}
        relations: dict[str, CompiledRelation] = {}
        for pack in packs:
            for kind in pack.kinds.values():
                kinds[kind.kind] = kind
                for alias in kind.kind_aliases:
                    kinds.setdefault(alias, kind)
            relations.update(pack.relations)
        return cls(strict=strict, packs=tuple(packs), kinds=kinds, relations=relations)

    def canonical_kind(self, kind: str) -> str:
        found = self.kinds.get(kind)
        return found.kind if found else kind

    def resolve_key(self, key: str) -> str:
        """``kind:id`` with the kind and id aliases resolved; other keys unchanged."""
        if not self.packs or ":" not in key:
            return key
        kind_name, _, id_ = key.partition(":")
        kind = self.kinds.get(kind_name)
        if kind is None:
            return key
        return f"{kind.kind}:{kind.aliases.get(id_, id_)}"

    def check_entity(
        self, key: str, node_type: str, attributes: dict[str, Any] | None, path: str, *, key_path: str = "key"
    ) -> tuple[str, str, list[FieldViolation]]:
        """Resolves and checks one entity; returns (natural key, node type, violations).

        ``node_type`` is the declared type ("" when none: the key's prefix); ``attributes`` None skips the
        attributes schema (fact endpoints, documents). Violations only in strict mode.
        """
        if not self.packs:
            return key, node_type, []
        declared = node_type or (key.partition(":")[0] if ":" in key else "entity")
        kind = self.kinds.get(declared)
        resolved_key = self.resolve_key(key)
        if kind is not None and ":" in key and key.partition(":")[0] != declared:
            # {type} given explicitly, key without that prefix: resolve the id against the declared kind
            resolved_key = key
        resolved_type = kind.kind if kind else declared
        violations: list[FieldViolation] = []
        if not self.strict:
            return resolved_key, resolved_type, violations
        if kind is None:
            if declared not in BASE_KINDS:
                violations.append(
                    FieldViolation(
                        _join(path, "type" if node_type and node_type != key.partition(":")[0] else key_path),
                        f"unknown kind {declared!r}: not a base kind ({', '.join(BASE_KINDS)}) nor a kind of the "
                        f"namespace's packs ({', '.join(pack.name for pack in self.packs)}); strict mode",
                    )
                )
            return resolved_key, resolved_type, violations
        id_ = resolved_key.partition(":")[2] if resolved_key.startswith(f"{kind.kind}:") else resolved_key
        violations.extend(_check_key(kind, id_, _join(path, key_path)))
        if kind.attributes_schema is not None and attributes is not None:
            for error in kind.attributes_schema.iter_errors(attributes):
                violations.append(
                    FieldViolation(
                        json_path(_join(path, "attributes"), error.absolute_path),
                        f"pack {kind.pack}, kind {kind.kind}: {error.message}",
                    )
                )
        return resolved_key, resolved_type, violations

    def check_fact(
        self, subject: str, predicate: str, object_: str, path: str
    ) -> tuple[str, str, list[FieldViolation]]:
        """Resolves the subject and object keys and checks the relation; returns (subject, object, violations)."""
        if not self.packs:
            return subject, object_, []
        subject_key, subject_type, violations = self.check_entity(subject, "", None, path, key_path="subject")
        object_key, object_type, object_violations = self.check_entity(
            object_, "", None, path, key_path="object"
        )
        violations += object_violations
        if not self.strict:
            return subject_key, object_key, violations
        relation = self.relations.get(predicate)
        if relation is None:
            violations.append(
                FieldViolation(
                    _join(path, "predicate"),
                    f"unknown relation {predicate!r}: not a relation of the namespace's packs "
                    f"({', '.join(pack.name for pack in self.packs)}); strict mode",
                )
            )
            return subject_key, object_key, violations
        if relation.from_kinds and subject_type not in relation.from_kinds:
            violations.append(
                FieldViolation(
                    _join(path, "subject"),
                    f"pack {relation.pack}, relation {relation.relation}: subject kind {subject_type!r} not in "
                    f"fromKinds {sorted(relation.from_kinds)}",
                )
            )
        if relation.to_kinds and object_type not in relation.to_kinds:
            violations.append(
                FieldViolation(
                    _join(path, "object"),
                    f"pack {relation.pack}, relation {relation.relation}: object kind {object_type!r} not in "
                    f"toKinds {sorted(relation.to_kinds)}",
                )
            )
        return subject_key, object_key, violations


def _join(base: str, name: str) -> str:
    return f"{base}.{name}" if base else name


def key_fits(kind: CompiledKind, id_: str) -> bool:
    """True when ``id_`` (the part after ``kind:``) fits the kind's ``naturalKey`` (template or schema)."""
    return not _check_key(kind, id_, "")


def _check_key(kind: CompiledKind, id_: str, path: str) -> list[FieldViolation]:
    if kind.key_template is not None and not kind.key_template.match(id_):
        return [
            FieldViolation(
                path,
                f"pack {kind.pack}, kind {kind.kind}: key id {id_!r} does not match template {kind.key_template_text!r}",
            )
        ]
    if kind.key_schema is not None:
        return [
            FieldViolation(
                json_path(path, error.absolute_path),
                f"pack {kind.pack}, kind {kind.kind}: naturalKey: {error.message}",
            )
            for error in kind.key_schema.iter_errors(id_)
        ]
    return []


_NONE = NamespaceKinds()


class KindValidator:
    """Per-process cache of namespace settings (TTL `SETTINGS_TTL_SECONDS`) and compiled packs (forever:
    versions are immutable)."""

    def __init__(self, database: Database, *, ttl_seconds: float = SETTINGS_TTL_SECONDS) -> None:
        self.database = database
        self.store = PackStore(database.settings)
        self.ttl = ttl_seconds
        self._lock = threading.Lock()
        self._settings: dict[str, tuple[float, NamespaceKinds]] = {}
        self._packs: dict[tuple[str, str], CompiledPack] = {}

    def for_namespace(self, namespace: str, conn: Any | None = None) -> NamespaceKinds:
        """The namespace's packs; reads the settings (on ``conn`` when given) at most once per TTL."""
        now = time.monotonic()
        cached = self._settings.get(namespace)
        if cached is not None and now - cached[0] < self.ttl:
            return cached[1]
        if conn is None:
            with self.database.connection() as own:
                kinds = self._load(own, namespace)
        else:
            kinds = self._load(conn, namespace)
        with self._lock:
            if len(self._settings) > 10_000:
                self._settings.clear()
            self._settings[namespace] = (now, kinds)
        return kinds

    def invalidate(self, namespace: str | None = None) -> None:
        """Forgets cached settings (all namespaces when None): SetNamespaceKinds in this process."""
        with self._lock:
            if namespace is None:
                self._settings.clear()
            else:
                self._settings.pop(namespace, None)

    def _load(self, conn: Any, namespace: str) -> NamespaceKinds:
        row = self.store.namespace_settings(conn, namespace)
        if row is None or not row.packages:
            return _NONE if row is None or not row.strict else NamespaceKinds(strict=True)
        packs = []
        for ref in row.packages:
            key = (ref["name"], ref["version"])
            pack = self._packs.get(key)
            if pack is None:
                stored = self.store.get(conn, *key)
                if stored is None:
                    continue
                pack = self._packs[key] = compile_stored(stored.content)
            packs.append(pack)
        return NamespaceKinds.of(packs, row.strict)

"""SQL of domain packs and namespace settings (tables domain_packs and namespace_settings, 0001_initial.sql)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

import psycopg
from psycopg import sql
from psycopg.types.json import Jsonb

from common.kernel.config import Settings
from common.storage.tables import table_identifiers


@dataclass(frozen=True)
class StoredPack:
    """One registered pack version: its normalised content (camelCase pack JSON) and registration time."""

    name: str
    version: str
    content: dict[str, Any]
    created_at: datetime


@dataclass(frozen=True)
class NamespaceSettingsRow:
    namespace: str
    packages: list[dict[str, str]]
    strict: bool


class PackStore:
    """Named, parameterised queries over the pack tables; every call runs on the caller's connection."""

    def __init__(self, settings: Settings) -> None:
        self.t = table_identifiers(settings)

    def insert(self, conn: psycopg.Connection[Any], name: str, version: str, content: dict[str, Any]) -> bool:
        """Inserts a pack version; False when (name, version) already exists (nothing written)."""
        row = conn.execute(
            sql.SQL(
                "INSERT INTO {domain_packs} (name, version, content) VALUES (%s, %s, %s)"
                " ON CONFLICT (name, version) DO NOTHING RETURNING name"
            ).format(**self.t),
            (name, version, Jsonb(content)),
        ).fetchone()
        return row is not None

    def get(self, conn: psycopg.Connection[Any], name: str, version: str = "") -> StoredPack | None:
        """The version ``version`` of ``name``, or its latest registered version when ``version`` is empty."""
        if version:
            query = sql.SQL(
                "SELECT name, version, content, created_at FROM {domain_packs} WHERE name = %s AND version = %s"
            ).format(**self.t)
            row = conn.execute(query, (name, version)).fetchone()
        else:
            query = sql.SQL(
                "SELECT name, version, content, created_at FROM {domain_packs} WHERE name = %s"
                " ORDER BY created_at DESC, version DESC LIMIT 1"
            ).format(**self.t)
            row = conn.execute(query, (name,)).fetchone()
        return StoredPack(*row) if row else None

    def list_packs(
        self, conn: psycopg.Connection[Any], after: tuple[str, str] | None, limit: int
    ) -> list[StoredPack]:
        """Packs ordered by (name, version), strictly after ``after``."""
        name, version = after or ("", "")
        rows = conn.execute(
            sql.SQL(
                "SELECT name, version, content, created_at FROM {domain_packs}"
                " WHERE (name, version) > (%s, %s) ORDER BY name, version LIMIT %s"
            ).format(**self.t),
            (name, version, limit),
        ).fetchall()
        return [StoredPack(*row) for row in rows]

    def namespace_settings(
        self, conn: psycopg.Connection[Any], namespace: str
    ) -> NamespaceSettingsRow | None:
        row = conn.execute(
            sql.SQL(
                "SELECT namespace, packages, strict FROM {namespace_settings} WHERE namespace = %s"
            ).format(**self.t),
            (namespace,),
        ).fetchone()
        return NamespaceSettingsRow(row[0], list(row[1]), bool(row[2])) if row else None

    def set_namespace_settings(
        self, conn: psycopg.Connection[Any], namespace: str, packages: list[dict[str, str]], strict: bool
    ) -> None:
        conn.execute(
            sql.SQL(
                "INSERT INTO {namespace_settings} (namespace, packages, strict) VALUES (%s, %s, %s)"
                " ON CONFLICT (namespace) DO UPDATE SET packages = EXCLUDED.packages, strict = EXCLUDED.strict,"
                " updated_at = now()"
            ).format(**self.t),
            (namespace, Jsonb(packages), strict),
        )

"""SQL of domain packs and namespace settings (tables domain_packs and namespace_settings, 0001_initial.sql).

Every query is static: the named queries of ``sql/queries/packs.sql``.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

import psycopg
from psycopg.types.json import Jsonb

from common.kernel.config import Settings
from common.storage.named_queries import Queries


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
        self.queries = Queries.for_settings("packs.sql", settings)

    def insert(self, conn: psycopg.Connection[Any], name: str, version: str, content: dict[str, Any]) -> bool:
        """Inserts a pack version; False when (name, version) already exists (nothing written)."""
        row = conn.execute(self.queries["insert_pack_version"], (name, version, Jsonb(content))).fetchone()
        return row is not None

    def get(self, conn: psycopg.Connection[Any], name: str, version: str = "") -> StoredPack | None:
        """The version ``version`` of ``name``, or its latest registered version when ``version`` is empty."""
        if version:
            row = conn.execute(self.queries["pack_version"], (name, version)).fetchone()
        else:
            row = conn.execute(self.queries["latest_pack_version"], (name,)).fetchone()
        return StoredPack(*row) if row else None

    def list_packs(
        self, conn: psycopg.Connection[Any], after: tuple[str, str] | None, limit: int
    ) -> list[StoredPack]:
        """Packs ordered by (name, version), strictly after ``after``."""
        name, version = after or ("", "")
        rows = conn.execute(self.queries["pack_versions_after"], (name, version, limit)).fetchall()
        return [StoredPack(*row) for row in rows]

    def namespace_settings(
        self, conn: psycopg.Connection[Any], namespace: str
    ) -> NamespaceSettingsRow | None:
        """The pack settings of ``namespace``, or None when it has none."""
        row = conn.execute(self.queries["namespace_settings"], (namespace,)).fetchone()
        return NamespaceSettingsRow(row[0], list(row[1]), bool(row[2])) if row else None

    def set_namespace_settings(
        self, conn: psycopg.Connection[Any], namespace: str, packages: list[dict[str, str]], strict: bool
    ) -> None:
        """Stores the pack settings of ``namespace``, replacing earlier ones."""
        conn.execute(self.queries["set_namespace_settings"], (namespace, Jsonb(packages), strict))

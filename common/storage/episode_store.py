"""Reads of observations as the turns of a conversation, for the context compiler (issue 16 §3): who spoke
and when (`EpisodeStore.turns`), the neighbouring turns of a turn in its stream
(`EpisodeStore.stream_neighbours`) and the most recent turns (`EpisodeStore.recent`).

A *turn* is an observation and the chunks of its episode node ``episode:<observation_id>``. Its neighbours
are the nearest observations of the same namespace, source system and stream, ordered by ``occurred_at``
and then by ``recorded_order`` (migration 0014: turns of one chat session often share one occurred_at),
at most ``window`` before and ``window`` after it and at most ``max_gap`` away in time.

Visibility (seed 000 "Видимость внутри namespace"): a neighbour or recent turn is read only when the
caller may see the observation (``scopes``), its episode's chunk (``meta.scopes``) and its episode node
(``graph_nodes.scopes``); hidden observations are skipped inside SQL, so they neither appear nor count
towards the window. The statements embed the caller's predicates, so they are composed here with
`psycopg.sql`; every value is a bound parameter.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import psycopg
from psycopg import sql
from psycopg.rows import dict_row

from common.kernel.config import Settings
from common.storage.chunk_rankings import StoredChunk
from common.storage.visibility import EVERYTHING, Visibility

_TURN_COLUMNS = (
    "observation_id",
    "source_system",
    "source_stream",
    "kind",
    "occurred_at",
    "actor",
    "subject",
    "recorded_order",
)
_CHUNK_FIELDS = ("node_key", "chunk_order", "node_type", "source_path", "title", "heading", "text", "meta")


@dataclass(frozen=True)
class EpisodeTurn:
    """An observation as a turn: where it was recorded, when, by whom.

    Attributes:
        observation_id: the observation (its episode is ``episode:<observation_id>``).
        source_system, source_stream: the stream it belongs to (a chat, a session, a log).
        kind: the observation kind (``chat.message``).
        occurred_at: when it happened.
        actor, subject: the participants as recorded (``{"type": ..., "id": ...}``) or None.
        recorded_order: the order it was recorded in (ties of ``occurred_at`` broken by it).
    """

    observation_id: str
    source_system: str
    source_stream: str
    kind: str
    occurred_at: datetime
    actor: dict[str, Any] | None
    subject: dict[str, Any] | None
    recorded_order: int

    @property
    def stream(self) -> tuple[str, str]:
        return (self.source_system, self.source_stream)

    @property
    def position(self) -> tuple[datetime, int]:
        """Its place in its stream: (occurred_at, recorded_order)."""
        return (self.occurred_at, self.recorded_order)


@dataclass(frozen=True)
class NeighbourTurn:
    """A turn near an origin turn of the same stream: ``distance`` turns before (< 0) or after (> 0) it,
    counting only the turns the caller may see; ``chunks`` the episode's visible chunks in order."""

    origin_id: str
    distance: int
    turn: EpisodeTurn
    chunks: tuple[StoredChunk, ...]


@dataclass(frozen=True)
class RecentTurn:
    """One of the most recent turns of a namespace, with its episode's visible chunks in order."""

    turn: EpisodeTurn
    chunks: tuple[StoredChunk, ...]


class EpisodeStore:
    """Conversation reads over the observations and chunks tables (see the module doc)."""

    def __init__(self, settings: Settings) -> None:
        self.observations = sql.Identifier(settings.observations_table)
        self.chunks = sql.Identifier(settings.chunks_table)

    def turns(
        self,
        conn: psycopg.Connection[Any],
        namespace: str,
        observation_ids: Sequence[str],
        *,
        visibility: Visibility = EVERYTHING,
    ) -> dict[str, EpisodeTurn]:
        """The turns of the existing observations among ``observation_ids`` that ``visibility`` may see."""
        ids = list(dict.fromkeys(observation_ids))
        if not ids:
            return {}
        statement = sql.SQL(
            "SELECT {columns} FROM {observations} o WHERE o.namespace = %(namespace)s"
            " AND o.observation_id = ANY(%(ids)s) AND {visible}"
        ).format(
            columns=_columns("o", _TURN_COLUMNS),
            observations=self.observations,
            visible=visibility.array_predicate(sql.SQL("o.scopes")),
        )
        with conn.cursor(row_factory=dict_row) as cursor:
            rows = cursor.execute(
                statement, {"namespace": namespace, "ids": ids, **visibility.params}
            ).fetchall()
        return {row["observation_id"]: EpisodeTurn(**row) for row in rows}

    def stream_neighbours(
        self,
        conn: psycopg.Connection[Any],
        namespace: str,
        observation_ids: Sequence[str],
        *,
        window: int,
        max_gap: timedelta,
        visibility: Visibility = EVERYTHING,
    ) -> list[NeighbourTurn]:
        """Up to ``window`` visible turns before and ``window`` after each origin among ``observation_ids``
        in its stream, at most ``max_gap`` from it in time, nearest first; origins that do not exist or
        that the caller may not see have none. A turn near two origins is returned for each."""
        ids = list(dict.fromkeys(observation_ids))
        if not ids or window <= 0:
            return []
        side = (
            "(SELECT {near_columns} FROM {observations} n WHERE n.namespace = %(namespace)s"
            " AND n.source_system = origin.source_system AND n.source_stream = origin.source_stream"
            " AND (n.occurred_at, n.recorded_order) {compare} (origin.occurred_at, origin.recorded_order)"
            " AND n.occurred_at BETWEEN origin.occurred_at - %(max_gap)s AND origin.occurred_at + %(max_gap)s"
            " AND {visible_observation} AND {visible_node}"
            " ORDER BY n.occurred_at {direction}, n.recorded_order {direction} LIMIT %(window)s)"
        )
        parts = {
            "near_columns": _columns("n", _TURN_COLUMNS),
            "observations": self.observations,
            "visible_observation": visibility.array_predicate(sql.SQL("n.scopes")),
            "visible_node": visibility.node_predicate(
                sql.SQL("n.namespace"), sql.SQL("'episode:' || n.observation_id")
            ),
        }
        before = sql.SQL(side).format(compare=sql.SQL("<"), direction=sql.SQL("DESC"), **parts)
        after = sql.SQL(side).format(compare=sql.SQL(">"), direction=sql.SQL("ASC"), **parts)
        statement = sql.SQL(
            "WITH origin AS (SELECT o.observation_id, o.source_system, o.source_stream, o.occurred_at,"
            " o.recorded_order FROM {observations} o WHERE o.namespace = %(namespace)s"
            " AND o.observation_id = ANY(%(ids)s) AND {visible_origin}),"
            " near AS (SELECT origin.observation_id AS origin_id, origin.occurred_at AS origin_at,"
            " origin.recorded_order AS origin_order, side.* FROM origin"
            " CROSS JOIN LATERAL ({before} UNION ALL {after}) side)"
            " SELECT near.*, {chunk_columns} FROM near JOIN {chunks} c ON c.namespace = %(namespace)s"
            " AND c.node_key = 'episode:' || near.observation_id AND {visible_chunk}"
            " ORDER BY near.origin_id, near.occurred_at, near.recorded_order, c.chunk_order"
        ).format(
            observations=self.observations,
            visible_origin=visibility.array_predicate(sql.SQL("o.scopes")),
            before=before,
            after=after,
            chunk_columns=_chunk_columns("c"),
            chunks=self.chunks,
            visible_chunk=visibility.jsonb_predicate(sql.SQL("(c.meta -> 'scopes')")),
        )
        params = {
            "namespace": namespace,
            "ids": ids,
            "window": window,
            "max_gap": max_gap,
            **visibility.params,
        }
        with conn.cursor(row_factory=dict_row) as cursor:
            rows = cursor.execute(statement, params).fetchall()
        grouped: dict[tuple[str, str], tuple[EpisodeTurn, list[StoredChunk], tuple[datetime, int]]] = {}
        for row in rows:
            key = (row["origin_id"], row["observation_id"])
            if key not in grouped:
                grouped[key] = (_turn(row), [], (row["origin_at"], row["origin_order"]))
            grouped[key][1].append(_chunk(row))
        out: list[NeighbourTurn] = []
        by_origin: dict[str, list[tuple[EpisodeTurn, list[StoredChunk], tuple[datetime, int]]]] = {}
        for (origin_id, _), value in grouped.items():
            by_origin.setdefault(origin_id, []).append(value)
        for origin_id, near in by_origin.items():
            origin_at = near[0][2]
            before_turns = sorted((n for n in near if n[0].position < origin_at), key=lambda n: n[0].position)
            after_turns = sorted((n for n in near if n[0].position > origin_at), key=lambda n: n[0].position)
            for index, (turn, chunks, _) in enumerate(reversed(before_turns)):
                out.append(NeighbourTurn(origin_id, -(index + 1), turn, tuple(chunks)))
            for index, (turn, chunks, _) in enumerate(after_turns):
                out.append(NeighbourTurn(origin_id, index + 1, turn, tuple(chunks)))
        return out

    def recent(
        self,
        conn: psycopg.Connection[Any],
        namespace: str,
        *,
        as_of: datetime,
        limit: int,
        visibility: Visibility = EVERYTHING,
    ) -> list[RecentTurn]:
        """The ``limit`` most recent visible turns that occurred at or before ``as_of``, newest first."""
        if limit <= 0:
            return []
        statement = sql.SQL(
            "WITH latest AS (SELECT {columns} FROM {observations} o WHERE o.namespace = %(namespace)s"
            " AND o.occurred_at <= %(as_of)s AND {visible_observation} AND {visible_node}"
            " AND EXISTS (SELECT 1 FROM {chunks} e WHERE e.namespace = %(namespace)s"
            " AND e.node_key = 'episode:' || o.observation_id)"
            " ORDER BY o.occurred_at DESC, o.recorded_order DESC LIMIT %(limit)s)"
            " SELECT latest.*, {chunk_columns} FROM latest JOIN {chunks} c ON c.namespace = %(namespace)s"
            " AND c.node_key = 'episode:' || latest.observation_id AND {visible_chunk}"
            " ORDER BY latest.occurred_at DESC, latest.recorded_order DESC, c.chunk_order"
        ).format(
            columns=_columns("o", _TURN_COLUMNS),
            observations=self.observations,
            chunks=self.chunks,
            visible_observation=visibility.array_predicate(sql.SQL("o.scopes")),
            visible_node=visibility.node_predicate(
                sql.SQL("o.namespace"), sql.SQL("'episode:' || o.observation_id")
            ),
            chunk_columns=_chunk_columns("c"),
            visible_chunk=visibility.jsonb_predicate(sql.SQL("(c.meta -> 'scopes')")),
        )
        params = {"namespace": namespace, "as_of": as_of, "limit": limit, **visibility.params}
        with conn.cursor(row_factory=dict_row) as cursor:
            rows = cursor.execute(statement, params).fetchall()
        out: dict[str, tuple[EpisodeTurn, list[StoredChunk]]] = {}
        for row in rows:
            entry = out.setdefault(row["observation_id"], (_turn(row), []))
            entry[1].append(_chunk(row))
        return [RecentTurn(turn, tuple(chunks)) for turn, chunks in out.values()]


def _columns(alias: str, names: Sequence[str]) -> sql.Composable:
    return sql.SQL(", ").join(sql.Identifier(alias, name) for name in names)


def _chunk_columns(alias: str) -> sql.Composable:
    """The chunk columns, prefixed ``chunk_`` so they do not clash with the observation's."""
    return sql.SQL(", ").join(
        sql.SQL("{} AS {}").format(sql.Identifier(alias, name), sql.Identifier("chunk_" + name))
        for name in _CHUNK_FIELDS
    )


def _turn(row: dict[str, Any]) -> EpisodeTurn:
    return EpisodeTurn(**{name: row[name] for name in _TURN_COLUMNS})


def _chunk(row: dict[str, Any]) -> StoredChunk:
    return StoredChunk(**{name: row["chunk_" + name] for name in _CHUNK_FIELDS})


__all__ = ["EpisodeStore", "EpisodeTurn", "NeighbourTurn", "RecentTurn"]

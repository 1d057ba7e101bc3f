"""Reads of observations as the turns of a conversation, for the context compiler, in one
statement (`EpisodeStore.conversation`): who spoke and when in the hits, the neighbouring turns of a turn
in its stream and the most recent turns.

A *turn* is an observation and the chunks of its episode node ``episode:<observation_id>``. Its neighbours
are the nearest observations of the same namespace, source system and stream, ordered by ``occurred_at``
and then by ``recorded_order`` (migration 0014: turns of one chat session often share one occurred_at),
at most ``window`` before and ``window`` after it and at most ``max_gap`` away in time.

Visibility (docs/explanation/knowledge-model.md): a neighbour or recent turn is read only when the
caller may see the observation (``scopes``), its episode's chunk (``meta.scopes``) and its episode node
(``graph_nodes.scopes``); hidden observations are skipped inside SQL, so they neither appear nor count
towards the window. The statements embed the caller's predicates, so they are composed here with
`psycopg.sql`; every value is a bound parameter.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from datetime import timedelta
from typing import Any

import psycopg
from psycopg import sql
from psycopg.rows import dict_row

from common.kernel.config import Settings
from common.storage.chunks.rows import StoredChunk
from common.storage.visibility import EVERYTHING
from common.storage.visibility import Visibility

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


@dataclass(frozen=True)
class Conversation:
    """What `EpisodeStore.conversation` reads: the hits' turns by observation id, their neighbouring turns
    and the most recent turns (newest first)."""

    turns: dict[str, EpisodeTurn]
    neighbours: list[NeighbourTurn]
    recent: list[RecentTurn]


class EpisodeStore:
    """Conversation reads over the observations and chunks tables (see the module doc)."""

    def __init__(self, settings: Settings) -> None:
        self.observations = sql.Identifier(settings.observations_table)
        self.chunks = sql.Identifier(settings.chunks_table)

    def conversation(
        self,
        conn: psycopg.Connection[Any],
        namespace: str,
        observation_ids: Sequence[str],
        *,
        origins: int,
        window: int,
        max_gap: timedelta,
        as_of: datetime,
        recent_limit: int,
        visibility: Visibility = EVERYTHING,
    ) -> Conversation:
        """In one statement (one round trip; cost): the turns of the observations among
        ``observation_ids`` that ``visibility`` may see; up to ``window`` visible turns before and
        ``window`` after each of the first ``origins`` of those turns (in the order given) in its stream, at
        most ``max_gap`` from it in time, nearest first (a turn near two origins is returned for each); and
        the ``recent_limit`` most recent visible turns that occurred at or before ``as_of``, newest first.

        Raises:
            psycopg.Error: as any statement (the callers' connection maps it).
        """
        ids = list(dict.fromkeys(observation_ids))
        statement = sql.SQL(
            "WITH hit AS (SELECT {hit_columns}, h.place FROM unnest(%(ids)s::text[]) WITH ORDINALITY AS h(id, place)"
            " JOIN {observations} o ON o.namespace = %(namespace)s AND o.observation_id = h.id"
            " WHERE {visible_hit}),"
            " origin AS (SELECT * FROM hit ORDER BY place LIMIT %(origins)s),"
            " near AS (SELECT origin.observation_id AS origin_id, origin.occurred_at AS origin_at,"
            " origin.recorded_order AS origin_order, side.* FROM origin"
            " CROSS JOIN LATERAL ({before} UNION ALL {after}) side),"
            " latest AS (SELECT {latest_columns} FROM {observations} o WHERE o.namespace = %(namespace)s"
            " AND o.occurred_at <= %(as_of)s AND {visible_latest} AND {visible_latest_node}"
            " AND EXISTS (SELECT 1 FROM {chunks} e WHERE e.namespace = %(namespace)s"
            " AND e.node_key = 'episode:' || o.observation_id)"
            " ORDER BY o.occurred_at DESC, o.recorded_order DESC LIMIT %(recent_limit)s)"
            " SELECT 'near' AS part, near.*, {chunk_columns} FROM near JOIN {chunks} c"
            " ON c.namespace = %(namespace)s AND c.node_key = 'episode:' || near.observation_id AND {visible_chunk}"
            " UNION ALL SELECT 'recent', NULL, NULL, NULL, latest.*, {chunk_columns} FROM latest JOIN {chunks} c"
            " ON c.namespace = %(namespace)s AND c.node_key = 'episode:' || latest.observation_id AND {visible_chunk}"
            " UNION ALL SELECT 'hit', NULL, NULL, NULL, {hit_turn_columns}, {no_chunk} FROM hit"
            " ORDER BY part, origin_id, occurred_at, recorded_order, chunk_chunk_order"
        ).format(
            hit_columns=_columns("o", _TURN_COLUMNS),
            observations=self.observations,
            visible_hit=visibility.array_predicate(sql.SQL("o.scopes")),
            before=self._side(visibility, before=True),
            after=self._side(visibility, before=False),
            latest_columns=_columns("o", _TURN_COLUMNS),
            chunks=self.chunks,
            visible_latest=visibility.array_predicate(sql.SQL("o.scopes")),
            visible_latest_node=visibility.node_predicate(
                sql.SQL("o.namespace"), sql.SQL("'episode:' || o.observation_id")
            ),
            chunk_columns=_chunk_columns("c"),
            visible_chunk=visibility.jsonb_predicate(sql.SQL("(c.meta -> 'scopes')")),
            hit_turn_columns=_columns("hit", _TURN_COLUMNS),
            no_chunk=sql.SQL(", ").join(sql.SQL("NULL") for _ in _CHUNK_FIELDS),
        )
        params = {
            "namespace": namespace,
            "ids": ids,
            "origins": origins if window > 0 else 0,
            "window": window,
            "max_gap": max_gap,
            "as_of": as_of,
            "recent_limit": max(recent_limit, 0),
            **visibility.params,
        }
        with conn.cursor(row_factory=dict_row) as cursor:
            rows = cursor.execute(statement, params).fetchall()
        turns: dict[str, EpisodeTurn] = {}
        near: dict[tuple[str, str], tuple[EpisodeTurn, list[StoredChunk], tuple[datetime, int]]] = {}
        latest: dict[str, tuple[EpisodeTurn, list[StoredChunk]]] = {}
        for row in rows:
            if row["part"] == "hit":
                turns[row["observation_id"]] = _turn(row)
            elif row["part"] == "near":
                key = (row["origin_id"], row["observation_id"])
                if key not in near:
                    near[key] = (_turn(row), [], (row["origin_at"], row["origin_order"]))
                near[key][1].append(_chunk(row))
            else:
                latest.setdefault(row["observation_id"], (_turn(row), []))[1].append(_chunk(row))
        recent = [RecentTurn(turn, tuple(chunks)) for turn, chunks in latest.values()]
        recent.sort(key=lambda r: r.turn.position, reverse=True)
        return Conversation(turns=turns, neighbours=_nearest_first(near), recent=recent)

    def _side(self, visibility: Visibility, *, before: bool) -> sql.Composable:
        """The visible turns on one side of ``origin`` in its stream, nearest first (`conversation`)."""
        return sql.SQL(
            "(SELECT {near_columns} FROM {observations} n WHERE n.namespace = %(namespace)s"
            " AND n.source_system = origin.source_system AND n.source_stream = origin.source_stream"
            " AND (n.occurred_at, n.recorded_order) {compare} (origin.occurred_at, origin.recorded_order)"
            " AND n.occurred_at BETWEEN origin.occurred_at - %(max_gap)s AND origin.occurred_at + %(max_gap)s"
            " AND {visible_observation} AND {visible_node}"
            " ORDER BY n.occurred_at {direction}, n.recorded_order {direction} LIMIT %(window)s)"
        ).format(
            near_columns=_columns("n", _TURN_COLUMNS),
            observations=self.observations,
            compare=sql.SQL("<" if before else ">"),
            direction=sql.SQL("DESC" if before else "ASC"),
            visible_observation=visibility.array_predicate(sql.SQL("n.scopes")),
            visible_node=visibility.node_predicate(
                sql.SQL("n.namespace"), sql.SQL("'episode:' || n.observation_id")
            ),
        )


def _nearest_first(
    near: dict[tuple[str, str], tuple[EpisodeTurn, list[StoredChunk], tuple[datetime, int]]],
) -> list[NeighbourTurn]:
    """The neighbours grouped by origin, each side numbered from the origin outwards (-1, -2 / 1, 2)."""
    by_origin: dict[str, list[tuple[EpisodeTurn, list[StoredChunk], tuple[datetime, int]]]] = {}
    for (origin_id, _), value in near.items():
        by_origin.setdefault(origin_id, []).append(value)
    out: list[NeighbourTurn] = []
    for origin_id, turns in by_origin.items():
        origin_at = turns[0][2]
        before_turns = sorted((n for n in turns if n[0].position < origin_at), key=lambda n: n[0].position)
        after_turns = sorted((n for n in turns if n[0].position > origin_at), key=lambda n: n[0].position)
        for index, (turn, chunks, _) in enumerate(reversed(before_turns)):
            out.append(NeighbourTurn(origin_id, -(index + 1), turn, tuple(chunks)))
        for index, (turn, chunks, _) in enumerate(after_turns):
            out.append(NeighbourTurn(origin_id, index + 1, turn, tuple(chunks)))
    return out


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


__all__ = ["Conversation", "EpisodeStore", "EpisodeTurn", "NeighbourTurn", "RecentTurn"]

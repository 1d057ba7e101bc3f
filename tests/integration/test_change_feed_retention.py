"""The change feed's retention on a database of its own (it prunes every namespace): the ingest
service's pruner deletes changes past the age limit and, per namespace, beyond the size limit, in bounded
batches, and records per namespace the highest cursor pruned; the page read reports it in its snapshot."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC
from datetime import datetime

import pytest

from common.kernel.config import Settings
from common.storage.change_feed.outbox import ChangeInput
from common.storage.change_feed.outbox import ChangeOutbox
from common.storage.database import Database
from common.storage.schema import migrations
from common.storage.visibility import EVERYTHING
from ingest_service.change_feed.pruner import ChangeFeedPruner

pytestmark = pytest.mark.timeout(300)


@pytest.fixture
def fresh_database(fresh_settings: Settings) -> Iterator[Database]:
    database = Database(fresh_settings.model_copy(update={"change_feed_max_events": 100}))
    migrations.apply(database)
    yield database
    database.close()


def _record(database: Database, namespace: str, count: int) -> None:
    with database.connection() as conn:
        ChangeOutbox(database).append(
            conn,
            [
                ChangeInput(namespace=namespace, event_type="document.retained", item_key=f"doc:{i}")
                for i in range(count)
            ],
        )


def test_the_pruner_keeps_the_newest_per_namespace_and_drops_what_is_too_old(
    fresh_database: Database,
) -> None:
    _record(fresh_database, "big", 250)
    _record(fresh_database, "small", 30)
    _record(fresh_database, "old", 20)
    with fresh_database.connection() as conn:
        conn.execute(
            "UPDATE change_events SET committed_at = now() - interval '30 days' WHERE namespace = 'old'"
            " AND cursor <= 15"
        )
    pruner = ChangeFeedPruner(fresh_database)
    assert pruner.prune_once() == 150 + 15
    outbox = ChangeOutbox(fresh_database)
    assert outbox.head("big") == (250, 150)
    assert outbox.head("small") == (30, 0)
    assert outbox.head("old") == (20, 15)
    page = outbox.read_page("big", 0, visibility=EVERYTHING, limit=1000)
    assert [c.cursor for c in page.changes] == list(range(151, 251))
    assert page.pruned_through == 150
    assert pruner.prune_once() == 0, "a second round has nothing left to do"


def test_pruning_in_batches_deletes_as_much_as_one_statement(fresh_database: Database) -> None:
    _record(fresh_database, "batched", 260)
    outbox = ChangeOutbox(fresh_database)
    deleted = outbox.prune(before=datetime(2000, 1, 1, tzinfo=UTC), max_events=100, batch=40)
    assert deleted == 160
    assert outbox.head("batched") == (260, 160)

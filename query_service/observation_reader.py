"""GetObservation in domain form (seed 000 "Наблюдения"): one stored observation with its status.

Transport free; `query_service.query_servicers.ObservationQueryService` maps it onto memory.v1.
"""

from __future__ import annotations

from common.db import Database
from common.errors import NotFound, ViolationCollector
from common.observation_view import ObservationView, observation_view
from common.storage.observation_store import ObservationStore
from common.storage.visibility import EVERYTHING, Visibility


class ObservationReader:
    """Reads stored observations."""

    def __init__(self, database: Database) -> None:
        self.database = database
        self.observations = ObservationStore(database.settings)

    def get_observation(
        self, namespace: str, observation_id: str, *, visibility: Visibility = EVERYTHING
    ) -> ObservationView:
        """The observation ``observation_id`` of ``namespace`` with its processing status.

        An observation ``visibility`` may not see is reported exactly like an absent one (NotFound).

        Raises:
            InvalidArgument: empty ``namespace`` or ``observation_id``.
            NotFound: no such observation in that namespace (never stored, failed validation, or purged).
            Unavailable: the database cannot be reached.
        """
        check = ViolationCollector()
        if not namespace.strip():
            check.add("namespace", "required")
        if not observation_id.strip():
            check.add("observation_id", "required")
        check.raise_if_any()
        with self.database.connection() as conn:
            row = self.observations.get(conn, namespace, observation_id, visibility=visibility)
        if row is None:
            raise NotFound(f"observation {observation_id} not found in namespace {namespace}")
        return observation_view(row)

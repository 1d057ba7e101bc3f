"""GetObservation in domain form (docs/explanation/knowledge-model.md): one stored observation with its
status, and the disclosure of its personal data (`disclose_observation`).

Transport free; `query_service.servicers.observation_query_servicer.ObservationQueryServicer` maps it onto memory.v1.
"""

from __future__ import annotations

from dataclasses import replace

from common.domain.observation_view import ObservationView
from common.domain.observation_view import observation_view
from common.kernel.errors import NotFound
from common.kernel.errors import ViolationCollector
from common.kernel.pii import PiiMarks
from common.storage.database import Database
from common.storage.graph.store import GraphStore
from common.storage.observation_store import ObservationStore
from common.storage.visibility import EVERYTHING
from common.storage.visibility import Visibility
from query_service.pii_output import NO_PII_POLICY
from query_service.pii_output import PiiDisclosure
from query_service.pii_output import PiiGuard
from query_service.pii_output import PiiPolicy
from query_service.pii_output import withheld_text

# The fields of an observation that a withholding mark replaces (the rest is masked by patterns).
WITHHELD_FIELDS = ("content", "data", "assertions")


class ObservationReader:
    """Reads stored observations."""

    def __init__(self, database: Database) -> None:
        self.database = database
        self.observations = ObservationStore(database.settings)
        self.graph = GraphStore(database)
        self.pii = PiiGuard(database)

    def get_observation(
        self,
        namespace: str,
        observation_id: str,
        *,
        visibility: Visibility = EVERYTHING,
        pii: PiiPolicy = NO_PII_POLICY,
    ) -> ObservationView:
        """The observation ``observation_id`` of ``namespace`` with its processing status.

        An observation ``visibility`` may not see is reported exactly like an absent one (NotFound).
        ``pii`` is the caller's personal data policy: with protection on, the marks of the observation's
        episode node decide whether its content is masked or withheld, and a cleared caller's access is
        audited (`disclose_observation`).

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
            marks = PiiMarks()
            if row is not None and pii.protection:
                episode = self.graph.get_node(conn, namespace, f"episode:{observation_id}")
                marks = PiiMarks.from_props((episode or {}).get("props"))
        if row is None:
            raise NotFound(f"observation {observation_id} not found in namespace {namespace}")
        view = observation_view(row)
        return self.pii.disclose(
            namespace, pii, lambda disclosure: disclose_observation(disclosure, view, marks)
        )


def disclose_observation(
    disclosure: PiiDisclosure, view: ObservationView, marks: PiiMarks
) -> ObservationView:
    """An observation as ``disclosure``'s caller may see it (`query_service.pii_output`); ``marks`` are its
    episode's. Withheld: content becomes `withheld_text`, data ``{}`` and assertions ``[]``; every other
    field (participants, source, provenance) is masked by patterns."""
    if not disclosure.policy.protection:
        return view
    fields = dict(view.fields)
    if disclosure.withholds(marks):
        fields.update(content=withheld_text(marks), data={}, assertions=[])
        fields = {
            name: value if name in WITHHELD_FIELDS else disclosure.value(value)
            for name, value in fields.items()
        }
    else:
        fields = disclosure.value(fields, marks=marks, observation_ids=(view.observation_id,))
    return replace(view, fields=fields)

"""One enrichment job: one version of one memory through an `Enricher` into its node, its row and the
graph (docs/how-to/memory-records.md). Run by the worker (`ingest_service.memories.enrichment.queue`).

`EnrichmentJob.run(namespace, memory_id, version)`:

1. reads the memory at ``version`` (`common.domain.memory_records.MemoryEnrichment.read`): nothing to do
   (returns False) when the memory is gone, has a newer version (a stale job) or that version is
   enriched already (a repeated delivery);
2. enriches its text (the namespace's domain packs name identifiers too);
3. in one transaction, only if ``version`` is still current and not enriched yet (the memory's row
   locked), links the memory to its entities: ``memory MENTIONS entity`` facts through
   `ingest_service.facts.mentions.MentionLinker.link_entities` (so through `FactEngine`), the
   entity nodes created as placeholders carrying the memory's owner scope, evidence ``extracted`` (rule
   enricher) or ``inferred`` (LLM enricher); the text is the memory's whole text, so entities an earlier
   version named and this one does not are closed. Idempotent: open mentions are left alone;
4. and writes the fields (`MemoryEnrichment.write`): the node's ``key_points``, ``insights``,
   ``entities`` (names as written), ``topics``, ``quality_score`` and the row's ``memory_type`` (only when
   the caller set none), ``quality_score`` and ``enriched_version``.

A crash before the commit leaves the version due with nothing of the job written; the retry does it all.
A job whose version went stale after 1 writes nothing.
"""

from __future__ import annotations

import logging
from datetime import UTC
from datetime import datetime

from common.domain.memory_records import EnrichmentFields
from common.domain.memory_records import MemoryEnrichment
from common.packs.kind_validation import KindValidator
from common.storage.database import Database
from common.storage.graph.store import GraphStore
from ingest_service.facts.mentions import MentionLinker
from ingest_service.facts.mentions import MentionSource
from ingest_service.memories.enrichment.model import Enricher
from ingest_service.memories.enrichment.model import Enrichment
from ingest_service.memories.enrichment.model import MemoryText

log = logging.getLogger(__name__)


class EnrichmentJob:
    """Runs enrichment jobs (see the module doc). Thread-safe: the worker calls `run` from its threads.

    Args:
        database: the worker's database.
        enricher: the enricher (`ingest_service.memories.enrichment.factory.build_enricher`).
    """

    def __init__(self, database: Database, enricher: Enricher) -> None:
        self.database = database
        self.enricher = enricher
        self.memories = MemoryEnrichment(database)
        self.linker = MentionLinker(GraphStore(database))
        self.kinds = KindValidator(database)

    def run(self, namespace: str, memory_id: str, version: int) -> bool:
        """Enriches ``version`` of the memory; True when this call wrote it, False when there was
        nothing to do (gone, stale, already enriched).

        Raises:
            Unavailable: the database is unreachable (the queue retries the job).
        """
        memory = self.memories.read(namespace, memory_id, version)
        if memory is None:
            return False
        kinds = self.kinds.for_namespace(namespace)
        result = self.enricher.enrich(MemoryText(memory.text, kinds=kinds))
        now = datetime.now(UTC)
        source = MentionSource(
            namespace=namespace,
            natural_key=memory_id,
            texts=[memory.text],
            scopes=memory.scopes,
            source_path=f"memory:{memory_id}",
            complete=True,
        )
        written = self.memories.write(
            namespace,
            memory_id,
            version,
            fields_of(result),
            also=lambda conn: self.linker.link_entities(
                conn,
                source,
                [entity.natural_key for entity in result.entities],
                evidence=result.evidence,
                now=now,
            ),
        )
        if written:
            log.info(
                "enriched %s/%s v%d: %s, %d entities (%s)",
                namespace,
                memory_id,
                version,
                result.memory_type,
                len(result.entities),
                result.enricher,
            )
        return written


def fields_of(result: Enrichment) -> EnrichmentFields:
    """The memory fields of an `Enrichment` (entities by name; their keys, the enricher and the
    evidence class go to the node's props ``entity_keys``, ``enricher``, ``enrichment_evidence``)."""
    return EnrichmentFields(
        key_points=result.key_points,
        insights=result.insights,
        entities=[entity.name for entity in result.entities],
        topics=result.topics,
        memory_type=result.memory_type,
        quality_score=result.quality_score,
        extra={
            "entity_keys": [entity.natural_key for entity in result.entities],
            "enricher": result.enricher,
            "enrichment_evidence": result.evidence,
            "language": result.language,
        },
    )

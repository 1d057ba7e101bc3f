"""Where a read-side output came from: `Provenance`, the domain form of memory.v1.Provenance, carried by
search hits (`query_service.retrieval.hybrid_search.SearchHit`) and context pack items (`query_service.context.pack`).
Transport free; `query_service.servicers.read_transport.provenance_to_proto` maps it onto the message.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from dataclasses import field
from typing import Any

from common.storage.fact_rows import FactRow


@dataclass(frozen=True)
class Provenance:
    """Where an item came from.

    Attributes:
        node_key: the node it belongs to (a fact's: its subject).
        source_path: the source file or path recorded on write ("" when none).
        observation_ids: the observations behind it.
        fact_id: the fact's id, for a fact item ("" otherwise).
        chunk_order: the chunk's position in its node, for a chunk (0 otherwise).
        metadata: the provenance map stored with the node (repository, commit, author, ...).
        citation: for a chunk of a document converted from a file, the file and the place
            ("manual.pdf, p. 12"; the chunk's ``meta.citation``), else "".
    """

    node_key: str
    source_path: str = ""
    observation_ids: tuple[str, ...] = ()
    fact_id: str = ""
    chunk_order: int = 0
    metadata: Mapping[str, Any] = field(default_factory=dict)
    citation: str = ""

    @classmethod
    def of_fact(cls, row: FactRow) -> Provenance:
        """The provenance of a fact item: its subject, source path, evidence observations and id (of
        ``row`` as the caller may see it)."""
        return cls(
            node_key=row.subject_key,
            source_path=row.source_path,
            observation_ids=tuple(row.observation_ids),
            fact_id=row.fact_id,
        )


def chunk_citation(meta: Mapping[str, Any] | None) -> str:
    """The citation a chunk of a converted document carries in its meta ("manual.pdf, p. 12"), or ""."""
    value = (meta or {}).get("citation")
    return value if isinstance(value, str) else ""

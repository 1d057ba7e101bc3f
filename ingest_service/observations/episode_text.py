"""What an observation's episode says in text, and whom it links to (docs/explanation/knowledge-model.md:
episodes, entities and observations).

**The episode text** (`episode_pieces`): the searchable and rendered text of an episode chunk is a header
line, then the observation's content, then the scalar fields of ``data``::

    2023-05-08 13:56 · Caroline · conversation:locomo-26
    I went to the LGBTQ support group yesterday ...

    version: 2.36-9+deb12u4; urgency: low

The header (`common.domain.episode_header.episode_header`) is ``<occurred_at as YYYY-MM-DD HH:MM, UTC> · <actor id> · <subject
type:id>``, a part left out when the observation has no actor or subject. So "what did Caroline say" finds
the speaker's turns by full text, and "when did ..." is answered from the text of a search hit or a pack
item. Every chunk of a long episode repeats the header (each chunk is found and rendered alone). An
observation with neither content nor scalar data (a redacted one) has no episode text: a header alone is
not worth a chunk.

**The participants** (`participant_facts`): the actor and the subject become nodes (``type:id``, e.g.
``person:caroline``; placeholders, completed by any entity assertion of that key) linked to the episode by
one fact each, ``episode:<observation_id> ACTOR <actor key>`` and ``episode:<observation_id> SUBJECT
<subject key>``, named after the observation's own fields. The facts are ``asserted``
(docs/explanation/knowledge-model.md: the source states its participants as structured fields), confidence
1.0, valid from the observation's occurred_at (so their fact_ids are the same on every replay and in any
order), proven by the observation (redaction re-proves them, a purge deletes them with the episode:
`ingest_service.observations.removal`), with the observation's scopes and source path, so the participant
placeholders inherit the observation's restricting scopes (`common.domain.scope_inheritance`). Keys are
resolved by the namespace's domain packs like any fact end. With CB_PII_PROTECTION, a participant whose key
holds detected personal data (an e-mail address as actor id) gets no node: natural keys are shown unmasked
everywhere; the episode and its chunks carry the marks instead.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from datetime import datetime
from typing import Any

from common.domain.episode_header import ACTOR
from common.domain.episode_header import SUBJECT
from common.domain.episode_header import episode_header
from common.domain.episode_header import participant_key
from common.kernel.pii import detect_value
from common.packs.kind_validation import NamespaceKinds
from ingest_service.documents.chunking import bounded_chunks
from ingest_service.documents.chunking import chunk_markdown
from ingest_service.facts.engine import FactInput

PARTICIPANT_EVIDENCE = "asserted"
PARTICIPANT_CONFIDENCE = 1.0
# A line that may start a Markdown section (ATX heading, setext underline): such a body is cut by sections.
_SECTION_MARK = re.compile(r"^ {0,3}(#{1,6}(\s|$)|=+\s*$|-+\s*$)", re.MULTILINE)


def episode_body(content: str, data: Mapping[str, Any]) -> str:
    """The content, then the scalar fields of ``data`` (``version: 2.36-9+deb12u4``; sorted by name), so
    identifiers in the payload are found by full text and trigram search."""
    scalars = [
        f"{key}: {value}" for key, value in sorted(data.items()) if isinstance(value, (str, int, float, bool))
    ]
    parts = [content.strip(), "; ".join(scalars)]
    return "\n\n".join(part for part in parts if part)


def episode_pieces(
    *,
    kind: str,
    occurred_at: datetime,
    actor: Mapping[str, Any] | None,
    subject: Mapping[str, Any] | None,
    content: str,
    data: Mapping[str, Any],
    limit: int,
) -> list[tuple[str, str]]:
    """The episode's chunks as ``(heading, text)``: the body cut like a document (sections, then at most
    ``2 * limit`` characters; changelog entries reach 85 KB, so one episode cannot dominate full-text
    ranking or a context budget), each text starting with the header line. Empty without a body."""
    body = episode_body(content, data)
    if not body:
        return []
    if len(body) <= limit and not _SECTION_MARK.search(body):
        pieces = [(kind, body)]  # what the Markdown cut gives for it, without parsing (most episodes)
    else:
        pieces = bounded_chunks(
            [(chunk.heading or kind, chunk.text) for chunk in chunk_markdown(body, limit)], 2 * limit
        ) or [(kind, body)]
    header = episode_header(occurred_at, actor, subject)
    return [(heading, f"{header}\n{text}") for heading, text in pieces]


def participant_facts(
    *,
    namespace: str,
    episode_key: str,
    observation_id: str,
    occurred_at: datetime,
    actor: Mapping[str, Any] | None,
    subject: Mapping[str, Any] | None,
    scopes: list[str],
    source_path: str,
    kinds: NamespaceKinds | None,
    pii_protection: bool,
) -> list[FactInput]:
    """The ACTOR and SUBJECT facts of an episode (see the module doc), in that order; a missing
    participant, or one whose key holds detected personal data under ``pii_protection``, has none."""
    facts = []
    for predicate, participant in ((ACTOR, actor), (SUBJECT, subject)):
        key = participant_key(participant)
        if not key or (pii_protection and detect_value(key)):
            continue
        if kinds is not None and kinds.active:
            key = kinds.resolve_key(key)
        facts.append(
            FactInput(
                field=predicate.lower(),
                namespace=namespace,
                subject=episode_key,
                predicate=predicate,
                object=key,
                valid_from=occurred_at,
                evidence=PARTICIPANT_EVIDENCE,
                confidence=PARTICIPANT_CONFIDENCE,
                scopes=list(scopes),
                observation_id=observation_id,
                source_path=source_path,
            )
        )
    return facts

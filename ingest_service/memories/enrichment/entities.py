"""The entities of a memory (docs/how-to/memory-records.md: people, organisations, products, ids), from
three sources, merged in this order (the first source naming a natural key wins):

1. ``pack``: the identifiers of the namespace's domain packs (``kinds[].idPatterns``, RE2, through
   `common.packs.identifier_patterns.find_identifiers`, as the MENTIONS links of observations): their
   natural key is the pack's (``issue:PROJ-12``);
2. ``pattern``: the id rule `LABELLED_ID`: a capitalised word followed by a number of at least 3 digits,
   optionally after ``#`` or ``№`` ("Customer 8821", "Order #55012", "Заказ №4411") is the identifier
   of kind ``identifier``, key ``identifier:<word lower case> <number>`` (``identifier:customer 8821``);
3. ``ner``: the language model's recogniser (`ingest_service.memories.enrichment.language_models`): persons,
   organisations, products, locations, key ``<kind>:<name>`` (``person:Alice``). A recognised span that
   is only the word of a labelled id ("Customer") or lies inside one is dropped.

At most `MAX_ENTITIES` entities per memory.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from common.kernel.identifiers import MAX_KEY_LENGTH
from common.kernel.identifiers import entity_key
from common.packs.identifier_patterns import find_identifiers
from common.packs.kind_validation import NamespaceKinds
from ingest_service.memories.enrichment.language_models import RecognisedEntity
from ingest_service.memories.enrichment.model import Entity

MAX_ENTITIES = 30
LABELLED_ID = re.compile(r"(?<!\w)([A-ZА-ЯЁ][a-zа-яё]{2,24})\s?(?:#|№\s?)?(\d{3,18})(?!\w)")
IDENTIFIER_KIND = "identifier"


def labelled_ids(text: str) -> list[Entity]:
    """The "Word 1234" identifiers of ``text`` (rule 2 of the module doc), in text order."""
    found = []
    for match in LABELLED_ID.finditer(text):
        label, number = match.group(1), match.group(2)
        found.append(
            Entity(
                name=f"{label} {number}",
                kind=IDENTIFIER_KIND,
                natural_key=entity_key(IDENTIFIER_KIND, f"{label.lower()} {number}"),
                source="pattern",
            )
        )
    return found


def collect_entities(
    text: str,
    recognised: Sequence[RecognisedEntity],
    kinds: NamespaceKinds | None,
    *,
    source: str = "ner",
) -> tuple[Entity, ...]:
    """The merged, distinct entities of ``text`` (see the module doc); ``recognised`` are the
    recogniser's (``source`` ``ner``) or the LLM's (``llm``) entities."""
    entities: dict[str, Entity] = {}
    if kinds is not None:
        for match in find_identifiers(kinds, [text]):
            entities.setdefault(
                match.natural_key, Entity(match.matched, match.kind, match.natural_key, "pack")
            )
    ids = labelled_ids(text)
    for entity in ids:
        entities.setdefault(entity.natural_key, entity)
    id_words = {entity.name.split(" ")[0].lower() for entity in ids}
    id_names = [entity.name for entity in ids]
    for span in recognised:
        if span.name.lower() in id_words or any(span.name in name for name in id_names):
            continue
        key = entity_key(span.kind, span.name)
        if len(key) <= MAX_KEY_LENGTH:
            entities.setdefault(key, Entity(span.name, span.kind, key, source))
    return tuple(entities.values())[:MAX_ENTITIES]

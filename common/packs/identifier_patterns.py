"""Identifiers of domain-pack kinds found in text (docs/how-to/domain-packs.md:
``kinds[].idPatterns``). Used at write time by `ingest_service.facts.mentions` (MENTIONS
links) and at read time by CompileTypedContext (anchors named in the query text).

**Finding identifiers** (`find_identifiers`, also used by CompileTypedContext to find anchors in the
query text). Every ``idPatterns`` regular expression of every kind of the namespace's enabled packs runs
over the text. A match becomes the id part of a natural key:

* when the pattern has named groups that cover every placeholder of the kind's ``naturalKey`` template,
  the template is filled with them (kind ``issue``, template ``PROJ-<number>``, pattern
  ``PROJ-(?P<number>[0-9]+)``: "see PROJ-12" -> ``PROJ-12``);
* otherwise the whole match is the id ("see PROJ-12" with pattern ``PROJ-[0-9]+`` -> ``PROJ-12``);
* then the kind's ``aliases`` map an alternative id to the canonical one, and an id that does not fit
  the kind's ``naturalKey`` (template or JSON Schema) is not an identifier of that kind.

The natural key is ``<kind>:<id>`` (``issue:PROJ-12``). Results are distinct keys in text order, at most
``limit`` of them (`MAX_IDENTIFIERS_PER_ITEM`); each pattern yields at most ``limit`` matches per text.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from common.packs.domain_packs import CompiledKind
from common.packs.domain_packs import fill_template
from common.packs.kind_validation import NamespaceKinds
from common.packs.kind_validation import key_fits

MENTIONS = "MENTIONS"
MAX_IDENTIFIERS_PER_ITEM = 100
"""At most this many distinct identifiers are taken from one item (an observation, a document write)."""


@dataclass(frozen=True)
class IdentifierMatch:
    """An identifier found in text: its canonical natural key, the kind, and the text matched."""

    natural_key: str
    kind: str
    matched: str


def identifier_id(kind: CompiledKind, groups: dict[str, str | Any], matched: str) -> str | None:
    """The canonical id of a match of one of ``kind``'s idPatterns (see the module doc), or None when it
    does not fit the kind's naturalKey."""
    id_: str | None = matched
    if kind.key_template is not None and set(kind.key_template.groupindex) <= {
        name for name, value in groups.items() if value is not None
    }:
        id_ = fill_template(kind.key_template_text, {k: str(v) for k, v in groups.items() if v is not None})
    if not id_:
        return None
    id_ = kind.aliases.get(id_, id_)
    return id_ if key_fits(kind, id_) else None


def find_identifiers(
    kinds: NamespaceKinds, texts: Iterable[str], *, limit: int = MAX_IDENTIFIERS_PER_ITEM
) -> list[IdentifierMatch]:
    """Distinct natural keys of pack kinds named in ``texts`` by their idPatterns, in text order (texts in
    the given order), at most ``limit``. Nothing when the namespace has no packs."""
    pack_kinds = list({kind.kind: kind for kind in kinds.kinds.values() if kind.id_patterns}.values())
    if not pack_kinds or limit <= 0:
        return []
    found: dict[str, IdentifierMatch] = {}
    for text in texts:
        if not text:
            continue
        matches = []
        for kind in pack_kinds:
            for pattern in kind.id_patterns:
                for match in itertools.islice(pattern.finditer(text), limit):
                    if match.group(0):
                        matches.append((match.start(), kind.kind, match, kind))
        matches.sort(key=lambda entry: (entry[0], entry[1]))
        for _, kind_name, match, kind in matches:
            id_ = identifier_id(kind, match.groupdict(), match.group(0))
            if id_ is None:
                continue
            key = f"{kind_name}:{id_}"
            if key not in found:
                found[key] = IdentifierMatch(key, kind_name, match.group(0))
                if len(found) >= limit:
                    return list(found.values())
    return list(found.values())

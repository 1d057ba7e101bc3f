"""Topics and key points of a memory: keyword extraction (yake) and key-sentence extraction (sumy's
TextRank) over the sentences of `ingest_service.memories.enrichment.language_models.analyse`.

* **topics**: YAKE! (Campos et al., "YAKE! Keyword extraction from single documents using multiple local
  features", Information Sciences 509, 2020), n-grams of at most `TOPIC_MAX_WORDS` words in the text's
  language, deduplicated (yake's own Levenshtein threshold `TOPIC_DEDUPLICATION`), lower-cased, most
  relevant first (YAKE's score: lower is better), at most `MAX_TOPICS`, keeping only keywords whose
  every word the tagger marked as a noun, proper noun or adjective (a topic labels a thing);
* **key_points**: a text of at most `ALL_SENTENCES_UP_TO` sentences keeps them all; a longer one keeps
  its `MAX_KEY_POINTS` most central sentences by TextRank (Mihalcea and Tarau, "TextRank: Bringing Order
  into Texts", EMNLP 2004) in text order. Sentences of fewer than `MIN_KEY_POINT_WORDS` words are never
  key points (greetings, "Thanks.").
"""

from __future__ import annotations

import functools
import re
from collections.abc import Sequence
from typing import Any

MAX_TOPICS = 5
TOPIC_MAX_WORDS = 2
TOPIC_DEDUPLICATION = 0.7
MAX_KEY_POINTS = 3
ALL_SENTENCES_UP_TO = 3
MIN_KEY_POINT_WORDS = 3
_WORD = re.compile(r"\w+", re.UNICODE)
_STEMMER_LANGUAGE = {"en": "english", "ru": "russian"}


def words(text: str) -> list[str]:
    """The word tokens of ``text`` (letters, digits, underscore)."""
    return _WORD.findall(text)


@functools.cache
def _keyword_extractor(language: str) -> Any:
    import yake

    return yake.KeywordExtractor(
        lan=language, n=TOPIC_MAX_WORDS, dedupLim=TOPIC_DEDUPLICATION, top=MAX_TOPICS * 2
    )


def topics(text: str, language: str, nominal_words: frozenset[str]) -> tuple[str, ...]:
    """At most `MAX_TOPICS` keywords of ``text`` (lower case, distinct, best first) made only of
    ``nominal_words`` (the tagger's nouns, proper nouns and adjectives: "login failures" is a topic,
    "reported login" is not); see the module doc."""
    if not words(text):
        return ()
    found: dict[str, None] = {}
    for keyword, _score in _keyword_extractor(language).extract_keywords(text):
        label = " ".join(keyword.lower().split())
        if label and all(word in nominal_words for word in words(label)):
            found.setdefault(label, None)
    return tuple(found)[:MAX_TOPICS]


class _WordTokenizer:
    """sumy's tokenizer interface over sentences already split by the language model."""

    def __init__(self, language: str) -> None:
        self.language = language

    def to_sentences(self, paragraph: str) -> tuple[str, ...]:
        return (paragraph,)

    def to_words(self, sentence: str) -> tuple[str, ...]:
        return tuple(words(sentence))


@functools.cache
def _summarizer(language: str) -> Any:
    from sumy.nlp.stemmers import Stemmer
    from sumy.summarizers.text_rank import TextRankSummarizer

    summarizer = TextRankSummarizer(Stemmer(_STEMMER_LANGUAGE[language]))
    summarizer.stop_words = _stop_words(language)
    return summarizer


def _stop_words(language: str) -> frozenset[str]:
    """yake's stop-word list of the language (sumy ships none for Russian)."""
    from importlib import resources

    name = f"stopwords_{language}.txt"
    text = resources.files("yake.core").joinpath("StopwordsList", name).read_text("utf-8", errors="ignore")
    return frozenset(line.strip().lower() for line in text.splitlines() if line.strip())


def key_points(sentences: Sequence[str], language: str) -> tuple[str, ...]:
    """The key sentences of a text given as ``sentences``, in text order (see the module doc)."""
    candidates = [s for s in sentences if len(words(s)) >= MIN_KEY_POINT_WORDS]
    if len(candidates) <= ALL_SENTENCES_UP_TO:
        return tuple(candidates)
    from sumy.models.dom import ObjectDocumentModel
    from sumy.models.dom import Paragraph
    from sumy.models.dom import Sentence

    tokenizer = _WordTokenizer(language)
    document = ObjectDocumentModel([Paragraph([Sentence(s, tokenizer) for s in candidates])])
    chosen = {str(sentence) for sentence in _summarizer(language)(document, MAX_KEY_POINTS)}
    return tuple(s for s in candidates if s in chosen)

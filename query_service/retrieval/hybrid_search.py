"""Hybrid retrieval over chunks: vector + full text + trigram, fused into one ranking
(docs/explanation/retrieval.md).

Fusion (`query_service.retrieval.rank_fusion`): weighted reciprocal rank fusion (Cormack, Clarke, Büttcher, SIGIR
2009), ``sum over rankings m of weight_m / (k + rank_m)`` with 1-based ranks, or a convex combination of
each ranking's normalised scores (Bruch et al. 2023); a chunk absent from a ranking contributes nothing
for it. Then, when the preset asks for it, similar-chunk propagation: a candidate nearly identical (by
embedding) to a better hit scores at least a share of that hit's score. Each ranking holds at most
``SearchSettings.candidates`` chunks and is computed with every filter applied inside its query
(`common.storage.chunks.rankings`), so filters never starve the result.

Search is configured as data: `SearchSettings` with named presets in `SEARCH_PRESETS` (``"default"``),
not flags threaded through calls. Personal data: hits leave through the caller's disclosure
(`disclose_hit`, `disclose_chunk`; `query_service.pii_output`). This module is transport free.
"""

from __future__ import annotations

import contextvars
from collections.abc import Callable
from collections.abc import Mapping
from collections.abc import Sequence
from concurrent.futures import Future
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures import wait
from dataclasses import dataclass
from dataclasses import field
from dataclasses import replace
from typing import Any
from typing import TypeVar

import psycopg

from common.kernel.errors import ViolationCollector
from common.kernel.pii import PiiMarks
from common.storage.chunks.rows import Candidate
from common.storage.chunks.rows import ChunkFilter
from common.storage.chunks.rows import StoredChunk
from common.storage.chunks.store import ChunkStore
from common.storage.chunks.store import meta_observation_ids
from common.storage.context_store import ContextStore
from common.storage.context_store import NodeSummary
from common.storage.database import Database
from common.storage.graph.store import GraphStore
from common.storage.visibility import EVERYTHING
from common.storage.visibility import Visibility
from common.text_models.embeddings.provider import QueryEncoder
from common.text_models.embeddings.relevance import MIN_RELEVANT_SIMILARITY
from query_service.pii_output import NO_PII_POLICY
from query_service.pii_output import PiiDisclosure
from query_service.pii_output import PiiGuard
from query_service.pii_output import PiiPolicy
from query_service.pii_output import withheld_text
from query_service.provenance import Provenance
from query_service.provenance import chunk_citation
from query_service.retrieval.rank_fusion import CONVEX
from query_service.retrieval.rank_fusion import FUSIONS
from query_service.retrieval.rank_fusion import HEADING
from query_service.retrieval.rank_fusion import RANKINGS
from query_service.retrieval.rank_fusion import RRF
from query_service.retrieval.rank_fusion import TEXT
from query_service.retrieval.rank_fusion import TRIGRAM
from query_service.retrieval.rank_fusion import VECTOR
from query_service.retrieval.rank_fusion import VERBATIM
from query_service.retrieval.rank_fusion import convex_combination
from query_service.retrieval.rank_fusion import heading_ranking
from query_service.retrieval.rank_fusion import propagate_to_similar
from query_service.retrieval.rank_fusion import reciprocal_rank_fusion
from query_service.retrieval.rank_fusion import verbatim_ranking

MAX_TOP_K = 100
DEFAULT_TOP_K = 10
MAX_QUERY_CHARS = 4000
MAX_FILTER_ITEMS = 1000
Ranked = TypeVar("Ranked")  # what one connection's rankings return (`HybridSearcher._ranking`)
MAX_POOL = 10_000  # every fused candidate (3 rankings of at most `candidates` each)


@dataclass(frozen=True)
class SearchSettings:
    """How a search is run.

    Attributes:
        fusion: ``"rrf"``, weighted reciprocal rank fusion, or ``"convex"``, the weighted sum of each
            ranking's score relative to its best one (`query_service.retrieval.rank_fusion`).
        rrf_k: the ``k`` of reciprocal rank fusion (60 in Cormack et al.; a smaller ``k`` gives the first
            ranks of each ranking more say); unused by convex fusion.
        candidates: chunks taken from each ranking before fusion.
        vector_weight, text_weight, trigram_weight: weight of each ranking in the fused score.
        heading_weight: weight of the heading ranking (`query_service.retrieval.rank_fusion.heading_ranking`):
            the full-text candidates whose section heading holds every query lexeme; 0: not fused.
        verbatim_weight: weight of the verbatim ranking (`query_service.retrieval.rank_fusion.verbatim_ranking`):
            the trigram candidates holding the whole query verbatim (a pasted sentence of at least
            ``trigram_whole_query_min_words`` words); 0: not fused. Weight 2 puts such a chunk above one
            that two other rankings place first. It takes no part in `max_score`: the maximum stays that
            of a query quoting nothing, and a quoted chunk's relative score is capped at 1 where it is used.
        text_min_share: a full-text candidate takes part in fusion only when its BM25 score is at least
            this share of the best one of the query (0: all): a chunk sharing one common word with the
            query is weak evidence, and in RRF it pushes the vector ranking's finds (the other language's
            page, a paraphrase) down by rank alone.
            Convex fusion needs no such floor (a weak candidate adds its small share) and ignores it.
        vector_min_similarity: a vector candidate takes part in fusion only when its cosine similarity
            with the query is at least this (`common.text_models.embeddings.relevance`): the vector
            ranking always returns ``candidates`` chunks, related or not, so without it a query nothing
            matches (an identifier no chunk names) returns the whole namespace. Lexical hits stay.
        similar_threshold, similar_share: similar-chunk propagation (`query_service.retrieval.rank_fusion`): a
            candidate whose embedding has at least ``similar_threshold`` cosine similarity with one of the
            ``similar_sources`` (at most ``top_k``) best fused hits scores at least ``similar_share`` times
            that hit's score (share 0: off; one more statement per search, sources x candidates cosines).
        trigram_max_query_chars: queries up to this length are also matched whole, as a case-insensitive
            substring, looked up as a phrase through the full-text index (`ChunkRankings.trigram_candidates`);
            0: only the identifier-like tokens of the query. A pasted sentence needs it
            (docs/decisions/0022-search-presets.md).
        trigram_whole_query_min_words: the whole query is matched only when it has at least this many words:
            a pasted sentence, not a question or a title, which documents cite (FAQ answers name other
            questions by their title; docs/decisions/0022-search-presets.md).
        node_provenance: attach each hit's node provenance (``props.provenance``; one Cypher per label).
        concurrent_rankings: run the full-text and trigram rankings on a worker thread while the query is
            embedded and the vector ranking runs (False: one after another on the calling thread, the
            baseline `bench/run_bench.py` measures in the same run).
    """

    fusion: str = RRF
    rrf_k: int = 10
    candidates: int = 50
    vector_weight: float = 1.0
    text_weight: float = 1.0
    trigram_weight: float = 1.0
    heading_weight: float = 1.0
    verbatim_weight: float = 2.0
    text_min_share: float = 0.2
    vector_min_similarity: float = MIN_RELEVANT_SIMILARITY
    similar_threshold: float = 0.85
    similar_share: float = 0.0
    similar_sources: int = 10
    trigram_max_query_chars: int = 1000
    trigram_whole_query_min_words: int = 8
    node_provenance: bool = True
    concurrent_rankings: bool = True

    @property
    def weights(self) -> dict[str, float]:
        return {
            VECTOR: self.vector_weight,
            TEXT: self.text_weight,
            HEADING: self.heading_weight,
            TRIGRAM: self.trigram_weight,
            VERBATIM: self.verbatim_weight,
        }

    def __post_init__(self) -> None:
        if self.fusion not in FUSIONS:
            raise ValueError(f"fusion must be one of {', '.join(FUSIONS)}, got {self.fusion!r}")

    def max_score(self) -> float:
        """The fused score of a chunk ranked first (with the best score) by every ranking with a positive
        weight (the heading ranking only with the full-text ranking it is drawn from; the verbatim ranking
        never, see ``verbatim_weight``)."""
        weights = {name: weight for name, weight in self.weights.items() if weight > 0}
        weights.pop(VERBATIM, None)
        if self.text_weight <= 0:
            weights.pop(HEADING, None)
        total = sum(weights.values())
        return total if self.fusion == CONVEX else total / (self.rrf_k + 1)


DOCUMENTS = SearchSettings(rrf_k=5, similar_share=0.8)
"""Manuals, notes, FAQs (possibly in two languages): meaning and wording weigh the same, and a hit's
near-identical chunk (its translation, a copy) rises with it (docs/decisions/0022-search-presets.md)."""
CONVERSATIONS = SearchSettings(vector_weight=0.25, rrf_k=5, candidates=100)
"""Chat turns and observations: questions name people, places and things that the turn names too, and
general-purpose sentence embeddings are far below BM25 there (docs/decisions/0022-search-presets.md)."""

SEARCH_PRESETS: dict[str, SearchSettings] = {
    "default": DOCUMENTS,
    "documents": DOCUMENTS,
    "conversations": CONVERSATIONS,
    # Meaning over wording: paraphrases and cross-language questions.
    "semantic": replace(DOCUMENTS, vector_weight=2.0),
    # Wording over meaning: identifiers, error messages, exact phrases.
    "lexical": replace(DOCUMENTS, vector_weight=0.5, text_weight=1.5, trigram_weight=1.5),
}


def search_preset(name: str = "default") -> SearchSettings:
    """The named preset. Raises KeyError naming the known presets."""
    try:
        return SEARCH_PRESETS[name]
    except KeyError:
        raise KeyError(f"unknown search preset {name!r}; known: {', '.join(SEARCH_PRESETS)}") from None


def related_only(vector_ranking: Sequence[Candidate], min_similarity: float) -> list[Candidate]:
    """The vector candidates at least ``min_similarity`` cosine-similar to the query (the ranking stores
    cosine distance, 1 - similarity), in their order; their ranks stay as the ranking gave them."""
    return [candidate for candidate in vector_ranking if 1.0 - candidate.score >= min_similarity]


def fuse_rankings(
    rankings: Mapping[str, Sequence[Candidate]], config: SearchSettings, top_k: int
) -> list[tuple[tuple[str, int], float]]:
    """The ``top_k`` best chunk keys of the rankings with their fused score, best first.

    Rankings are taken in the order of `RANKINGS`, which breaks exact ties (the lexical rankings first);
    names not in it are ignored. The vector ranking is first cut at ``config.vector_min_similarity``
    (`related_only`).
    Convex fusion (``config.fusion``): `convex_combination` with ``config.weights``. Otherwise weighted
    reciprocal rank fusion (`reciprocal_rank_fusion`, ``config.rrf_k``, ``config.weights``) of the
    rankings, the full-text one cut at ``config.text_min_share`` of its best score. When fewer than
    ``top_k`` chunks come out, the full-text candidates below that share follow in their BM25 order, each
    with its own weighted reciprocal rank as score (never above the score before it), so a lexical-only
    search still returns every match it has.
    """
    # Ties go to the ranking that comes first in RANKINGS: lexical evidence before the vector ranking.
    rankings = {name: rankings[name] for name in RANKINGS if name in rankings}
    if VECTOR in rankings:
        rankings = {**rankings, VECTOR: related_only(rankings[VECTOR], config.vector_min_similarity)}
    if config.fusion == CONVEX:
        return convex_combination(rankings, config.weights)[:top_k]
    lists = {name: [candidate.key for candidate in ranking] for name, ranking in rankings.items()}
    below: list[Candidate] = []
    text = rankings.get(TEXT, ())
    if text and config.text_min_share > 0:
        floor = config.text_min_share * text[0].score
        lists[TEXT] = [candidate.key for candidate in text if candidate.score >= floor]
        below = [candidate for candidate in text if candidate.score < floor]
    fused = reciprocal_rank_fusion(lists, k=config.rrf_k, weights=config.weights)[:top_k]
    seen = {key for key, _ in fused}
    for candidate in below:
        if len(fused) >= top_k or config.text_weight <= 0:
            break
        if candidate.key in seen:
            continue
        score = config.text_weight / (config.rrf_k + candidate.rank)
        fused.append((candidate.key, min(score, fused[-1][1]) if fused else score))
        seen.add(candidate.key)
    return fused


@dataclass(frozen=True)
class SearchQuery:
    """A Search request in domain form; ``top_k`` 0 means the default (10). ``visibility`` is the caller's
    (`common.storage.visibility`): hidden chunks are excluded inside every ranking query."""

    namespace: str
    query: str
    top_k: int = DEFAULT_TOP_K
    node_types: tuple[str, ...] = ()
    meta: Mapping[str, Any] = field(default_factory=dict)
    node_keys: tuple[str, ...] = ()
    participants: tuple[str, ...] = ()  # only the turns of these actor/subject ids (`ChunkFilter`)
    visibility: Visibility = EVERYTHING
    pii: PiiPolicy = NO_PII_POLICY  # the caller's: hits are masked (or audited) on the way out
    preset: str = ""  # a `SEARCH_PRESETS` name; empty: the searcher's settings


@dataclass(frozen=True)
class SearchHit:
    """One fused chunk. ``vector_score`` is the cosine similarity (1 - distance), 0 when the chunk was
    not a vector candidate; ``text_score`` the BM25 score (`common.storage.chunks.lexical_scoring`), ``trigram_score``
    1.0 for an exact identifier-token hit, else the word similarity."""

    chunk: StoredChunk
    score: float
    vector_score: float
    text_score: float
    trigram_score: float
    ranks: Mapping[str, int]
    provenance: Provenance

    @property
    def node_key(self) -> str:
        return self.chunk.node_key

    @property
    def chunk_order(self) -> int:
        return self.chunk.chunk_order


def validate_search(query: SearchQuery) -> SearchQuery:
    """Checks a request and fills defaults (top_k 0 -> 10).

    Raises:
        InvalidArgument: field violations named like the SearchRequest fields.
    """
    check = ViolationCollector()
    if not query.namespace.strip():
        check.add("namespace", "required")
    if not query.query.strip():
        check.add("query", "required: the text to search for")
    elif len(query.query) > MAX_QUERY_CHARS:
        check.add("query", f"at most {MAX_QUERY_CHARS} characters, got {len(query.query)}")
    elif "\x00" in query.query:
        check.add("query", "must not contain NUL characters")
    if query.preset and query.preset not in SEARCH_PRESETS:
        check.add("preset", f"unknown preset {query.preset!r}; known: {', '.join(SEARCH_PRESETS)}")
    top_k = query.top_k or DEFAULT_TOP_K
    if not 1 <= top_k <= MAX_TOP_K:
        check.add("top_k", f"must be in 1..{MAX_TOP_K} (0 means {DEFAULT_TOP_K}), got {query.top_k}")
    for name, values in (("types", query.node_types), ("node_keys", query.node_keys)):
        if len(values) > MAX_FILTER_ITEMS:
            check.add(name, f"at most {MAX_FILTER_ITEMS} values")
            continue
        for index, value in enumerate(values):
            if not value.strip() or "\x00" in value:
                check.add(f"{name}[{index}]", "must be a non-empty string without NUL")
    check.raise_if_any()
    return replace(query, top_k=top_k)


class HybridSearcher:
    """Runs the lexical rankings concurrently with the vector ranking and fuses them.

    The full-text and trigram rankings start at once, one after the other on one of the ``arms`` worker
    threads and one pooled connection; the calling thread meanwhile embeds the query and runs the vector
    ranking on another; fusion waits for all three. The rankings
    are read-only and independent, so they need no shared transaction (each sees its own snapshot).
    No thread holds a connection while waiting for another one, so a busy pool only queues. The rankings
    return row ids, keys and scores (`Candidate`); after fusion one more connection serves the rest: the
    similar-chunk pairs, the rows of the hits by id (`ChunkRankings.ranked_chunks`; a hit whose row was
    deleted or hidden since its ranking ran is left out) and the hits' node summaries.
    Measured on the loaded bench database (200 vault sentences, 2 cores): see bench/RESULTS.md (git history).

    Args:
        database: the process's database.
        encoder: the embedding provider (``encode_query``).
        settings: a `SearchSettings` (default preset when None).
        arm_workers: worker threads shared by all searches of this searcher for the lexical rankings (each
            holds one pooled connection while it runs); default: half the pool, >= 2.
    """

    def __init__(
        self,
        database: Database,
        encoder: QueryEncoder,
        settings: SearchSettings | None = None,
        *,
        arm_workers: int | None = None,
    ) -> None:
        self.database = database
        self.encoder = encoder
        self.settings = settings or search_preset("default")
        self.chunks = ChunkStore(
            database.settings, trigram_max_query_chars=self.settings.trigram_max_query_chars
        )
        self.nodes = ContextStore(database.settings, GraphStore(database))
        self.pii = PiiGuard(database)
        workers = arm_workers or max(2, database.settings.pool_max_size // 2)
        self.arms = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="search-arm")

    def _ranking(self, arm: Callable[[psycopg.Connection[Any]], Ranked]) -> Ranked:
        # Read-only statements that need no common snapshot: autocommit, no BEGIN/COMMIT round trips.
        with self.database.read_connection() as conn:
            return arm(conn)

    def search(self, query: SearchQuery, *, settings: SearchSettings | None = None) -> list[SearchHit]:
        """The ``top_k`` best chunks for ``query.query`` in ``query.namespace``.

        Raises:
            InvalidArgument: see `validate_search`.
            PermissionDenied: a ``node_keys`` value holds personal data and the caller's output is masked
                (reason PII_CLEARANCE_REQUIRED).
            Unavailable: the database cannot be reached.
        """
        query = validate_search(query)
        query.pii.refuse_personal_data_lookups(
            {f"node_keys[{i}]": key for i, key in enumerate(query.node_keys)}
        )
        config = settings or (SEARCH_PRESETS[query.preset] if query.preset else self.settings)
        where = ChunkFilter(
            namespace=query.namespace,
            node_types=tuple(query.node_types),
            meta=dict(query.meta),
            node_keys=tuple(query.node_keys),
            participants=tuple(query.participants),
            visibility=query.visibility,
        )
        limit = max(config.candidates, query.top_k)
        arms: dict[str, Callable[[psycopg.Connection[Any]], list[Candidate]]] = {}
        if config.text_weight:
            arms[TEXT] = lambda conn: self.chunks.text_candidates(conn, where, query.query, limit)
        if config.trigram_weight:
            arms[TRIGRAM] = lambda conn: self.chunks.trigram_candidates(
                conn,
                where,
                query.query,
                limit,
                whole_query_chars=config.trigram_max_query_chars,
                whole_query_min_words=config.trigram_whole_query_min_words,
            )

        def lexical_rankings(conn: psycopg.Connection[Any]) -> dict[str, list[Candidate]]:
            return {name: arm(conn) for name, arm in arms.items()}

        # The lexical rankings run one after the other on one worker and one connection: one each costs
        # more latency and CPU on a small machine (docs/decisions/0022-search-presets.md).
        pending: Future[dict[str, list[Candidate]]] | None = None
        if config.concurrent_rankings and arms:
            # It runs in the caller's context (its consistency token: common.storage.replicas.read_routing).
            pending = self.arms.submit(contextvars.copy_context().run, self._ranking, lexical_rankings)
        rankings: dict[str, list[Candidate]] = {}
        try:
            if config.vector_weight:
                vector = self.encoder.encode_query(query.query)  # meanwhile the lexical rankings run
                rankings[VECTOR] = self._ranking(
                    lambda conn: self.chunks.vector_candidates(conn, where, vector, limit)
                )
        except BaseException:
            if pending is not None:
                wait([pending])  # no ranking outlives the request; the first error is the one raised
            raise
        if pending is not None:
            rankings.update(pending.result())
        elif arms:
            rankings.update(self._ranking(lexical_rankings))
        if config.heading_weight and TEXT in rankings:
            rankings[HEADING] = heading_ranking(rankings[TEXT])
        if config.verbatim_weight and TRIGRAM in rankings:
            rankings[VERBATIM] = verbatim_ranking(rankings[TRIGRAM])
        rankings = {name: rankings[name] for name in RANKINGS if name in rankings}
        fused = fuse_rankings(rankings, config, query.top_k if config.similar_share <= 0 else MAX_POOL)
        by_key: dict[str, dict[tuple[str, int], Candidate]] = {
            name: {c.key: c for c in ranking} for name, ranking in rankings.items()
        }
        chunk_ids = {c.key: c.chunk_id for ranking in rankings.values() for c in ranking}
        # After fusion, one connection for the rest: the similar-chunk pairs, the rows of the chosen
        # candidates (the rankings return ids and keys only) and their nodes' summaries; none when no
        # ranking found anything.
        rows: dict[int, StoredChunk] = {}
        summaries: dict[str, NodeSummary] = {}
        if fused:
            with self.database.read_connection() as conn:
                if config.similar_share > 0 and VECTOR in rankings:
                    similar = self.chunks.similar_pairs(
                        conn,
                        query.namespace,
                        [chunk_ids[key] for key, _ in fused[: min(query.top_k, config.similar_sources)]],
                        [chunk_ids[key] for key, _ in fused],
                        config.similar_threshold,
                    )
                    fused = propagate_to_similar(fused, similar, share=config.similar_share)
                fused = fused[: query.top_k]
                rows = self.chunks.ranked_chunks(conn, where, [chunk_ids[key] for key, _ in fused])
                if config.node_provenance:
                    summaries = self.nodes.node_summaries(conn, query.namespace, [key[0] for key, _ in fused])
        hits: list[SearchHit] = []
        for key, score in fused:
            chunk = rows.get(chunk_ids[key])
            if chunk is None:  # deleted or hidden since its ranking ran (`ChunkRankings.ranked_chunks`)
                continue
            found = {name: by_key[name][key] for name in by_key if key in by_key[name]}
            summary = summaries.get(chunk.node_key)
            hits.append(
                SearchHit(
                    chunk=chunk,
                    score=score,
                    vector_score=1.0 - found[VECTOR].score if VECTOR in found else 0.0,
                    text_score=found[TEXT].score if TEXT in found else 0.0,
                    trigram_score=found[TRIGRAM].score if TRIGRAM in found else 0.0,
                    ranks={name: candidate.rank for name, candidate in found.items()},
                    provenance=Provenance(
                        node_key=chunk.node_key,
                        source_path=chunk.source_path or (summary.source_path if summary else ""),
                        chunk_order=chunk.chunk_order,
                        observation_ids=meta_observation_ids(chunk.meta),
                        metadata=summary.provenance if summary else {},
                        citation=chunk_citation(chunk.meta),
                    ),
                )
            )
        return self.pii.disclose(
            query.namespace, query.pii, lambda shown: [disclose_hit(shown, hit) for hit in hits]
        )


def disclose_chunk(disclosure: PiiDisclosure, chunk: StoredChunk) -> StoredChunk:
    """A chunk as ``disclosure``'s caller may see it (`query_service.pii_output`): text, title and heading
    masked, or withheld by the marks in ``chunk.meta`` (written with it); keys, path and meta masked."""
    if not disclosure.policy.protection:
        return chunk
    marks = PiiMarks.from_props(chunk.meta)
    key, ids = chunk.node_key, meta_observation_ids(chunk.meta)
    if disclosure.withholds(marks):
        hidden = withheld_text(marks)
        title, heading, text = hidden, hidden if chunk.heading else "", hidden
    else:
        title = disclosure.text(chunk.title, marks=marks, key=key, observation_ids=ids)
        heading = disclosure.text(chunk.heading, marks=marks, key=key, observation_ids=ids)
        text = disclosure.text(chunk.text, marks=marks, key=key, observation_ids=ids)
    return replace(
        chunk,
        node_key=disclosure.text(chunk.node_key, key=key),
        source_path=disclosure.text(chunk.source_path, key=key),
        title=title,
        heading=heading,
        text=text,
        meta=disclosure.value(chunk.meta, key=key, observation_ids=ids),
    )


def disclose_hit(disclosure: PiiDisclosure, hit: SearchHit) -> SearchHit:
    """A search hit (chunk and provenance) as ``disclosure``'s caller may see it; scores and ranks stay."""
    if not disclosure.policy.protection:
        return hit
    chunk = disclose_chunk(disclosure, hit.chunk)
    provenance = hit.provenance
    return replace(
        hit,
        chunk=chunk,
        provenance=replace(
            provenance,
            node_key=chunk.node_key,
            source_path=disclosure.text(provenance.source_path, key=hit.chunk.node_key),
            citation=disclosure.text(provenance.citation, key=hit.chunk.node_key),
            metadata=disclosure.value(
                provenance.metadata, key=hit.chunk.node_key, observation_ids=provenance.observation_ids
            ),
        ),
    )


__all__ = [
    "SEARCH_PRESETS",
    "HybridSearcher",
    "SearchHit",
    "SearchQuery",
    "SearchSettings",
    "disclose_chunk",
    "disclose_hit",
    "fuse_rankings",
    "reciprocal_rank_fusion",
    "related_only",
    "search_preset",
    "validate_search",
]

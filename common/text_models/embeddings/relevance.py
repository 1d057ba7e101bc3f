"""The cosine similarity below which a query and a passage are taken as unrelated.

Measured with the default model (``use-multilingual``) on the bilingual FAQ pairs (224 questions x 224
answers; docs/explanation/retrieval.md, "Relevance floor"): 0.7 % of the relevant pairs lie below 0.05
but 11 % of the others, and none of the 261 relevant answers the vector ranking places in a question's
first 10 (at 0.1: 4 of them, and FAQ MRR@10 fell from 0.510 to 0.505). An identifier query
(``BILL-42``) is below 0.05 with 90 % of the answers. Other providers place unrelated texts elsewhere
(e5 above 0.7): the floor is then ineffective, not harmful.
"""

from __future__ import annotations

MIN_RELEVANT_SIMILARITY = 0.05
"""Below this cosine similarity a hit only the vector ranking found is not returned
(`query_service.retrieval.hybrid_search.SearchSettings.vector_min_similarity`)."""

__all__ = ["MIN_RELEVANT_SIMILARITY"]

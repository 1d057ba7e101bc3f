"""The cosine similarity below which a query and a passage are taken as unrelated.

Measured with the default model (``use-multilingual``) on the bilingual FAQ pairs (224 questions x 224
answers; docs/explanation/retrieval.md, "Relevance floor"): 0.7 % of the relevant pairs but 11 % of the
others lie below 0.05, 3 % against 21 % below 0.1, and an identifier query (``BILL-42``) stays below 0.12
with every answer. Other providers place unrelated texts elsewhere (e5 above 0.7): the floor is then
ineffective, not harmful.
"""

from __future__ import annotations

MIN_RELEVANT_SIMILARITY = 0.1
"""Below this cosine similarity a vector-only search hit is not returned and a recalled memory gets no
recency or importance bonus (docs/explanation/retrieval.md)."""

__all__ = ["MIN_RELEVANT_SIMILARITY"]

"""Text embedding providers behind one interface (docs/explanation/architecture.md).

* `provider`: the interface, `EmbeddingProvider` (float32, L2-normalised vectors: cosine = dot
  product), and what the local providers share (lazy loading, optional-package checks, thread count);
* `factory`: `build_embedding_provider`, which turns ``CB_EMBEDDING_PROVIDER`` into a provider;
* one module per provider: `use_multilingual` (default), `e5_small`, `minilm`, `openai_compatible`.
"""

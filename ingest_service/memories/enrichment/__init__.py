"""Asynchronous enrichment of memories (docs/how-to/memory-records.md).

Pure extraction (no database, no gRPC) behind one interface, `model.Enricher`: `rule_enricher.RuleEnricher`
(registry-shipped language models and documented rules, the default) and `llm_enricher.LlmEnricher`
(optional, an OpenAI-compatible server); `factory.build_enricher` picks one from the settings. The queue
that runs them on the database is `queue`, the job itself `jobs`.
"""

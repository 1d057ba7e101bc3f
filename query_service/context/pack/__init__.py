"""What CompileContext (`query_service.context.compiler`) and CompileTypedContext
(`query_service.context.typed_context`) share (docs/explanation/retrieval.md): a context pack is ranked candidates,
rendered as text, fitted into a token budget and journaled with every decision.

* `query_service.context.pack.request`: the request both take (`ContextRequest`), its limits and checks;
* `query_service.context.pack.items`: the pack and its item, evidence ranks and fact scores, fact rendering;
* `query_service.context.pack.fitting`: fitting rendered candidates into the budget (`PackFitter`);
* `query_service.context.pack.compiler`: the compilers' base (`PackCompiler`): stores, fitter, PII
  guard, recording a compilation in ``context_traces``, auditing a cleared caller's kept items.

CompileContext's own parts live here too (`query_service.context.compiler` orchestrates them):
`settings` (`ContextSettings`, presets), `candidates` (rendering and merging chunk candidates),
`conversation` (turn lines, headers, redundancy), `fact_candidates`. CompileTypedContext keeps its typed
traversal in `query_service.context.typed_context`.
"""

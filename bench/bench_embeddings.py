"""Throughput of an embedding provider (default: the configured one, ``use-multilingual``) on real text.

Workloads:

* ``vault-chunks``: 500 chunks cut from the docs vault (``shared/corpora/docs-vault``) with the ingest
  chunker at ``CB_CHUNK_MAX_CHARS``, taken at an even stride over all chunks of all files in path order;
* ``ru-faq-50w``: 200 Russian texts of at most 50 words, cut from the Russian Debian FAQ answers
  (``shared/corpora/retrieval-eval/debian-faq-docs.jsonl``; 112 answers give 409 such pieces, taken at an
  even stride);
* ``ru-faq-answers``: the 112 Russian answers whole (10 to 2,483 words).

Each workload is encoded ``--repeats`` times after one warm-up call that loads the model; the figure
is passages per second (wall clock) of the median run; passages per CPU-second of this process are
recorded too, with the load average, because other work on the machine lowers the wall-clock figure. The results, with a description of the machine, are printed
and appended to ``bench/results/embeddings.json`` (a JSON list, one object per run of this script).

Usage: ``.venv/bin/python bench/bench_embeddings.py [--provider NAME --dim N] [--repeats 3]
[--workloads vault-chunks,ru-faq-50w,ru-faq-answers]``.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import numpy as np

from common.kernel.config import Settings
from common.text_models.embeddings.factory import build_embedding_provider
from common.text_models.embeddings.provider import EmbeddingProvider
from ingest_service.documents.chunking import chunk_markdown
from ingest_service.documents.front_matter import strip_front_matter

RESULTS = ROOT / "bench" / "results" / "embeddings.json"


def default_corpora() -> Path:
    """``shared/corpora`` beside the repository, else ``/work/shared/corpora``."""
    beside = ROOT.parent / "shared" / "corpora"
    return beside if beside.is_dir() else Path("/work/shared/corpora")


def evenly(items: list[Any], count: int) -> list[Any]:
    """``count`` items at an even stride over ``items`` (all of them if there are fewer)."""
    if len(items) <= count:
        return list(items)
    step = len(items) / count
    return [items[int(i * step)] for i in range(count)]


def vault_chunks(corpora: Path, max_chars: int, count: int) -> list[str]:
    """Texts of ``count`` chunks of the docs vault."""
    texts: list[str] = []
    for path in sorted((corpora / "docs-vault").rglob("*.md")):
        body = strip_front_matter(path.read_text(encoding="utf-8"))
        texts.extend(chunk.text for chunk in chunk_markdown(body, max_chars))
    return evenly(texts, count)


def russian_answers(corpora: Path) -> list[str]:
    """The Russian Debian FAQ answers, whole."""
    path = corpora / "retrieval-eval" / "debian-faq-docs.jsonl"
    with path.open(encoding="utf-8") as handle:
        docs = [json.loads(line) for line in handle if line.strip()]
    return [str(doc["text"]) for doc in docs if doc["lang"] == "ru"]


def russian_pieces(answers: list[str], words: int, count: int) -> list[str]:
    """``count`` pieces of at most ``words`` words cut from ``answers``."""
    pieces: list[str] = []
    for answer in answers:
        tokens = answer.split()
        pieces.extend(" ".join(tokens[i : i + words]) for i in range(0, len(tokens), words))
    return evenly(pieces, count)


def cpu_model() -> str:
    """The CPU model name from /proc/cpuinfo (``platform.processor()`` elsewhere)."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def cpu_flags() -> list[str]:
    """The SIMD flags of interest that /proc/cpuinfo lists."""
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return []
    flags = next(
        (line.split(":", 1)[1].split() for line in text.splitlines() if line.startswith("flags")), []
    )
    return [
        flag for flag in ("avx2", "fma", "avx512f", "avx512_vnni", "avx512_bf16", "amx_tile") if flag in flags
    ]


def machine() -> dict[str, Any]:
    """What the figures depend on."""
    try:
        nproc = len(os.sched_getaffinity(0))
    except AttributeError:
        nproc = os.cpu_count() or 0
    try:
        meminfo = Path("/proc/meminfo").read_text().split("\n", 1)[0]
        mem_gib = round(int(meminfo.split()[1]) / 1024 / 1024, 1)
    except (OSError, IndexError, ValueError):
        mem_gib = None
    return {
        "nproc": nproc,
        "cpu_model": cpu_model(),
        "cpu_flags": cpu_flags(),
        "mem_gib": mem_gib,
        "python": platform.python_version(),
        "numpy": np.__version__,
        "platform": platform.platform(),
        "openblas_coretype": os.environ.get("OPENBLAS_CORETYPE"),
    }


def measure(provider: EmbeddingProvider, texts: list[str], repeats: int) -> dict[str, Any]:
    """Encode ``texts`` ``repeats`` times; passages per second of the median run."""
    seconds: list[float] = []
    cpu_seconds: list[float] = []
    load_before = os.getloadavg()[0]
    for _ in range(repeats):
        start, cpu_start = time.perf_counter(), time.process_time()
        vectors = provider.encode_passages(texts)
        seconds.append(time.perf_counter() - start)
        cpu_seconds.append(time.process_time() - cpu_start)
        assert vectors.shape == (len(texts), provider.dimension)
    median = statistics.median(seconds)
    cpu_median = statistics.median(cpu_seconds)
    chars = sum(len(text) for text in texts)
    return {
        "texts": len(texts),
        "mean_chars": round(chars / len(texts), 1),
        "mean_words": round(sum(len(text.split()) for text in texts) / len(texts), 1),
        "seconds": [round(s, 3) for s in seconds],
        "passages_per_s": round(len(texts) / median, 1),
        "chars_per_s": round(chars / median),
        # CPU time of this process (all its threads): robust to other load on the machine.
        "cpu_seconds": [round(s, 3) for s in cpu_seconds],
        "passages_per_cpu_s": round(len(texts) / cpu_median, 1),
        # 1-minute load average before and after: well above nproc means the wall figures are low.
        "loadavg_1m": [round(load_before, 2), round(os.getloadavg()[0], 2)],
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0] if __doc__ else None)
    parser.add_argument("--provider", help="CB_EMBEDDING_PROVIDER to measure (default: the configured one)")
    parser.add_argument("--dim", type=int, help="CB_EMBEDDING_DIM matching --provider")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument(
        "--workloads",
        default="vault-chunks,ru-faq-50w,ru-faq-answers",
        help="comma-separated subset of: vault-chunks, ru-faq-50w, ru-faq-answers",
    )
    parser.add_argument("--corpora", type=Path, default=default_corpora())
    parser.add_argument("--results", type=Path, default=RESULTS)
    args = parser.parse_args(argv)

    overrides: dict[str, Any] = {}
    if args.provider:
        overrides["embedding_provider"] = args.provider
    if args.dim:
        overrides["embedding_dim"] = args.dim
    settings = Settings(**overrides)
    provider = build_embedding_provider(settings)

    makers = {
        "vault-chunks": lambda: vault_chunks(args.corpora, settings.chunk_max_chars, 500),
        "ru-faq-50w": lambda: russian_pieces(russian_answers(args.corpora), 50, 200),
        "ru-faq-answers": lambda: russian_answers(args.corpora),
    }
    chosen = [name.strip() for name in args.workloads.split(",") if name.strip()]
    unknown = sorted(set(chosen) - set(makers))
    if unknown:
        parser.error(f"unknown workloads {unknown}; choose from {sorted(makers)}")
    workloads = {name: makers[name]() for name in chosen}
    start = time.perf_counter()
    provider.encode_passages(["warm-up"])
    load_s = time.perf_counter() - start

    result: dict[str, Any] = {
        "time": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "provider": settings.embedding_provider,
        "model_id": provider.model_id,
        "dimension": provider.dimension,
        "threads": getattr(provider, "threads", None),
        "batch_size": provider.batch_size,
        "chunk_max_chars": settings.chunk_max_chars,
        "load_s": round(load_s, 2),
        "machine": machine(),
        "workloads": {},
    }
    for name, texts in workloads.items():
        figures = measure(provider, texts, args.repeats)
        result["workloads"][name] = figures
        print(
            f"{name:15} {figures['texts']:4} texts, {figures['mean_words']:6.1f} words avg: "
            f"{figures['passages_per_s']:7.1f} passages/s, {figures['chars_per_s']:8} chars/s, "
            f"{figures['passages_per_cpu_s']:7.1f} per CPU-s, load {figures['loadavg_1m']}",
            flush=True,
        )
    args.results.parent.mkdir(parents=True, exist_ok=True)
    runs: list[Any] = json.loads(args.results.read_text()) if args.results.exists() else []
    runs.append(result)
    args.results.write_text(json.dumps(runs, ensure_ascii=False, indent=2) + "\n")
    print(f"appended to {args.results}", flush=True)
    print(json.dumps(result, ensure_ascii=False, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""Recording a result of bench/run_bench.py (and the other benchmarks): the machine's description, the
JSON file (bench/results/<prefix>-<UTC time>.json, which the docs site's Benchmarks page reads) and the
report printed as Markdown tables.
"""

from __future__ import annotations

import json
import os
import platform
import subprocess
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]


def machine() -> dict[str, Any]:
    """CPU model, cores, memory (GiB), Python and kernel versions of this machine (Linux /proc)."""
    cpu = next(
        (
            line.split(":", 1)[1].strip()
            for line in Path("/proc/cpuinfo").read_text().splitlines()
            if line.startswith("model name")
        ),
        platform.processor(),
    )
    memory_kib = next(
        int(line.split()[1])
        for line in Path("/proc/meminfo").read_text().splitlines()
        if line.startswith("MemTotal")
    )
    return {
        "cpu": cpu,
        "cores": os.cpu_count(),
        "memory_gib": round(memory_kib / 1024 / 1024, 1),
        "python": platform.python_version(),
        "kernel": platform.release(),
    }


def load_average() -> float:
    """The 1-minute load average of this machine, rounded to 0.01."""
    return round(os.getloadavg()[0], 2)


def cpu_seconds(pid: int) -> float:
    """CPU time (user + system, all threads) the process ``pid`` has used so far, in seconds (Linux
    ``/proc/<pid>/stat`` fields 14 and 15); 0.0 when it is gone."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def postgres_cpu_seconds() -> float:
    """CPU time the PostgreSQL processes of this machine (every process named ``postgres``: the server
    of the embedded database and its backends, also those of other clients) have used so far, in seconds;
    a backend that exited between two readings is not counted."""
    total = 0.0
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                named = (entry / "comm").read_text().strip() == "postgres"
            except OSError:
                continue
            if named:
                total += cpu_seconds(int(entry.name))
    return total


def tree_commit(root: Path) -> str:
    """The commit checked out at ``root`` (``+`` when its tracked files differ from it), for the record."""

    def git(*command: str) -> str:
        return subprocess.run(
            ["git", "-C", str(root), *command], check=True, capture_output=True, text=True
        ).stdout.strip()

    return git("rev-parse", "--short", "HEAD") + (
        "+" if git("status", "--porcelain", "--untracked-files=no") else ""
    )


def write_json(results: dict[str, Any], prefix: str = "service", stamp: str = "") -> None:
    """Writes ``results`` to bench/results/<prefix>-<stamp>.json (``stamp``: by default
    ``results['time']``)."""
    out = ROOT / "bench" / "results"
    out.mkdir(parents=True, exist_ok=True)
    (out / f"{prefix}-{stamp or results['time']}.json").write_text(json.dumps(results, indent=2) + "\n")


def heading(results: dict[str, Any]) -> str:
    """The entry's heading: the run's time and the machine."""
    m = results["machine"]
    return f"\n## {results['time']} — {m['cores']} cores, {m['cpu']}, {m['memory_gib']} GiB, Python {m['python']}"


def print_report(lines: list[str], note: str = "") -> None:
    """Prints the run's report ``lines`` (Markdown: a ``## `` heading, then tables) on stdout, then,
    when the run has a ``note`` (its ``--note``), a blank line and ``Note: <note>``.

    The JSON file is the record (`write_json`); the report is for the person running the benchmark.
    """
    print("\n".join([*lines, "", f"Note: {note}"] if note else lines))


def write_results(results: dict[str, Any]) -> None:
    """Writes the JSON file and prints a table of the figures and their targets."""
    write_json(results)
    lines = [
        heading(results),
        "",
        "| measure | figure | target |",
        "|---|---|---|",
        (
            f"| debian corpus ingest (5,415 observations, 1 client, batches of 200, sequential) |"
            f" {results['observations_sequential']['seconds']} s ({results['observations_sequential']['per_second']}/s) | |"
        ),
        (
            f"| the same as `cb observe` sends ({results['observations']['concurrency']} calls in flight) |"
            f" {results['observations']['seconds']} s ({results['observations']['per_second']}/s),"
            f" {results['observations']['ratio_to_sequential']}x the sequential rate | <= 60 s |"
        ),
        (
            f"| the same from 16 concurrent clients (batches of 50) | {results['observations_16_clients']['seconds']} s"
            f" ({results['observations_16_clients']['per_second']}/s), {results['observations_16_clients']['ratio_to_1_client']}x"
            " the sequential rate | |"
        ),
        (
            f"| docs vault retain ({results['documents']['documents']} documents, {results['documents']['chunks']} chunks)"
            f" | {results['documents']['seconds']} s ({results['documents']['chunks_per_second']} chunks/s) | |"
        ),
    ]
    for key, label, target in (
        ("search_grpc", "Search over gRPC", "p95 <= 100 ms"),
        ("search_raw_sql", "Search in-process (raw SQL + fusion)", ""),
        ("search_raw_sql_sequential", "the same with the rankings one after another (baseline)", ""),
        ("list_facts_grpc", "ListFacts over gRPC (as-of)", "p95 <= 10 ms"),
        ("compile_context_grpc", "CompileContext over gRPC (budget 1500)", ""),
    ):
        r = results[key]
        lines.append(
            f"| {label}, {r['n']} queries | p50 {r['p50_ms']} / p95 {r['p95_ms']} / p99 {r['p99_ms']} ms | {target} |"
        )
    lines.append(f"| Search gRPC / raw p50 ratio | {results['search_grpc_vs_raw_p50']} | |")
    lines.append(
        f"| Search in-process p95, concurrent / sequential rankings"
        f" | {results['search_concurrent_vs_sequential_p95']} | |"
    )
    lines.append(f"| database | {results['database']} | |")
    if results.get("note"):
        lines.append(f"| note | {results['note']} | |")
    print_report(lines)

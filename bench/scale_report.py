"""The report of bench/bench_scale.py: the scale curve (PNG, matplotlib) and the printed report.

``python -m bench.scale_report bench/results/scale-<time>.json`` draws the curve and appends the entry of a
run from its JSON (written after every size and layout), e.g. of a run stopped before its last size.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from bench.service_results import heading

ROOT = Path(__file__).resolve().parents[1]


def draw(results: dict[str, Any]) -> str:
    """The scale curve: Search p50/p95 and the floor against the table's rows, per layout; file name."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(figsize=(8, 5))
    for layout, marker in (("single", "o"), ("multi", "s")):
        states = [s for s in results["states"] if s["layout"] == layout or (s["size"] == "10k")]
        if not any(s["layout"] == layout for s in results["states"]):
            continue
        rows = [s["rows"] for s in states]
        for name in states[0]["search"]:
            for key, style in (("p50_ms", "-"), ("p95_ms", "--")):
                axes.plot(
                    rows,
                    [s["search"][name][key] for s in states],
                    style,
                    marker=marker,
                    label=f"Search {key[:3]}, {name}, {layout}",
                )
        axes.plot(
            rows,
            [s["floor"]["sum"]["p50_ms"] for s in states],
            ":",
            marker=marker,
            label=f"floor p50 (HNSW + GIN), {layout}",
        )
    axes.set_xscale("log")
    axes.set_yscale("log")
    axes.set_xlabel("chunks in the table")
    axes.set_ylabel("latency (ms)")
    axes.set_title(
        f"Search over gRPC against table size ({results['machine']['cores']} cores, {results['time']})"
    )
    axes.grid(True, which="both", alpha=0.3)
    axes.legend(fontsize=7)
    name = f"scale-{results['time']}.png"
    figure.tight_layout()
    figure.savefig(ROOT / "bench" / "results" / name, dpi=110)
    return name


def entry(results: dict[str, Any], picture: str) -> list[str]:
    """The printed report: one table per measure, every figure with its load average."""

    def figure(r: dict[str, Any]) -> str:
        return f"{r['p50_ms']} / {r['p95_ms']} (load {r['load_1m']})"

    names = list(results["states"][0]["search"]) if results["states"] else []
    base = results["build"]["base"]
    described = (
        f"{base['synthetic_chunks']} synthetic chunks (`bench_capacity.load`: real vault sentences, vectors"
        f" from the real model) written in {base['seconds']} s"
        if "synthetic_chunks" in base
        else f"{base['chunks']} real chunks (docs vault + Debian FAQ) retained in {base['seconds']} s"
    )
    lines = [
        heading(results) + " — read-side scale (`bench/bench_scale.py`)",
        "",
        f"Base: {described}; larger sizes by copying them (perturbed keys and vectors,"
        " see the module doc); pgvector "
        + results["pgvector"]
        + ". Query embedding alone (p50 / p95 ms):"
        + "; ".join(f" {k} {figure(v)}" for k, v in results["query_embedding"].items())
        + ". Database fresh, dropped afterwards."
        + (f" Note: {results['note']}" if results["note"] else ""),
        "",
        f"![scale curve](results/{picture})",
        "",
        f"Trees: this tree = `{results.get('tree', '')}`, baseline = `{results.get('baseline_tree') or '-'}`;"
        " commits measured: "
        + "; ".join(
            f"{s['size']} {s['layout']}: " + ", ".join(f"{n} {c}" for n, c in s["commits"].items())
            for s in results["states"]
            if "commits" in s
        )
        + ".",
        "",
        "| size | layout | rows (Q) | "
        + " | ".join(f"Search {n} p50 / p95 ms" for n in names)
        + " | "
        + " | ".join(f"CompileContext {n}" for n in names)
        + " | floor HNSW + GIN p50 / p95 | index builds (s) |",
        "|---|---|---|" + "---|" * (2 * len(names)) + "---|---|",
    ]
    for s in results["states"]:
        builds = ", ".join(f"{k.removeprefix('chunks_')} {v}" for k, v in s["build"]["indexes"].items())
        tenants = s["build"].get("tenant_indexes") or []
        if tenants:
            builds += "; tenant indexes: " + ", ".join(
                f"{t['namespace']} ({t['rows']} rows) {t['action']} in {t['seconds']} s" for t in tenants
            )
        lines.append(
            f"| {s['size']} | {s['layout']} | {s['rows']} ({s['q_rows']}) | "
            + " | ".join(figure(s["search"][n]) for n in names)
            + " | "
            + " | ".join(figure(s["compile_context"][n]) for n in names)
            + f" | {figure(s['floor']['sum'])} | {builds or '-'} |"
        )
    lines += ["", "Vector arm (in-process, top-50, p50 / p95 ms, overlap@10 with the exact top-10):", ""]
    variants = list(dict.fromkeys(v for s in results["states"] for v in s["vector_arm"]))
    lines.append("| size | layout | " + " | ".join(variants) + " |")
    lines.append("|---|---|" + "---|" * len(variants))
    for s in results["states"]:
        cells = []
        for v in variants:
            r = s["vector_arm"].get(v)
            cells.append(
                ""
                if r is None
                else f"{figure(r)}, {r['overlap_at_10']}"
                + (f", built in {r['build_seconds']} s" if "build_seconds" in r else "")
            )
        lines.append(f"| {s['size']} | {s['layout']} | " + " | ".join(cells) + " |")
    arms = [s for s in results["states"] if "arms" in s]
    if arms:
        lines += [
            "",
            "Ranking arms in-process (`bench/scale_arms.py`; p50 / p95 ms, candidates returned p50; plans in the JSON):",
            "",
            "| size | layout | vector | full text (BM25) | trigram |",
            "|---|---|---|---|---|",
        ]
        for s in arms:
            lines.append(
                f"| {s['size']} | {s['layout']} | "
                + " | ".join(
                    f"{figure(s['arms'][a])}, {s['arms'][a]['rows_p50']}"
                    for a in ("vector", "text", "trigram")
                )
                + " |"
            )
    for s in results["states"]:
        if "concurrency" not in s:
            continue
        lines += [
            "",
            f"Search throughput at {s['size']} {s['layout']} (each client its own queries, rotating):",
            "",
        ]
        lines.append(
            "| clients | " + " | ".join(f"{n}: per s, p50 / p95 ms" for n in s["concurrency"]) + " |"
        )
        lines.append("|---|" + "---|" * len(s["concurrency"]))
        for index, outcome in enumerate(next(iter(s["concurrency"].values()))):
            cells = [
                f"{runs[index]['per_second']}, {figure(runs[index])}"
                + (f", {runs[index]['errors']} errors" if runs[index]["errors"] else "")
                + (
                    ", cores: " + ", ".join(f"{kind} {value}" for kind, value in runs[index]["cores"].items())
                    if "cores" in runs[index]
                    else ""
                )
                for runs in s["concurrency"].values()
            ]
            lines.append(f"| {outcome['clients']} | " + " | ".join(cells) + " |")
    return lines


def main(arguments: list[str]) -> int:
    """Draws the curve and appends the entry of the run stored in the JSON file ``arguments[0]``."""
    from bench.service_results import print_report

    results = json.loads(Path(arguments[0]).read_text("utf-8"))
    print_report(entry(results, draw(results)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

"""Generates docs/benchmarks.md from bench/results/*.json at build time.

Every benchmark under bench/ writes one JSON file per run into bench/results/ (``<name>-<UTC time>.json``,
or one file holding a list of runs). This page shows, for each benchmark, its latest run: the headline
figures next to the baseline measured in the same run, the machine and its load average, and the plot the
run drew when there is one. Older runs stay in bench/results/ and in git. When matplotlib is installed
(the ``bench`` extra), each benchmark also gets the history of its first headline figure over its runs.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import mkdocs_gen_files

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results"
PAGE = "benchmarks.md"
STAMP = re.compile(r"-(\d{8}T\d{6}Z)$")

Row = tuple[str, Any, str]  # figure, value, baseline (same run) or ""


def get(data: Any, path: str) -> Any:
    """The value at a dotted path (``table.bm25.mrr``); list indexes as numbers; None when missing."""
    for part in path.split("|"):
        if isinstance(data, dict) and part in data:
            data = data[part]
        elif isinstance(data, list) and part.isdigit() and int(part) < len(data):
            data = data[int(part)]
        else:
            return None
    return data


def fmt(value: Any) -> str:
    if value is None:
        return "–"
    if isinstance(value, float):
        return f"{value:,.3g}" if abs(value) < 10 else f"{value:,.1f}"
    return f"{value:,}" if isinstance(value, int) else str(value)


def pairs(data: Any, spec: list[tuple[str, str, str]]) -> list[Row]:
    """Rows from (figure, path, baseline path) triples; a missing baseline path is ''."""
    rows = []
    for label, path, base in spec:
        value = get(data, path)
        if value is not None:
            baseline = get(data, base) if base else None
            rows.append((label, value, "" if baseline is None else f"{fmt(baseline)} ({base.replace('|', ' ')})"))
    return rows


def by_variant(runs: list[dict], key: str, this: str, figures: list[tuple[str, str]]) -> list[Row]:
    """Mean of each figure over the runs of variant ``this`` against the mean over the other variants."""
    rows = []
    for label, path in figures:
        mine = [get(r, path) for r in runs if r.get(key) == this and get(r, path) is not None]
        other = [get(r, path) for r in runs if r.get(key) != this and get(r, path) is not None]
        if mine:
            base_variants = sorted({str(r.get(key)) for r in runs if r.get(key) != this})
            base = f"{fmt(sum(other) / len(other))} ({', '.join(base_variants)})" if other else ""
            rows.append((f"{label} ({this}, mean of {len(mine)})", sum(mine) / len(mine), base))
    return rows


def ingest(d: dict) -> list[Row]:
    runs = d.get("runs", [])
    variants = [r.get("variant") for r in runs]
    this = variants[-1] if variants else None
    rows = by_variant(runs, "variant", this, [
        ("observations/s over gRPC", "per_second"),
        ("ratio to the set-based floor", "ratio_to_floor"),
        ("service CPU s", "cpu_seconds|service"),
        ("PostgreSQL CPU s", "cpu_seconds|postgres"),
        ("s until every episode is embedded", "embedding|seconds_until_embedded"),
    ])
    return rows


def compile_cost(d: dict) -> list[Row]:
    return by_variant(d.get("runs", []), "tree", "this tree", [
        ("CPU ms per CompileContext", "cpu_ms_per_compile"),
        ("SQL statements per compile", "statements_per_compile"),
        ("in-process p50 ms", "in_process|p50_ms"),
        ("gRPC p50 ms", "grpc|p50_ms"),
        ("gRPC p95 ms", "grpc|p95_ms"),
    ])


def scale(d: dict) -> list[Row]:
    rows = []
    for state in d.get("states", []):
        name = f"{state.get('size')} {state.get('layout')}"
        for rpc in ("search", "compile_context"):
            for q in ("p50_ms", "p95_ms"):
                value = get(state, f"{rpc}|this tree|{q}")
                base = get(state, f"{rpc}|baseline|{q}")
                if value is not None:
                    rows.append((f"{name}: {rpc} {q}", value, f"{fmt(base)} (baseline tree)" if base is not None else ""))
    return rows


def context_quality(d: dict) -> list[Row]:
    rows = []
    for kind, at in (("search", 10), ("search", 20), ("pack", 1000), ("pack", 2000)):
        value = get(d, f"table|service_{kind}@{at}|overall|all")
        if value is not None:
            base = ", ".join(
                f"{b} {fmt(get(d, f'table|{b}_{kind}@{at}|overall|all'))}" for b in ("bm25", "dense")
            )
            rows.append((f"LoCoMo all@{at} {kind} (% of questions)", value, base))
    rows += pairs(d, [("Search p50 ms (gRPC)", "search_grpc|p50_ms", ""), ("Search p95 ms (gRPC)", "search_grpc|p95_ms", "")])
    return rows


def retrieval(d: dict) -> list[Row]:
    rows = []
    service = next((k for k in d.get("table", {}) if k.startswith("service")), None)
    for label, key in (("MRR@10", "mrr"), ("nDCG@10", "ndcg"), ("cross-language hit@10", "cross_hit")):
        value = get(d, f"table|{service}|{key}") if service else None
        if value is not None:
            base = ", ".join(f"{b} {fmt(get(d, f'table|{b}|{key}'))}" for b in ("bm25", "dense", "dense+bm25"))
            rows.append((f"Debian FAQ {label}", value, base))
    return rows


def documents(d: dict) -> list[Row]:
    """Per format: sentence-search hit@5 (baseline: the Markdown versions), word recovery, and the
    conversion's documents/s and MB/s (baseline: the embedding model on the same converted text)."""
    rows: list[Row] = []
    search = d.get("retrieval") or {}
    md = get(search, "md|hit_at_5")
    for fmt_name in ("md", "pdf", "docx", "html"):
        value = get(search, f"{fmt_name}|hit_at_5")
        if value is not None:
            base = "" if fmt_name == "md" or md is None else f"{fmt(md)} (Markdown)"
            rows.append((f"{fmt_name}: sentence search hit@5 ({search.get('probes')} probes)", value, base))
    for fmt_name, figures in (d.get("formats") or {}).items():
        if not isinstance(figures, dict):
            continue
        rows.append((f"{fmt_name}: words recovered (worst file {fmt(figures.get('worst_file'))})",
                     figures.get("recovery"), ""))
        rows.append((f"{fmt_name}: conversion documents/s", figures.get("conversion_documents_per_s"),
                     f"{fmt(figures.get('model_documents_per_s'))} (embedding model)"))
        rows.append((f"{fmt_name}: conversion MB/s", figures.get("conversion_mb_per_s"),
                     f"{fmt(figures.get('model_mb_per_s'))} (embedding model, MB of text)"))
    return rows


def lexical_indexes(d: dict) -> list[Row]:
    """Each ranking's p50 per index set and size; the baseline is the table-wide index set."""
    rows = []
    for size in ("10k", "100k", "1m"):
        arms = get(d, f"{size}|arms") or {}
        for arm, figures in arms.items():
            ranking, _, index_set = arm.partition("/")
            if index_set == "table_wide" or not isinstance(figures, dict):
                continue
            base = get(arms, f"{ranking}/table_wide|p50_ms")
            rows.append((f"{size}: {ranking} ranking p50 ms, {index_set}", figures.get("p50_ms"),
                         f"{fmt(base)} (table_wide)" if base is not None else ""))
    return rows


def embeddings(d: dict) -> list[Row]:
    return [
        (f"{name}: passages/s ({d.get('provider')}, {d.get('threads')} threads)", w.get("passages_per_s"), "")
        for name, w in (d.get("workloads") or {}).items()
        if isinstance(w, dict)
    ]


def reconcile(d: dict) -> list[Row]:
    if "reports" in d:  # one report per path (stream, unary) and size; unary is the baseline
        rows = []
        unary = {(r.get("items"), run.get("run")): run.get("items_per_second")
                 for r in d["reports"] if r.get("path") == "unary" for run in r.get("runs", [])}
        for report in d["reports"]:
            if report.get("path") == "unary":
                continue
            for run in report.get("runs", []):
                base = unary.get((report.get("items"), run.get("run")))
                rows.append((f"{report.get('items')} items, {report.get('path')}, {run.get('run')} run: items/s",
                             run.get("items_per_second"), f"{fmt(base)} (unary)" if base is not None else ""))
        return rows
    runs = {r.get("run"): r for r in d.get("runs", []) if isinstance(r, dict)}
    initial = runs.get("initial", {}).get("items_per_second")
    return [
        (f"{d.get('items')} items, {name} run: items/s", r.get("items_per_second"),
         "" if name == "initial" or initial is None else f"{fmt(initial)} (initial run)")
        for name, r in runs.items()
    ]


def traversal(d: dict) -> list[Row]:
    return [
        (f"depth {r.get('depth')}: recursive CTE p50 ms", r.get("cte_ms_p50"), f"{fmt(r.get('cypher_ms_p50'))} (Cypher)")
        for r in d.get("runs", [])
    ]


def memories(d: dict) -> list[Row]:
    """AddMemories against the model alone; RecallMemories at each size against the exact path of the same
    run (older runs: a single ``recall`` entry against GetMemory)."""
    rows = pairs(d, [("AddMemories memories/s", "add|memories_per_s", "add|floor_after_per_s")])
    if "arms" not in d:
        return rows + pairs(d, [
            ("RecallMemories p50 ms", "recall|recall|p50_ms", "recall|get_memory_floor|p50_ms"),
            ("RecallMemories p95 ms", "recall|recall|p95_ms", "recall|get_memory_floor|p95_ms"),
        ])
    for arm in d["arms"]:
        size = f"{arm.get('memories')} memories"
        rows += pairs(arm, [
            (f"RecallMemories p50 ms at {size}", "recall|p50_ms", "baseline_exact_recall|p50_ms"),
            (f"RecallMemories p95 ms at {size}", "recall|p95_ms", "baseline_exact_recall|p95_ms"),
            (f"CPU ms per recall at {size}", "cpu_per_call|approximate|total_ms", "cpu_per_call|exact|total_ms"),
            (f"recall@10 at {size}", "quality|recall_at_10", ""),
        ])
    return rows


def console(d: dict) -> list[Row]:
    """Each page's p95 (ms, at the client) and bytes; the baseline tree's beside when the run had one."""
    rows = []
    for page, trees in d.get("pages", {}).items():
        mine, base = trees.get("this tree", {}), trees.get("baseline")
        for label, path in (("p95 ms", "wall|p95_ms"), ("bytes", "bytes")):
            baseline = f"{fmt(get(base, path))} (baseline tree)" if base else ""
            rows.append((f"{page}: {label}", get(mine, path), baseline))
    return rows


SPECS: dict[str, Callable[[Any], list[Row]]] = {
    "console": console,
    "lexical-indexes": lexical_indexes,
    "embeddings": embeddings,
    "reconcile": reconcile,
    "traversal": traversal,
    "ingest": ingest,
    "compile-cost": compile_cost,
    "scale": scale,
    "context-quality": context_quality,
    "retrieval": retrieval,
    "title-search": lambda d: pairs(d, [
        ("section titles MRR@10, Search (documents)", "table|service[documents]|mrr", "table|bm25|mrr"),
        ("section titles hit@1, Search (documents)", "table|service[documents]|hit1", "table|bm25|hit1"),
        ("section titles nDCG@10, Search (documents)", "table|service[documents]|ndcg", "table|bm25|ndcg"),
        ("vault sentence hit@5, Search (documents)", "table|service[documents]|sentence_hit5", ""),
        ("Search p95 ms at ~10k chunks (gRPC)", "search_grpc|service[documents]|p95_ms", ""),
        ("CPU ms per Search (service + database)", "search_grpc|service[documents]|cpu_ms_per_call", ""),
    ]),
    "documents": documents,
    "vault": lambda d: pairs(d, [
        ("vault ingest chunks/s", "full|chunks_per_second", "floor_after|per_second"),
        ("unchanged re-run s", "rerun|seconds", ""),
    ]),
    "enrichment": lambda d: pairs(d, [
        ("memories enriched/s", "throughput|per_second", ""),
        ("ratio to the rule enricher alone", "throughput|ratio_to_floor", ""),
        ("lag p50 s", "lag|p50_s", ""),
        ("lag p95 s", "lag|p95_s", ""),
    ]),
    "memories": memories,
    "search-namespace": lambda d: pairs(d, [
        ("Search p50 ms (in process)", "p50_ms", ""),
        ("Search p95 ms (in process)", "p95_ms", ""),
        ("process CPU ms per Search", "cpu_per_search|process_cpu_ms", ""),
    ]),
    "identifier-index": lambda d: pairs(d, [
        ("trigram ranking p50 ms (identifier_text)", "ranking|identifier|p50_ms", "ranking|text|p50_ms"),
        ("trigram ranking p95 ms (identifier_text)", "ranking|identifier|p95_ms", "ranking|text|p95_ms"),
        ("index MB (identifier_text)", "index_mb|identifier", "index_mb|text"),
        ("queries with the same rows", "ranking|same_rows_and_order", "ranking|queries"),
    ]),
    "capacity": lambda d: pairs(d, [
        ("Search calls/s, 1 process", "runs|Search x1|calls_per_s", ""),
        ("Search p50 ms, 1 process", "runs|Search x1|p50_ms", ""),
        ("Search calls/s, 2 processes", "runs|Search x2|calls_per_s", ""),
        ("CompileContext calls/s, 1 process", "runs|CompileContext x1|calls_per_s", ""),
    ]),
    "pack-fitting": lambda d: pairs(d, [
        ("incremental fit ms @1000 tokens", "figures|incremental@1000|p50_ms", "figures|whole_pack@1000|p50_ms"),
        ("incremental fit ms @2000 tokens", "figures|incremental@2000|p50_ms", "figures|whole_pack@2000|p50_ms"),
    ]),
    "service": lambda d: pairs(d, [
        ("observations/s (4 in flight)", "observations|per_second", "observations_sequential|per_second"),
        ("documents chunks/s", "documents|chunks_per_second", ""),
        ("Search p50 ms (gRPC)", "search_grpc|p50_ms", "search_raw_sql|p50_ms"),
        ("CompileContext p50 ms (gRPC)", "compile_context_grpc|p50_ms", ""),
        ("ListFacts p50 ms (gRPC)", "list_facts_grpc|p50_ms", ""),
    ]),
}


def numeric_leaves(data: Any, prefix: str = "") -> Iterator[tuple[str, Any]]:
    """Every number of a run, by path: the fallback for a benchmark without a headline spec."""
    if isinstance(data, dict):
        for key, value in data.items():
            if key not in ("machine", "time", "at") and "load" not in key:
                yield from numeric_leaves(value, f"{prefix}{key} · ")
    elif isinstance(data, list):
        for i, value in enumerate(data):
            yield from numeric_leaves(value, f"{prefix}{i} · ")
    elif isinstance(data, (int, float)) and not isinstance(data, bool):
        yield prefix.rstrip(" ·"), data


def all_runs() -> dict[str, list[tuple[str, str, dict]]]:
    """Every run of each benchmark, oldest first: (file name, UTC time stamp, the run)."""
    runs: dict[str, list[tuple[str, str, dict]]] = {}
    for path in sorted(RESULTS.glob("*.json")):
        data = json.loads(path.read_text(encoding="utf-8"))
        match = STAMP.search(path.stem)
        name = path.stem[: match.start()] if match else path.stem
        candidates = data if isinstance(data, list) else [data]
        for run in candidates:
            stamp = str(run.get("time") or run.get("at") or (match.group(1) if match else ""))
            stamp = re.sub(r"\+00:00$", "", stamp)
            stamp = re.sub(r"[-:]", "", stamp).rstrip("Z") + "Z"
            runs.setdefault(name, []).append((path.name, stamp, run))
    return {name: sorted(found, key=lambda r: r[1]) for name, found in sorted(runs.items())}


def history_plot(name: str, runs: list[tuple[str, str, dict]]) -> str | None:
    """Draws the first headline figure of every run of ``name`` against the run's time into the site;
    returns the image's path, or None without matplotlib or with fewer than two runs that have it."""
    spec = SPECS.get(name)
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    if spec is None:
        return None
    points = []
    label = ""
    for _, stamp, run in runs:
        try:
            rows = spec(run)
        except (KeyError, TypeError, ValueError, ZeroDivisionError):
            continue
        if rows and isinstance(rows[0][1], (int, float)) and (not label or rows[0][0] == label):
            label = rows[0][0]
            points.append((f"{stamp[4:6]}-{stamp[6:8]} {stamp[9:11]}:{stamp[11:13]}", rows[0][1]))
    if len(points) < 2:
        return None
    figure, axes = plt.subplots(figsize=(7, 2.6), dpi=100)
    axes.plot([p[0] for p in points], [p[1] for p in points], marker="o")
    axes.set_title(f"{name}: {label}", fontsize=10)
    axes.tick_params(axis="x", labelrotation=45, labelsize=7)
    figure.tight_layout()
    target = f"assets/bench/{name}-history.png"
    with mkdocs_gen_files.open(target, "wb") as image:
        figure.savefig(image, format="png", metadata={"Software": None})
    plt.close(figure)
    return target


def find_load(run: Any) -> str:
    """The first load average recorded in a run (1-minute figure), as text."""
    for key in ("load_average", "load_1m", "loadavg_1m", "load"):
        value = run.get(key) if isinstance(run, dict) else None
        if isinstance(value, (int, float)):
            return fmt(value)
        if isinstance(value, list) and value and isinstance(value[0], list):  # before and after a figure
            value = value[0]
        if isinstance(value, list) and value and isinstance(value[0], (int, float)):
            return fmt(value[0])
        if isinstance(value, dict):  # e.g. {"start": 13.2, "after_add": 15.3}; not a data set's "load"
            first = next((v for k, v in value.items() if k in ("start", "before", "load_1m") and isinstance(v, (int, float))), None)
            if first is not None:
                return fmt(first)
    if isinstance(run, dict):
        for value in run.values():
            if isinstance(value, (dict, list)):
                found = find_load(value) if isinstance(value, dict) else next(
                    (f for f in (find_load(v) for v in value if isinstance(v, dict)) if f), ""
                )
                if found:
                    return found
    return ""


def machine(run: dict) -> str:
    m = run.get("machine") or {}
    if isinstance(m, dict) and m:
        cpu = m.get("cpu") or m.get("cpu_model") or ""
        cores = m.get("cores") or m.get("nproc") or m.get("cpus") or ""
        mem = m.get("memory_gib") or m.get("mem_gib")
        return f"{cpu} {cores} cores".strip() + (f", {mem} GiB" if mem else "")
    if "cores" in run:
        return f"{run['cores']} cores"
    return "not recorded"


def clean_note(note: str) -> str:
    """A run's note without work-log numbering (the notes were written for the lab notebook)."""
    note = re.sub(r"^\s*(session \d+\w*( scratch)?|s\d+-[\w-]+)\s*:?\s*", "", note or "")
    note = re.sub(r"(\d+ )?other (agents|helpers)('|’)?( test suites)?", "other work", note)
    note = re.sub(r"(about )?(six|\d+) agents", "other work", note)
    note = note.replace(", lead's run", "")
    return note.replace("|", "\\|").replace("\n", " ")


def plot_for(file: str) -> Path | None:
    png = RESULTS / (Path(file).stem + ".png")
    return png if png.exists() else None


def main() -> None:
    out = [
        "# Benchmarks\n",
        "The latest run of each benchmark under `bench/`, generated at build time from `bench/results/*.json` "
        "(each benchmark writes one JSON file per run there; older runs stay in that folder and in git). "
        "A baseline is what the same run measured for comparison: another code tree, a floor such as the "
        "model's own speed or a set-based insert, or a reference method such as BM25. The machines are shared "
        "2-core virtual machines, so read every figure with its load average: a figure at load 20 is not "
        "comparable to one at load 1. With matplotlib installed (`pip install -e '.[bench]'`), each "
        "benchmark also shows the history of its first figure over every run kept, runs of a baseline tree "
        "included. How to run them: [Run the benchmarks](how-to/run-benchmarks.md); "
        "the decisions they informed: [Decision records](decisions/index.md).\n",
        "| benchmark | latest run | machine | load (1 min) |\n|---|---|---|---|",
    ]
    runs = all_runs()
    latest = {name: (found[-1][0], found[-1][2]) for name, found in runs.items()}
    for name, (file, run) in latest.items():
        out.append(f"| [{name}](#{name}) | {file} | {machine(run)} | {find_load(run) or '–'} |")
    out.append("")
    for name, (file, run) in latest.items():
        out.append(f"## {name}\n")
        out.append(f"Run `{file}`; machine: {machine(run)}; load average: {find_load(run) or 'not recorded'}.")
        note = clean_note(str(run.get("note") or ""))
        out.append(f"Note of the run: {note}\n" if note else "")
        spec = SPECS.get(name)
        rows = spec(run) if spec else []
        if rows:
            out.append("| figure | value | baseline in the same run |\n|---|---|---|")
            out += [f"| {label} | {fmt(value)} | {base} |" for label, value, base in rows]
        else:
            out.append("| figure | value |\n|---|---|")
            out += [f"| {label} | {fmt(value)} |" for label, value in list(numeric_leaves(run))[:40]]
        out.append("")
        png = plot_for(file)
        if png is not None:
            target = f"assets/bench/{png.name}"
            with mkdocs_gen_files.open(target, "wb") as image:
                image.write(png.read_bytes())
            out.append(f"![{name}: the run's plot]({target})\n")
        history = history_plot(name, runs[name])
        if history is not None:
            out.append(f"![{name}: history of the first figure over its runs]({history})\n")
    with mkdocs_gen_files.open(PAGE, "w") as page:
        page.write("\n".join(out) + "\n")


main()

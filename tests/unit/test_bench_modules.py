"""Every benchmark module imports: a benchmark is run by hand and seldom, so a moved module it imports
would otherwise be found only by the next person who runs it (docs/how-to/run-benchmarks.md)."""

import importlib
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench"
MODULES = sorted(path.stem for path in BENCH.glob("*.py") if path.stem != "__init__")


def test_the_benchmarks_are_found() -> None:
    assert "run_bench" in MODULES and len(MODULES) > 20, MODULES


@pytest.mark.parametrize("name", MODULES)
def test_a_benchmark_module_imports(name: str) -> None:
    importlib.import_module(f"bench.{name}")

"""The checked-in stubs under clients/python/src/memory are exactly what `make protos` generates from protos/."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
GENERATED = ROOT / "clients" / "python" / "src" / "memory" / "v1"


def test_checked_in_stubs_match_the_protos(tmp_path: Path) -> None:
    protos = sorted(
        str(p.relative_to(ROOT / "protos")) for p in (ROOT / "protos" / "memory" / "v1").glob("*.proto")
    )
    env = dict(os.environ, PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}")
    subprocess.run(
        [
            sys.executable,
            "-m",
            "grpc_tools.protoc",
            "-I",
            str(ROOT / "protos"),
            f"--python_out={tmp_path}",
            f"--grpc_python_out={tmp_path}",
            f"--mypy_out={tmp_path}",
            f"--mypy_grpc_out={tmp_path}",
            *protos,
        ],
        check=True,
        env=env,
        cwd=ROOT,
    )
    fresh = {p.name: p.read_text() for p in (tmp_path / "memory" / "v1").iterdir()}
    checked_in = {
        p.name: p.read_text() for p in GENERATED.iterdir() if p.name != "__init__.py" and p.is_file()
    }
    assert sorted(fresh) == sorted(checked_in), "run `make protos` and commit the result"
    stale = [name for name in fresh if fresh[name] != checked_in[name]]
    assert stale == [], f"stale stubs {stale}: run `make protos` and commit the result"

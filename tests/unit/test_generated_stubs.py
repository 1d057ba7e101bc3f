"""The checked-in stubs (clients/python/src/memory_service_grpc_client/memory/v1) are exactly what
`make protos` generates from protos/: the target is run into a temporary folder and the files compared."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
GENERATED = ROOT / "clients" / "python" / "src" / "memory_service_grpc_client" / "memory" / "v1"


def test_checked_in_stubs_match_the_protos(tmp_path: Path) -> None:
    venv = Path(sys.executable).parent.parent
    subprocess.run(
        # -o: the target's prerequisite, the installed environment, is this one and is not remade.
        [
            "make",
            "-s",
            "-C",
            str(ROOT),
            "-o",
            f"{venv}/.installed",
            "protos",
            f"VENV={venv}",
            f"STUBS={tmp_path}",
        ],
        check=True,
        timeout=300,
    )
    fresh = {p.name: p.read_text() for p in (tmp_path / "memory" / "v1").iterdir()}
    checked_in = {p.name: p.read_text() for p in GENERATED.iterdir() if p.is_file()}
    assert sorted(fresh) == sorted(checked_in), "run `make protos` and commit the result"
    stale = [name for name in fresh if fresh[name] != checked_in[name]]
    assert stale == [], f"stale stubs {stale}: run `make protos` and commit the result"
    assert not any("from memory.v1 " in text for text in fresh.values())

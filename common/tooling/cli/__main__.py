"""``python -m common.tooling.cli``: the ``cb`` command line (as the console script runs it)."""

from common.tooling.cli import app

app()

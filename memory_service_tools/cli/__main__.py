"""``python -m memory_service_tools.cli``: the ``cb`` command line (as the console script runs it)."""

from memory_service_tools.cli import app

app()

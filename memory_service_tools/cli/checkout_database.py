"""The development database of one checkout: ``cb up`` on the embedded server gives each checkout a
database of its own, named after the checkout's path, so two clones never work off each other's data
(observations, enrichment jobs). The server itself (127.0.0.1:55432) stays shared."""

from __future__ import annotations

import hashlib
import re
from pathlib import Path
from urllib.parse import urlsplit
from urllib.parse import urlunsplit

import psycopg
from psycopg import sql


def checkout_root(start: Path | None = None) -> Path:
    """The checkout this code runs from: the nearest folder above ``start`` (this file) holding a
    pyproject.toml."""
    here = (start or Path(__file__)).resolve()
    for folder in [here, *here.parents]:
        if (folder / "pyproject.toml").is_file():
            return folder
    return here.parent


def checkout_database_name(root: Path) -> str:
    """``cb_<folder name>_<8 hex of the path's sha256>``: readable, a valid unquoted identifier of at
    most 63 characters, and different for two checkouts with the same folder name."""
    stem = re.sub(r"[^a-z0-9]+", "_", root.name.lower()).strip("_")[:40] or "checkout"
    digest = hashlib.sha256(str(root.resolve()).encode()).hexdigest()[:8]
    return f"cb_{stem}_{digest}"


def checkout_database_url(server_url: str, name: str = "") -> str:
    """The URL of database ``name`` (by default this checkout's, `checkout_database_name`) on the server
    of ``server_url``: what `cb up` gives the services, and what `cb health` checks."""
    name = name or checkout_database_name(checkout_root())
    return urlunsplit(urlsplit(server_url)._replace(path=f"/{name}"))


def ensure_checkout_database(server_url: str, name: str) -> tuple[str, bool]:
    """Creates database ``name`` on the server of ``server_url`` when it does not exist yet.

    Returns:
        The URL of database ``name`` and whether it was created now.
    """
    with psycopg.connect(server_url, autocommit=True) as admin:
        exists = admin.execute("SELECT 1 FROM pg_database WHERE datname = %s", (name,)).fetchone()
        if not exists:
            admin.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    return checkout_database_url(server_url, name), not exists

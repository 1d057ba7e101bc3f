"""Markdown vaults for ``cb retain``: the ``*.md`` files of a folder, each read into the RetainRequest of
one document (content byte-for-byte, YAML frontmatter mapped onto the request's fields).
"""

from __future__ import annotations

import datetime as dt
import hashlib
from pathlib import Path
from typing import Any

from memory.v1 import document_service_pb2

from common.grpc.proto_mapping import dict_to_struct


class DocumentError(ValueError):
    """A Markdown file that cannot be sent (unreadable, not UTF-8, bad frontmatter)."""


_CONSUMED_FRONTMATTER = frozenset(
    {"natural_key", "title", "type", "links", "scopes", "meta", "pii", "pii_categories"}
)


def default_natural_key(relative_path: str | Path) -> str:
    """``doc:<path relative to the vault, POSIX separators, without .md>``, e.g. ``doc:apt/README``."""
    posix = Path(relative_path).as_posix()
    if posix.lower().endswith(".md"):
        posix = posix[: -len(".md")]
    return f"doc:{posix}"


def find_documents(root: Path) -> list[Path]:
    """Every ``*.md`` file under ``root`` sorted by relative path; hidden folders (``.git``, ...) skipped."""
    found = []
    for path in root.rglob("*.md"):
        relative = path.relative_to(root)
        if any(part.startswith(".") for part in relative.parts[:-1]):
            continue
        if path.is_file():
            found.append(path)
    return sorted(found, key=lambda p: p.relative_to(root).as_posix())


def _string_list(value: Any, name: str) -> list[str]:
    if value is None:
        return []
    if isinstance(value, str):
        return [value] if value.strip() else []
    if isinstance(value, (list, tuple)):
        items = []
        for item in value:
            if isinstance(item, (dict, list)):
                raise DocumentError(f"frontmatter {name}: expected strings, got {type(item).__name__}")
            if item is not None and str(item).strip():
                items.append(str(item))
        return items
    raise DocumentError(f"frontmatter {name}: expected a string or a list of strings")


def _jsonable(value: Any) -> Any:
    """YAML values as JSON values (dates become ISO strings); raises TypeError for anything else."""
    if value is None or isinstance(value, (str, bool, int, float)):
        return value
    if isinstance(value, (dt.date, dt.datetime, dt.time)):
        return value.isoformat()
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    raise TypeError(type(value).__name__)


def read_document(path: Path, root: Path, *, namespace: str) -> document_service_pb2.RetainRequest:
    """Builds the RetainRequest of one Markdown file of a vault.

    The content is the file byte-for-byte (decoded as UTF-8, newlines untouched, frontmatter included:
    the server strips it for chunking). Frontmatter (YAML) gives ``natural_key`` (default
    `default_natural_key`), ``title``, ``type``, ``links`` (string or list of natural keys), ``scopes``,
    ``pii``, ``pii_categories`` and ``meta`` (a mapping); any other scalar or list key (``project``,
    ``license``, ...) is added to ``meta``. ``source_path`` is the path relative to ``root``;
    ``provenance`` is ``{"path": <relative path>, "sha256": <hex of the bytes>}``.

    Raises:
        DocumentError: the file cannot be read, is not UTF-8, or its frontmatter is malformed.
    """
    import frontmatter  # python-frontmatter; imported here to keep `cb --help` fast

    relative = path.relative_to(root).as_posix()
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise DocumentError(f"cannot read: {exc.strerror or exc}") from exc
    try:
        content = data.decode("utf-8")  # same text as open(path, encoding="utf-8", newline="")
    except UnicodeDecodeError as exc:
        raise DocumentError(f"not UTF-8: {exc}") from exc
    try:
        metadata = dict(frontmatter.loads(content).metadata)
    except Exception as exc:  # yaml errors and non-mapping frontmatter
        raise DocumentError(
            f"bad frontmatter: {str(exc).splitlines()[0] if str(exc) else type(exc).__name__}"
        ) from exc

    def text(key: str) -> str:
        value = metadata.get(key)
        if value is None:
            return ""
        if isinstance(value, (dict, list)):
            raise DocumentError(f"frontmatter {key}: expected a string")
        return str(value).strip()

    meta_value = metadata.get("meta") or {}
    if not isinstance(meta_value, dict):
        raise DocumentError("frontmatter meta: expected a mapping")
    meta: dict[str, Any] = {}
    leftovers = [(k, v) for k, v in metadata.items() if k not in _CONSUMED_FRONTMATTER]
    for key, value in [*leftovers, *meta_value.items()]:  # an explicit `meta` entry wins
        if value is None:
            continue
        try:
            meta[str(key)] = _jsonable(value)
        except TypeError:
            continue
    pii = metadata.get("pii", False)
    if isinstance(pii, str):
        pii = pii.strip().lower() in ("true", "yes", "1", "on")
    request = document_service_pb2.RetainRequest(
        namespace=namespace,
        natural_key=text("natural_key") or default_natural_key(relative),
        type=text("type"),
        title=text("title"),
        content=content,
        links=_string_list(metadata.get("links"), "links"),
        source_path=relative,
        provenance=dict_to_struct({"path": relative, "sha256": hashlib.sha256(data).hexdigest()}),
        scopes=_string_list(metadata.get("scopes"), "scopes"),
        pii=bool(pii),
        pii_categories=_string_list(metadata.get("pii_categories"), "pii_categories"),
    )
    if meta:
        request.meta.CopyFrom(dict_to_struct(meta))
    return request

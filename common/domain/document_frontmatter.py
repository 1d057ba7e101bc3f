"""YAML frontmatter of a Markdown document mapped onto a document's fields (python-frontmatter).

One mapping for both readers of Markdown files: ``cb retain`` (`memory_service_tools.markdown_vault`, which
builds RetainRequests on the client) and vault ingest (`ingest_service.vault.documents`, which parses
the files a VaultService.IngestVault stream sends on the server).

Keys: ``natural_key``, ``title``, ``type``, ``links`` (a string or a list of natural keys), ``scopes``,
``pii``, ``pii_categories`` and ``meta`` (a mapping); any other scalar or list key (``project``,
``license``, ...) is added to ``meta`` (an explicit ``meta`` entry wins). Vault ingest also reads
``aliases`` (other names a ``[[wiki link]]`` may use) and the relations: ``relations`` (a mapping of
relation -> target or list of targets) and the top-level keys of `RELATION_KEYS`; those keys are then
not copied into ``meta``.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable
from collections.abc import Mapping
from dataclasses import dataclass
from dataclasses import field
from pathlib import PurePath
from typing import Any

BASE_FIELDS = frozenset({"natural_key", "title", "type", "links", "scopes", "meta", "pii", "pii_categories"})
# Frontmatter keys that name typed relations of a document (docs/explanation/knowledge-model.md:
# SUPERSEDED_BY, PART_OF_PROJECT, ...); the predicate is the key in upper case. More go under ``relations:``.
RELATION_KEYS = frozenset(
    {
        "superseded_by",
        "supersedes",
        "replaces",
        "replaced_by",
        "part_of",
        "part_of_project",
        "depends_on",
        "related_to",
    }
)
VAULT_FIELDS = BASE_FIELDS | RELATION_KEYS | {"aliases", "relations"}


def default_natural_key(relative_path: str | PurePath) -> str:
    """``doc:<path relative to the vault, POSIX separators, without .md>``, e.g. ``doc:apt/README``."""
    posix = PurePath(relative_path).as_posix()
    if posix.lower().endswith(".md"):
        posix = posix[: -len(".md")]
    return f"doc:{posix}"


class FrontmatterError(ValueError):
    """Frontmatter that cannot be mapped (YAML error, not a mapping, a value of the wrong shape)."""


@dataclass(frozen=True)
class DocumentFields:
    """What a document's frontmatter says (empty strings and lists for absent keys).

    Attributes:
        relations: (relation as written, target as written) pairs, in frontmatter order.
    """

    natural_key: str = ""
    title: str = ""
    type: str = ""
    links: tuple[str, ...] = ()
    scopes: tuple[str, ...] = ()
    pii: bool = False
    pii_categories: tuple[str, ...] = ()
    meta: dict[str, Any] = field(default_factory=dict)
    aliases: tuple[str, ...] = ()
    relations: tuple[tuple[str, str], ...] = ()


def string_list(value: Any, name: str) -> list[str]:
    """A frontmatter value that is a string or a list of strings, as a list (blank items dropped).

    Raises:
        FrontmatterError: a mapping, or a list holding mappings or lists.
    """
    if value is None:
        return []
    if isinstance(value, str):
        return [value] if value.strip() else []
    if isinstance(value, (list, tuple)):
        items = []
        for item in value:
            if isinstance(item, (dict, list)):
                raise FrontmatterError(f"frontmatter {name}: expected strings, got {type(item).__name__}")
            if item is not None and str(item).strip():
                items.append(str(item))
        return items
    raise FrontmatterError(f"frontmatter {name}: expected a string or a list of strings")


def jsonable(value: Any) -> Any:
    """YAML values as JSON values (dates become ISO strings); raises TypeError for anything else."""
    if value is None or isinstance(value, (str, bool, int, float)):
        return value
    if isinstance(value, (dt.date, dt.datetime, dt.time)):
        return value.isoformat()
    if isinstance(value, (list, tuple)):
        return [jsonable(v) for v in value]
    if isinstance(value, dict):
        return {str(k): jsonable(v) for k, v in value.items()}
    raise TypeError(type(value).__name__)


def read_frontmatter(content: str) -> dict[str, Any]:
    """The frontmatter of ``content`` as a mapping (empty without one).

    Raises:
        FrontmatterError: malformed YAML, or a frontmatter that is not a mapping.
    """
    import frontmatter  # python-frontmatter; imported here to keep `cb --help` fast

    try:
        return dict(frontmatter.loads(content).metadata)
    except Exception as exc:  # yaml errors and non-mapping frontmatter
        first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise FrontmatterError(f"bad frontmatter: {first}") from exc


def document_fields(metadata: Mapping[str, Any], *, consumed: Iterable[str] = BASE_FIELDS) -> DocumentFields:
    """Maps frontmatter ``metadata`` onto `DocumentFields`; keys outside ``consumed`` go into ``meta``.

    Pass `VAULT_FIELDS` to read aliases and relations too (vault ingest); `BASE_FIELDS` (``cb retain``)
    keeps them in ``meta``.

    Raises:
        FrontmatterError: a value of the wrong shape (``title`` a list, ``meta`` not a mapping, ...).
    """
    consumed = frozenset(consumed)
    vault = "relations" in consumed

    def text(key: str) -> str:
        value = metadata.get(key)
        if value is None:
            return ""
        if isinstance(value, (dict, list)):
            raise FrontmatterError(f"frontmatter {key}: expected a string")
        return str(value).strip()

    meta_value = metadata.get("meta") or {}
    if not isinstance(meta_value, dict):
        raise FrontmatterError("frontmatter meta: expected a mapping")
    meta: dict[str, Any] = {}
    leftovers = [(k, v) for k, v in metadata.items() if k not in consumed]
    for key, value in [*leftovers, *meta_value.items()]:  # an explicit `meta` entry wins
        if value is None:
            continue
        try:
            meta[str(key)] = jsonable(value)
        except TypeError:
            continue
    pii = metadata.get("pii", False)
    if isinstance(pii, str):
        pii = pii.strip().lower() in ("true", "yes", "1", "on")
    relations: list[tuple[str, str]] = []
    aliases: list[str] = []
    if vault:
        for key in metadata:
            if key in RELATION_KEYS:
                relations.extend((str(key), target) for target in string_list(metadata[key], str(key)))
        declared = metadata.get("relations") or {}
        if not isinstance(declared, dict):
            raise FrontmatterError("frontmatter relations: expected a mapping of relation -> target(s)")
        for key, value in declared.items():
            relations.extend((str(key), target) for target in string_list(value, f"relations.{key}"))
        aliases = string_list(metadata.get("aliases"), "aliases")
    return DocumentFields(
        natural_key=text("natural_key"),
        title=text("title"),
        type=text("type"),
        links=tuple(string_list(metadata.get("links"), "links")),
        scopes=tuple(string_list(metadata.get("scopes"), "scopes")),
        pii=bool(pii),
        pii_categories=tuple(string_list(metadata.get("pii_categories"), "pii_categories")),
        meta=meta,
        aliases=tuple(aliases),
        relations=tuple(relations),
    )


__all__ = [
    "BASE_FIELDS",
    "RELATION_KEYS",
    "VAULT_FIELDS",
    "DocumentFields",
    "FrontmatterError",
    "default_natural_key",
    "document_fields",
    "jsonable",
    "read_frontmatter",
    "string_list",
]

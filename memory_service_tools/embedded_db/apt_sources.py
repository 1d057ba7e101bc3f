"""The host's apt sources, read to find the Debian mirror the rootfs is built from (stdlib only).

Both formats apt reads are parsed: deb822 ``*.sources`` files and one-line ``sources.list`` entries. The
mirror is the first entry of the main Debian archive (not security, not a third-party repository), so no
mirror is ever written into the repository.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterator
from pathlib import Path

# Suite names of the Debian archive itself (release code names and aliases).
_DEBIAN_SUITES = frozenset(
    {
        "buster", "bullseye", "bookworm", "trixie", "forky", "duke", "sid",
        "oldoldstable", "oldstable", "stable", "testing", "unstable", "experimental",
    }
)  # fmt: skip
_SUITE_SUFFIXES = ("-updates", "-backports", "-proposed-updates", "-backports-sloppy")
_MIRROR_SCHEMES = ("http://", "https://", "file:/")


@dataclasses.dataclass(frozen=True)
class AptSource:
    """One ``deb`` entry of the host's apt configuration.

    Attributes:
        uri: Archive URI.
        suites: Suites (distributions) of the entry.
        components: Components (``main``, ``contrib``...).
        origin: File the entry came from.
    """

    uri: str
    suites: tuple[str, ...]
    components: tuple[str, ...]
    origin: Path


def parse_deb822_sources(text: str, origin: Path = Path("-")) -> list[AptSource]:
    """Parses a deb822 ``.sources`` file.

    Args:
        text: File content.
        origin: Path recorded in the results.

    Returns:
        One entry per URI of every enabled stanza whose ``Types`` include ``deb``, in file order.
    """
    sources: list[AptSource] = []
    for stanza in _deb822_stanzas(text):
        if stanza.get("enabled", "yes").strip().lower() in {"no", "false", "0"}:
            continue
        if "deb" not in stanza.get("types", "").split():
            continue
        suites = tuple(stanza.get("suites", "").split())
        components = tuple(stanza.get("components", "").split())
        for uri in stanza.get("uris", "").split():
            sources.append(AptSource(uri=uri, suites=suites, components=components, origin=origin))
    return sources


def _deb822_stanzas(text: str) -> Iterator[dict[str, str]]:
    fields: dict[str, str] = {}
    last: str | None = None
    for raw in text.splitlines():
        if raw.startswith("#"):
            continue
        if not raw.strip():
            if fields:
                yield fields
            fields, last = {}, None
            continue
        if raw[0] in " \t":
            if last is not None and raw.strip() != ".":
                fields[last] += " " + raw.strip()
            continue
        name, sep, value = raw.partition(":")
        if not sep:
            continue
        last = name.strip().lower()
        fields[last] = value.strip()
    if fields:
        yield fields


_ONE_LINE = re.compile(
    r"^deb\s+(?:\[(?P<options>[^\]]*)\]\s*)?(?P<uri>\S+)\s+(?P<suite>\S+)(?P<components>.*)$"
)


def parse_one_line_sources(text: str, origin: Path = Path("-")) -> list[AptSource]:
    """Parses a one-line-style ``sources.list`` file (``deb [options] URI suite [components]``).

    Args:
        text: File content.
        origin: Path recorded in the results.

    Returns:
        The ``deb`` entries (not ``deb-src``), in file order; entries with ``enabled=no`` are skipped.
    """
    sources: list[AptSource] = []
    for raw in text.splitlines():
        line = raw.split("#", 1)[0].strip()
        match = _ONE_LINE.match(line)
        if match is None:
            continue
        options = (match.group("options") or "").split()
        if any(option.lower() in {"enabled=no", "enabled=false"} for option in options):
            continue
        sources.append(
            AptSource(
                uri=match.group("uri"),
                suites=(match.group("suite"),),
                components=tuple(match.group("components").split()),
                origin=origin,
            )
        )
    return sources


def read_apt_sources(etc_apt: Path = Path("/etc/apt")) -> list[AptSource]:
    """Reads the host's apt sources in apt's order.

    Args:
        etc_apt: The apt configuration directory.

    Returns:
        Entries of ``sources.list`` first, then of ``sources.list.d/*.list`` and ``*.sources`` in
        alphabetical file order. Unreadable files are skipped.
    """
    files: list[Path] = []
    main_list = etc_apt / "sources.list"
    if main_list.is_file():
        files.append(main_list)
    parts = etc_apt / "sources.list.d"
    if parts.is_dir():
        files.extend(sorted(p for p in parts.iterdir() if p.suffix in {".list", ".sources"} and p.is_file()))
    sources: list[AptSource] = []
    for path in files:
        try:
            text = path.read_text(encoding="utf-8", errors="replace")
        except OSError:
            continue
        if path.suffix == ".sources":
            sources.extend(parse_deb822_sources(text, path))
        else:
            sources.extend(parse_one_line_sources(text, path))
    return sources


def is_debian_archive(source: AptSource) -> bool:
    """Tells whether an apt entry is the main Debian archive (not security, not a third-party repo).

    Args:
        source: An apt entry.

    Returns:
        True when the URI is usable by debootstrap, no suite is a security suite, the URI is not a
        ``debian-security`` archive, at least one suite is a Debian release (or its -updates /
        -backports) and the ``main`` component is enabled.
    """
    uri = source.uri.rstrip("/")
    if not uri.startswith(_MIRROR_SCHEMES):
        return False
    if "debian-security" in uri or any("security" in suite for suite in source.suites):
        return False
    if source.components and "main" not in source.components:
        return False
    return any(_suite_base(suite) in _DEBIAN_SUITES for suite in source.suites)


def _suite_base(suite: str) -> str:
    suite = suite.strip("/").lower()
    for suffix in _SUITE_SUFFIXES:
        if suite.endswith(suffix):
            return suite[: -len(suffix)]
    return suite


def find_debian_mirror(etc_apt: Path = Path("/etc/apt")) -> str | None:
    """Finds the Debian mirror the host's apt uses.

    Args:
        etc_apt: The apt configuration directory.

    Returns:
        The first URI of the main Debian archive among the host's apt sources, or None.
    """
    for source in read_apt_sources(etc_apt):
        if is_debian_archive(source):
            return source.uri
    return None

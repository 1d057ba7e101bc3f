"""Unit tests of the pure parts of memory_service_tools.embedded_db (no root, no chroot, no database)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from common.kernel.config import EMBEDDED_DATABASE_URL
from memory_service_tools import embedded_db
from memory_service_tools.embedded_db import EmbeddedDatabaseError
from memory_service_tools.embedded_db import chroot_commands
from memory_service_tools.embedded_db import cluster
from memory_service_tools.embedded_db import layout
from memory_service_tools.embedded_db import rootfs
from memory_service_tools.embedded_db.apt_sources import AptSource
from memory_service_tools.embedded_db.apt_sources import find_debian_mirror
from memory_service_tools.embedded_db.apt_sources import is_debian_archive
from memory_service_tools.embedded_db.apt_sources import parse_deb822_sources
from memory_service_tools.embedded_db.apt_sources import parse_one_line_sources
from memory_service_tools.embedded_db.apt_sources import read_apt_sources
from memory_service_tools.embedded_db.command_line import main

MIRROR = "http://mirror.example.org/debian"
SECURITY = "http://mirror.example.org/debian-security"

DEB822_HOST_LIKE = f"""\
Types: deb
# {MIRROR.replace("mirror", "snapshot")}/20250520T000000Z
URIs: {MIRROR}
Suites: bookworm bookworm-updates
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg

Types: deb
# a comment between fields
URIs: {SECURITY}
Suites: bookworm-security
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
"""

DEB822_SECURITY_FIRST = f"""\
Types: deb deb-src
URIs: {SECURITY}
Suites: trixie-security
Components: main

Types: deb-src
URIs: http://sources-only.example.org/debian
Suites: trixie
Components: main

Enabled: no
Types: deb
URIs: http://disabled.example.org/debian
Suites: trixie
Components: main

types: deb
uris: https://second.example.org/debian/ https://third.example.org/debian
suites: trixie trixie-updates
components: main contrib non-free-firmware
signed-by:
 -----BEGIN PGP PUBLIC KEY BLOCK-----
 .
 AAAA
 -----END PGP PUBLIC KEY BLOCK-----
"""

ONE_LINE = f"""\
# deb http://commented.example.org/debian bookworm main
deb-src {MIRROR} bookworm main
deb {SECURITY} bookworm-security main contrib
deb http://security.example.org/ bookworm/updates main
deb [arch=amd64 signed-by=/usr/share/keyrings/x.gpg] https://download.example.com/linux/debian bookworm stable
deb [ arch=amd64 ] {MIRROR} bookworm main contrib non-free-firmware  # trailing comment
deb {MIRROR.replace("mirror", "late")} bookworm-updates main
"""


def _write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


def test_deb822_host_like_file_gives_the_main_archive_not_security(tmp_path: Path) -> None:
    _write(tmp_path / "sources.list.d" / "debian.sources", DEB822_HOST_LIKE)
    sources = read_apt_sources(tmp_path)
    assert [s.uri for s in sources] == [MIRROR, SECURITY]
    assert sources[0].suites == ("bookworm", "bookworm-updates")
    assert sources[0].components == ("main",)
    assert find_debian_mirror(tmp_path) == MIRROR


def test_deb822_skips_security_source_only_and_disabled_stanzas(tmp_path: Path) -> None:
    origin = _write(tmp_path / "sources.list.d" / "debian.sources", DEB822_SECURITY_FIRST)
    sources = parse_deb822_sources(DEB822_SECURITY_FIRST, origin)
    assert [s.uri for s in sources] == [
        SECURITY,
        "https://second.example.org/debian/",
        "https://third.example.org/debian",
    ]
    assert sources[1].components == ("main", "contrib", "non-free-firmware")
    assert sources[1].origin == origin
    # The first URIs: of the first main-archive stanza, as written.
    assert find_debian_mirror(tmp_path) == "https://second.example.org/debian/"


def test_one_line_format_skips_comments_deb_src_security_and_third_party(tmp_path: Path) -> None:
    sources = parse_one_line_sources(ONE_LINE)
    assert [s.uri for s in sources] == [
        SECURITY,
        "http://security.example.org/",
        "https://download.example.com/linux/debian",
        MIRROR,
        MIRROR.replace("mirror", "late"),
    ]
    assert sources[3].suites == ("bookworm",)
    assert sources[3].components == ("main", "contrib", "non-free-firmware")
    _write(tmp_path / "sources.list", ONE_LINE)
    assert find_debian_mirror(tmp_path) == MIRROR


def test_sources_list_comes_before_sources_list_d_and_other_suffixes_are_ignored(tmp_path: Path) -> None:
    _write(tmp_path / "sources.list", f"deb {MIRROR.replace('mirror', 'first')} trixie main\n")
    _write(tmp_path / "sources.list.d" / "a.sources", DEB822_HOST_LIKE)
    _write(
        tmp_path / "sources.list.d" / "0.list.disabled",
        f"deb {MIRROR.replace('mirror', 'off')} trixie main\n",
    )
    assert find_debian_mirror(tmp_path) == MIRROR.replace("mirror", "first")

    (tmp_path / "sources.list").unlink()
    _write(tmp_path / "sources.list.d" / "0-first.list", f"deb {MIRROR.replace('mirror', 'zero')} sid main\n")
    assert find_debian_mirror(tmp_path) == MIRROR.replace("mirror", "zero")


def test_no_debian_archive_gives_none(tmp_path: Path) -> None:
    assert find_debian_mirror(tmp_path) is None
    _write(tmp_path / "sources.list.d" / "node.sources", "Types: deb\nURIs: https://node.example.org/x\n"
           "Suites: nodistro\nComponents: main\n")  # fmt: skip
    _write(tmp_path / "sources.list", "deb https://pkgs.example.org/apt cloud-sdk-bookworm main\n")
    assert find_debian_mirror(tmp_path) is None


@pytest.mark.parametrize(
    ("uri", "suites", "components", "expected"),
    [
        (MIRROR, ("trixie",), ("main",), True),
        (MIRROR, ("stable-updates",), ("main",), True),
        (MIRROR, ("bookworm-backports",), ("main",), True),
        ("file:/srv/mirror/debian", ("trixie",), ("main",), True),
        (SECURITY, ("trixie",), ("main",), False),
        (MIRROR, ("trixie-security",), ("main",), False),
        (MIRROR, ("bookworm-pgdg",), ("main",), False),
        (MIRROR, ("trixie",), ("stable",), False),
        ("cdrom:[Debian GNU/Linux]/", ("trixie",), ("main",), False),
        ("mirror+file:/etc/apt/mirrors.txt", ("trixie",), ("main",), False),
    ],
)
def test_is_debian_archive(
    uri: str, suites: tuple[str, ...], components: tuple[str, ...], expected: bool
) -> None:
    assert is_debian_archive(AptSource(uri, suites, components, Path("-"))) is expected


def test_dsn_matches_the_settings_default() -> None:
    assert embedded_db.DSN == EMBEDDED_DATABASE_URL


def test_cache_dir_follows_xdg_and_ignores_relative_values(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert layout.cache_dir() == tmp_path / "memory-service"
    monkeypatch.setenv("XDG_CACHE_HOME", "relative/dir")
    assert layout.cache_dir() == Path.home() / ".cache" / "memory-service"
    monkeypatch.delenv("XDG_CACHE_HOME")
    assert layout.cache_dir() == Path.home() / ".cache" / "memory-service"


def test_postmaster_pid_parsing(tmp_path: Path) -> None:
    assert cluster.read_postmaster_pid(tmp_path) is None
    (tmp_path / "postmaster.pid").write_text("4242\n/var/lib/postgresql/data\n1\n55432\n", encoding="ascii")
    assert cluster.read_postmaster_pid(tmp_path) == 4242
    (tmp_path / "postmaster.pid").write_text("garbage\n", encoding="ascii")
    assert cluster.read_postmaster_pid(tmp_path) is None


def test_a_live_pid_that_is_not_a_chrooted_postgres_is_stale(tmp_path: Path) -> None:
    # After a machine restart the pid in postmaster.pid may belong to any process, e.g. this one.
    assert not cluster.is_our_postmaster(os.getpid(), tmp_path)
    assert not cluster.is_our_postmaster(2**22 + 12345, tmp_path)


def test_status_of_an_unbuilt_cache(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    status = embedded_db.database_status()
    assert not status.running
    assert status.pid is None
    assert not status.rootfs_ready
    assert status.rootfs == tmp_path / "memory-service" / "pg17-trixie"
    assert status.data_dir == status.rootfs / "var/lib/postgresql/data"
    assert main(["status"]) == 1
    out = capsys.readouterr().out
    assert "stopped" in out and "not built yet" in out and embedded_db.DSN in out


def test_up_and_down_refuse_clearly_without_root(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    monkeypatch.setattr(chroot_commands.os, "geteuid", lambda: 1000)
    with pytest.raises(EmbeddedDatabaseError, match="only root"):
        embedded_db.database_up()
    with pytest.raises(EmbeddedDatabaseError, match="only root"):
        embedded_db.database_down()
    assert main(["up"]) == 1
    assert "CB_DATABASE_URL" in capsys.readouterr().err
    assert not (tmp_path / "memory-service" / "pg17-trixie").exists()


def test_missing_debootstrap_names_the_package(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(rootfs, "which", lambda program: None)
    with pytest.raises(EmbeddedDatabaseError, match=r"Debian package `debootstrap`"):
        rootfs.ensure_rootfs(layout.Layout(tmp_path))
    assert list(tmp_path.iterdir()) == []


def test_an_incomplete_rootfs_is_not_used(tmp_path: Path) -> None:
    (tmp_path / "pg17-trixie" / "usr").mkdir(parents=True)
    with pytest.raises(EmbeddedDatabaseError, match="incomplete"):
        rootfs.ensure_rootfs(layout.Layout(tmp_path))


def test_main_rejects_unknown_commands(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["sideways"]) == 1
    assert "invalid choice" in capsys.readouterr().err

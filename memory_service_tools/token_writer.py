"""Writing the tokens file: `add_token`, what ``cb token create`` calls (services only read the file).

The file (format: `common.auth.tokens_file`) is replaced atomically, so a running service never reads
half of it and picks the new token up within a second; an existing file keeps its mode and comments;
concurrent writers are serialised with a lock on the file's folder.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import fcntl
import os
import tempfile
from collections.abc import Iterator
from collections.abc import Mapping
from collections.abc import Sequence
from pathlib import Path

import yaml

from common.auth.principals import Right
from common.auth.tokens_file import TokenEntry
from common.auth.tokens_file import TokensFile
from common.auth.tokens_file import TokensFileError
from common.auth.tokens_file import hash_token
from common.auth.tokens_file import new_token
from common.auth.tokens_file import parse_tokens_text
from common.auth.tokens_file import validate_token_entry

__all__ = ["add_token"]

_FILE_HEADER = (
    "# memory-service tokens: sha256 hashes of bearer tokens, never the tokens themselves.\n"
    "# Edited by `cb token create`; changes are picked up by running services within a second.\n"
)


@contextlib.contextmanager
def _file_lock(path: Path) -> Iterator[None]:
    """Exclusive lock on the file's folder (flock on a directory: no lock file left behind)."""
    fd = os.open(path.parent, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def _write_atomically(path: Path, text: str, mode: int) -> None:
    fd, temporary = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        os.fchmod(fd, mode)
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temporary, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        raise


def add_token(
    path: Path | str,
    *,
    principal: str,
    namespaces: Mapping[str, Sequence[Right]],
    scopes: Sequence[str] = (),
    pii_clearance: bool = False,
    note: str | None = None,
    memory_scope: tuple[str, str, str] | None = None,
) -> tuple[str, TokenEntry]:
    """Creates a token and appends its hash to the tokens file (created with mode 0600 if missing).

    The file is replaced atomically (a running service never reads half of it); an existing file
    keeps its mode and its comments (the entry is appended as text; only when that text would not
    parse as intended is the whole file re-rendered). Concurrent callers are serialised with a lock
    on its folder.

    Args:
        path: the tokens file.
        principal: name of the caller the token stands for.
        namespaces: namespace (or ``"*"``) -> rights.
        scopes: allowed visibility scopes (``workspace:x``, ``principal:y``).
        pii_clearance: may receive personal data unmasked.
        note: free text kept in the file.
        memory_scope: ``(organization, environment, user)`` of the token's memory records;
            pass a grant on ``org:<organization>:env:<environment>`` in ``namespaces`` for its rights.

    Returns:
        ``(token, entry)``: the token (shown once, never stored) and the entry written.

    Raises:
        TokensFileError: the existing file is invalid (it is left untouched), or the entry is invalid.
    """
    target = Path(path)
    token = new_token()
    raw = {
        "sha256": hash_token(token),
        "principal": principal,
        "namespaces": {ns: [r.label for r in sorted(set(rights))] for ns, rights in namespaces.items()},
        "scopes": list(scopes),
        "pii_clearance": pii_clearance,
        "created": dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
    }
    if memory_scope is not None:
        raw["organization"], raw["environment"], raw["user"] = memory_scope
    if note:
        raw["note"] = note
    entry = validate_token_entry(raw, target)
    entry_dict = entry.model_dump(exclude_none=True)
    target.parent.mkdir(parents=True, exist_ok=True)
    with _file_lock(target):
        if target.exists():
            old_text = target.read_text(encoding="utf-8")
            old = parse_tokens_text(old_text, target)
            mode = os.stat(target).st_mode & 0o777
        else:
            old_text, old, mode = "", TokensFile(), 0o600
        block = yaml.safe_dump([entry_dict], sort_keys=False, allow_unicode=True, default_flow_style=False)
        indented = "".join("  " + line for line in block.splitlines(keepends=True))
        if old_text.strip():
            new_text = old_text if old_text.endswith("\n") else old_text + "\n"
            if not old.tokens and "tokens" not in (yaml.safe_load(old_text) or {}):
                new_text += "tokens:\n"
            new_text += indented
        else:
            new_text = _FILE_HEADER + "tokens:\n" + indented
        expected = [*old.tokens, entry]
        try:
            appended_ok = parse_tokens_text(new_text, target).tokens == expected
        except TokensFileError:
            appended_ok = False
        if not appended_ok:  # e.g. `tokens: []` in flow style: render the whole document
            document = {"tokens": [t.model_dump(exclude_none=True) for t in expected]}
            new_text = _FILE_HEADER + yaml.safe_dump(
                document, sort_keys=False, allow_unicode=True, default_flow_style=False
            )
        _write_atomically(target, new_text, mode)
    return token, entry

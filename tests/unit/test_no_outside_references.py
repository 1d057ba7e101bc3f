"""No tracked text names something a reader of the repository cannot open: tracker or work-log numbers,
the design notes the project was started from, or their sections. A comment says why and points at a
docs page, a paper or a spec instead (docs/explanation/knowledge-model.md, for example)."""

import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

# "issue 12", "Issues 3", "session 7", "seed 000", "the seed's", "DESIGN §3", "DESIGN.md". Random seeds
# of benchmarks and tests ("random.seed", "--seed", "same seed", a ``seed`` variable) are not matched.
OUTSIDE_REFERENCE = re.compile(
    r"\b[Ii]ssues? #?\d+"
    r"|\b[Ss]essions? \d+"
    r"|\b[Ss]eeds? \d{3}\b"
    r"|\b[Tt]he seeds?(?:'s)?\b"
    r"|\bseed's\b"
    r"|\bDESIGN(?:\.md)?\s?(?:§|section\b)"
    r"|\bDESIGN\.md\b"
)

# Rewritten wholesale elsewhere; to be scanned once they land.
NOT_YET_SCANNED: set[str] = set()


def outside_references(root: Path = ROOT) -> list[str]:
    """Each tracked text file's lines that match, as ``path:line: text``."""
    names = (
        subprocess.run(["git", "ls-files", "-z"], cwd=root, capture_output=True, check=True)
        .stdout.decode()
        .split("\0")
    )
    found = []
    for name in names:
        if not name or name in NOT_YET_SCANNED or name == "tests/unit/test_no_outside_references.py":
            continue
        path = root / name
        try:
            text = path.read_text(encoding="utf-8")
        except (UnicodeDecodeError, IsADirectoryError, FileNotFoundError):
            continue  # binary files, submodules, files deleted in the working tree
        lines = text.splitlines()
        for number, line in enumerate(lines, 1):
            if OUTSIDE_REFERENCE.search(line) or OUTSIDE_REFERENCE.search(joined_with_next(line, lines, number)):
                found.append(f"{name}:{number}: {line.strip()[:120]}")
    return found


def joined_with_next(line: str, lines: list[str], number: int) -> str:
    """The line's last word followed by the next line's text without its comment or docstring lead, so a
    reference wrapped across a line break ("...; seed" / "000: asserted") is matched as well."""
    if number >= len(lines) or not line.split():
        return ""
    following = LINE_LEAD.sub("", lines[number])
    return f"{line.split()[-1]} {following}"


# What opens a wrapped line of a comment or a docstring: indentation, ``#``, ``*``, ``//``, ``--``.
LINE_LEAD = re.compile(r"^\s*(?:#+|\*|//|--)?\s*")


def test_the_pattern_matches_what_it_is_for() -> None:
    for text in [
        "see issue 12 §3",
        "(Issue 4)",
        "session 22 found",
        'seed 000 "Наблюдения"',
        "the seed's own label",
        "DESIGN §8",
        "DESIGN.md section 5",
    ]:
        assert OUTSIDE_REFERENCE.search(text), text
    for text in [
        "random.seed(7)",
        "--seed 3",
        "same seed",
        "def client(seed: int)",
        "the issues it solves",
        "a session token",
        "DESIGNER",
    ]:
        assert not OUTSIDE_REFERENCE.search(text), text


def test_a_reference_wrapped_across_a_line_break_is_found() -> None:
    lines = ["    # weighed by evidence (seed", "    # 000: asserted 3)", "a session", "token"]
    assert joined_with_next(lines[0], lines, 1) == "(seed 000: asserted 3)"
    assert OUTSIDE_REFERENCE.search(joined_with_next(lines[0], lines, 1))
    assert not OUTSIDE_REFERENCE.search(joined_with_next(lines[2], lines, 3))
    assert joined_with_next(lines[3], lines, 4) == ""


def test_no_tracked_file_points_outside_the_repository() -> None:
    found = outside_references()
    assert not found, "references to things outside the repository:\n" + "\n".join(found)


def test_no_cli_help_points_outside_the_repository() -> None:
    """The help of ``cb`` and of every command names nothing outside the repository, and does not use
    the word for the notes the project was started from, even alone ("the built-in seed kinds")."""
    from tests.unit.test_cli_polish import every_help

    helps = every_help()
    assert len(helps) > 30, "every command's help was read"
    alone = re.compile(r"\bseeds?\b", re.IGNORECASE)
    found = [
        f"{path}: {line.strip()}"
        for path, (text, _) in helps.items()
        for line in text.splitlines()
        if OUTSIDE_REFERENCE.search(line) or alone.search(line)
    ]
    assert not found, found

"""Detection and masking of personal data (docs/how-to/personal-data.md; docs/how-to/tokens-and-scopes.md).

Categories the detector finds (`DETECTABLE`), in Russian and international formats:

* ``phone`` — found by libphonenumber (`phonenumbers.PhoneNumberMatcher`, default region RU, leniency
  VALID: the number must be a valid number of its country). Because a bare run of digits is also a hash,
  a CRC or an id, a match is kept only when it is written like a phone: with ``+`` (``+7 916 123-45-67``,
  ``+44 20 7946 0958``), with an area code in parentheses (``8 (495) 123-45-67``), as 11 digits with the
  Russian trunk prefix (``89161234567``), grouped with a first group of at least 3 digits
  (``916 123 45 67``), or after a context word (``тел.``, ``phone``...).
* ``email`` — ``local@domain.tld`` with a letter-only top-level domain (Cyrillic allowed: ``.рф``).
* ``card`` — 13-19 digits, contiguous or in groups of 4 (Amex 4-6-5), whose issuer prefix is a card
  network's (Mir 2200-2204, Mastercard 2221-2720 and 51-55, Visa 4, Amex 34/37, Diners 30/36/38, JCB 35,
  Maestro/UnionPay/Discover 50, 56-69) and whose Luhn check digit is right (ISO/IEC 7812-1 Annex B,
  `stdnum.luhn`).
* ``inn`` — Russian taxpayer number (ИНН) with valid check digits (Order of the Federal Tax Service
  No. ММВ-7-6/435@ of 29.06.2012, `stdnum.ru.inn`): 12 digits (individuals) anywhere; 10 digits
  (organisations) only after a context word (``ИНН``, ``INN``, ``TIN``, ``taxpayer``...), because one in
  ten random 10-digit numbers (Unix timestamps, ids) passes that single check digit.
* ``snils`` — Russian insurance number (СНИЛС) with a valid checksum (`snils_is_valid`; Pension Fund of
  Russia, Resolution No. 318p of 27.12.1999), written ``XXX-XXX-XXX YY`` (dashes or spaces),
  ``XXXXXXXXX YY`` or as 11 bare digits (``20451873645``), anywhere: about one in a hundred
  random 11-digit numbers passes the checksum and is masked too, the price of never showing an
  unseparated SNILS.
* ``passport_rf`` — Russian internal passport, series (4 digits) and number (6 digits): ``45 10 123456``
  anywhere; ``4510 123456``, ``4510123456`` and ``серия 4510 № 123456`` only after a context word
  (``паспорт``, ``passport``, ``серия``, ``series``). Passports have no check digit.

Names (``fio``) and addresses (``address``) are not detected: writers mark them explicitly.

What is deliberately not matched (tested in ``tests/unit/test_pii.py``): version strings
(``2.36-9+deb12u4``), dates and instants, prices, order numbers and issue keys (``ORD-2024-000123``,
``PROJ-1234``), hashes (sha256/sha1 hex, git short hashes, UUIDs) and IP addresses: every digit pattern
requires that the run is not glued to letters, dots, dashes or other digits.

Masking replaces each match with its category placeholder, e.g. ``[phone]`` (`placeholder`), never
with a partial value: a kept tail (``***-45-67``) still identifies a person together with other data, and
a fixed placeholder keeps masked text stable and idempotent (masking masked text changes nothing).

Pure functions, no I/O; safe to call from any thread.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterable
from collections.abc import Mapping
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import phonenumbers
from stdnum import luhn
from stdnum.ru import inn as ru_inn

from common.kernel.field_checks import Violations

PHONE = "phone"
EMAIL = "email"
PASSPORT_RF = "passport_rf"
SNILS = "snils"
CARD = "card"
INN = "inn"
DETECTABLE: frozenset[str] = frozenset({PHONE, EMAIL, PASSPORT_RF, SNILS, CARD, INN})
"""Categories found by the detector; any other category (``fio``, ``address``) is marked explicitly."""

# When two matches overlap, the one with the lower priority number wins (then the longer, then the earlier).
_PRIORITY = {EMAIL: 0, CARD: 1, SNILS: 2, PASSPORT_RF: 3, INN: 4, PHONE: 5}
# How far before a match a context word is looked for, in characters.
_CONTEXT_WINDOW = 40
# Digit runs must not be glued to word characters, dots, commas, slashes, colons, pluses or dashes
# (versions, decimals, paths, ranges, keys like PROJ-1234); a following "/" is fine (ИНН/КПП pairs).
_BEFORE = r"(?<![\w.,/:+\-])"
_AFTER = r"(?![\w\-]|[.,:]\d)"

_EMAIL = re.compile(
    r"(?<![\w.%+\-])[\w](?:[\w.%+\-]{0,62}[\w])?@(?:[^\W_](?:[\w\-]{0,61}[^\W_])?\.)+[^\W\d_]{2,24}(?![\w\-]|\.[^\W_])"
)
_CARD = re.compile(
    _BEFORE + r"(?:\d{13,19}|\d{4}([ \-])\d{4}\1\d{4}\1\d{1,7}|\d{4}([ \-])\d{6}\2\d{5})" + _AFTER
)
_SNILS_FORMATTED = re.compile(_BEFORE + r"\d{3}[\- ]\d{3}[\- ]\d{3}[ \-]\d{2}" + _AFTER)
# A SNILS may also stand inside a natural key or a path (``snils:20451873645``, ``doc:pii-20451873645``,
# ``/home/u/20451873645.md``): its run may follow ``:``, ``/`` or ``-``; its checksum keeps ids apart.
_SNILS_BEFORE = r"(?<![\w.,+])"
_SNILS_UNSEPARATED = re.compile(_SNILS_BEFORE + r"\d{9}[ \-]?\d{2}" + _AFTER)
_INN = re.compile(_BEFORE + r"(?:\d{12}|\d{10})" + _AFTER)
_PASSPORT_SPACED = re.compile(_BEFORE + r"\d{2} \d{2} \d{6}" + _AFTER)
_PASSPORT_CONTEXT = re.compile(
    _BEFORE + r"\d{2} ?\d{2}(?:\s*(?:№|No\.?|N|номер|number)?\s*)\d{6}" + _AFTER, re.IGNORECASE
)

_INN_WORDS = ("инн", "inn", "tin", "taxpayer", "налогоплательщик", "tax id", "tax number")
_PASSPORT_WORDS = ("паспорт", "passport", "серия", "series")
_PHONE_WORDS = (
    "тел",
    "моб",
    "сотов",
    "звон",
    "позвон",
    "факс",
    "whatsapp",
    "telegram",
    "viber",
    "phone",
    "tel",
    "mobile",
    "cell",
    "call",
    "fax",
    "contact",
    "контакт",
)
# Separators allowed inside a grouped phone number written without "+" or parentheses.
_PHONE_GROUPS = re.compile(r"^\d{3,}[ \-\u00a0]\d")


@dataclass(frozen=True)
class PiiMatch:
    """One piece of personal data: ``text[start:end]`` is of ``category``."""

    category: str
    start: int
    end: int
    value: str


def placeholder(category: str) -> str:
    """What a match of ``category`` becomes in masked output: ``[phone]``, ``[email]``, ..."""
    return f"[{category}]"


def snils_is_valid(number: str) -> bool:
    """True when the 11 digits of ``number`` (separators ignored) form a SNILS with a valid checksum.

    Rule (Pension Fund of Russia, Resolution No. 318p of 27.12.1999): the sum of the first nine digits
    times 9, 8, ..., 1; below 100 it is the check number, 100 and 101 give 00, above 101 the sum modulo
    101 (where 100 again gives 00). Numbers up to 001-001-998 have no checksum and are not accepted.
    """
    digits = re.sub(r"\D", "", number)
    if len(digits) != 11 or int(digits[:9]) <= 1001998:
        return False
    total = sum(int(d) * w for d, w in zip(digits[:9], range(9, 0, -1)))
    if total > 101:
        total %= 101
    check = 0 if total in (100, 101) else total
    return check == int(digits[9:])


def card_prefix_is_issued(digits: str) -> bool:
    """True when ``digits`` start with an issuer prefix of a card network (see the module doc)."""
    two, four = int(digits[:2]), int(digits[:4])
    return (
        2200 <= four <= 2204
        or 2221 <= four <= 2720
        or digits[0] == "4"
        or two in (30, 34, 35, 36, 37, 38, 50)
        or 51 <= two <= 69
    )


def _context_before(text: str, start: int, words: Iterable[str]) -> bool:
    window = text[max(0, start - _CONTEXT_WINDOW) : start].lower()
    return any(word in window for word in words)


def _digits(value: str) -> str:
    return re.sub(r"\D", "", value)


def _emails(text: str) -> Iterable[PiiMatch]:
    for m in _EMAIL.finditer(text):
        yield PiiMatch(EMAIL, m.start(), m.end(), m.group(0))


def _cards(text: str) -> Iterable[PiiMatch]:
    for m in _CARD.finditer(text):
        digits = _digits(m.group(0))
        if 13 <= len(digits) <= 19 and card_prefix_is_issued(digits) and luhn.is_valid(digits):
            yield PiiMatch(CARD, m.start(), m.end(), m.group(0))


def _snils(text: str) -> Iterable[PiiMatch]:
    for m in _SNILS_FORMATTED.finditer(text):
        if snils_is_valid(m.group(0)):
            yield PiiMatch(SNILS, m.start(), m.end(), m.group(0))
    for m in _SNILS_UNSEPARATED.finditer(text):
        if snils_is_valid(m.group(0)):
            yield PiiMatch(SNILS, m.start(), m.end(), m.group(0))


def _inns(text: str) -> Iterable[PiiMatch]:
    for m in _INN.finditer(text):
        value = m.group(0)
        if not ru_inn.is_valid(value):
            continue
        if len(value) == 12 or _context_before(text, m.start(), _INN_WORDS):
            yield PiiMatch(INN, m.start(), m.end(), value)


def _passports(text: str) -> Iterable[PiiMatch]:
    for m in _PASSPORT_SPACED.finditer(text):
        yield PiiMatch(PASSPORT_RF, m.start(), m.end(), m.group(0))
    for m in _PASSPORT_CONTEXT.finditer(text):
        if _context_before(text, m.start(), _PASSPORT_WORDS):
            yield PiiMatch(PASSPORT_RF, m.start(), m.end(), m.group(0))


def _phone_written_like_one(text: str, raw: str, start: int) -> bool:
    if raw.startswith("+") or ("(" in raw and ")" in raw):
        return True
    digits = _digits(raw)
    if len(digits) == 11 and digits[0] in "78":
        return True
    if _PHONE_GROUPS.match(raw):
        return True
    return _context_before(text, start, _PHONE_WORDS)


# A region that may hold a phone number: digits with the separators numbers are written with.
_PHONE_CANDIDATE = re.compile(r"\+?\(?\d[\d\s().\-\u00a0]{5,24}\d")


def _phones(text: str) -> Iterable[PiiMatch]:
    # libphonenumber scans ~3 MB/s; running it only on windows around digit runs keeps long texts cheap.
    windows: list[list[int]] = []
    for m in _PHONE_CANDIDATE.finditer(text):
        start, end = max(0, m.start() - 2), min(len(text), m.end() + 2)
        if windows and start <= windows[-1][1]:
            windows[-1][1] = max(windows[-1][1], end)
        else:
            windows.append([start, end])
    for start, end in windows:
        for found in phonenumbers.PhoneNumberMatcher(
            text[start:end], "RU", leniency=phonenumbers.Leniency.VALID, max_tries=1_000_000
        ):
            begin = start + found.start
            if begin > 0 and (text[begin - 1].isalnum() or text[begin - 1] in "_-./:"):
                continue
            if _phone_written_like_one(text, found.raw_string, begin):
                yield PiiMatch(PHONE, begin, start + found.end, found.raw_string)


_DETECTORS = (_emails, _cards, _snils, _passports, _inns, _phones)


def _without_invisible(text: str) -> tuple[str, list[int]]:
    """``text`` without its invisible format characters (Unicode category Cf: zero-width space U+200B,
    zero-width (non-)joiner, word joiner U+2060, soft hyphen U+00AD, BOM U+FEFF, bidi marks...), and for
    each kept character its index in ``text``.

    Such characters render as nothing, so ``204\u200b518 736 45`` reads as a SNILS to a person; the
    detectors run on the visible text and a match is mapped back onto the original span.
    """
    kept: list[str] = []
    positions: list[int] = []
    for index, character in enumerate(text):
        if unicodedata.category(character) != "Cf":
            kept.append(character)
            positions.append(index)
    return "".join(kept), positions


def find(text: str) -> list[PiiMatch]:
    """Every piece of personal data in ``text``, non-overlapping, in text order.

    Overlaps are resolved by category priority (email, card, snils, passport_rf, inn, phone), then length.
    Invisible format characters inside a value do not hide it (`_without_invisible`): the match covers
    the original span including them, so masking removes them too.
    """
    if not text or not any(ch.isdigit() or ch == "@" for ch in text):
        return []
    visible, positions = _without_invisible(text)
    if len(visible) != len(text):
        return [
            PiiMatch(
                m.category,
                positions[m.start],
                positions[m.end - 1] + 1,
                text[positions[m.start] : positions[m.end - 1] + 1],
            )
            for m in find(visible)
        ]
    found = [match for detector in _DETECTORS for match in detector(text)]
    found.sort(key=lambda m: (_PRIORITY[m.category], -(m.end - m.start), m.start))
    kept: list[PiiMatch] = []
    for match in found:
        if all(match.end <= other.start or match.start >= other.end for other in kept):
            kept.append(match)
    return sorted(kept, key=lambda m: m.start)


def detect(text: str) -> list[str]:
    """The sorted categories of personal data found in ``text`` (e.g. ``["email", "phone"]``)."""
    return sorted({match.category for match in find(text)})


def mask(text: str) -> str:
    """``text`` with every match replaced by its category placeholder (``[phone]``); idempotent."""
    matches = find(text)
    if not matches:
        return text
    out: list[str] = []
    position = 0
    for match in matches:
        out.append(text[position : match.start])
        out.append(placeholder(match.category))
        position = match.end
    out.append(text[position:])
    return "".join(out)


def mask_value(value: Any) -> Any:
    """A copy of a JSON-like value (dict/list/tuple/str/scalars, e.g. a Struct's dict) with every string
    masked by `mask`, mapping keys included (a key can be an email: ``{"anna@example.org": 1}`` ->
    ``{"[email]": 1}``). Keys that mask to the same text stay apart with a counter
    (``[email]``, ``[email] #2``), so no value is lost. Other scalars are returned unchanged."""
    if isinstance(value, str):
        return mask(value)
    if isinstance(value, Mapping):
        masked: dict[Any, Any] = {}
        for key, item in value.items():
            name = mask(key) if isinstance(key, str) else key
            if name in masked:
                number = 2
                while f"{name} #{number}" in masked:
                    number += 1
                name = f"{name} #{number}"
            masked[name] = mask_value(item)
        return masked
    if isinstance(value, (list, tuple)):
        return [mask_value(item) for item in value]
    return value


def detect_value(value: Any) -> list[str]:
    """The sorted categories found in every string of a JSON-like value (see `mask_value`)."""
    found: set[str] = set()

    def walk(item: Any) -> None:
        if isinstance(item, str):
            found.update(detect(item))
        elif isinstance(item, Mapping):
            for key, nested in item.items():
                walk(key)
                walk(nested)
        elif isinstance(item, (list, tuple)):
            for nested in item:
                walk(nested)

    walk(value)
    return sorted(found)


# -- marks on write (docs/how-to/personal-data.md: a write marks the node pii: true and pii_categories) ---

PII_CATEGORY_PATTERN = re.compile(r"^[a-z][a-z0-9_]{0,31}$")
MAX_PII_CATEGORIES = 20
PII_PROP = "pii"
PII_CATEGORIES_PROP = "pii_categories"


def check_pii_categories(check: Violations, path: str, categories: Sequence[str]) -> None:
    """Adds to ``check`` (a `common.kernel.errors.ViolationCollector` or alike) a violation per malformed explicit category (lower-case names such as ``fio``, ``address``,
    ``phone``; at most `MAX_PII_CATEGORIES`). ``path`` is the request field (``pii_categories``)."""
    if len(categories) > MAX_PII_CATEGORIES:
        check.add(path, f"at most {MAX_PII_CATEGORIES} categories, got {len(categories)}")
        return
    for index, category in enumerate(categories):
        if not isinstance(category, str) or not PII_CATEGORY_PATTERN.match(category):
            check.add(f"{path}[{index}]", "must be a lower-case name such as email, phone, fio or address")


@dataclass(frozen=True)
class PiiMarks:
    """The ``pii`` / ``pii_categories`` properties of a written item (node, chunk meta).

    Attributes:
        pii: the item holds personal data.
        categories: the categories it holds: explicit marks of the request and, with protection on,
            the detected ones.
    """

    pii: bool = False
    categories: tuple[str, ...] = ()

    @classmethod
    def of(
        cls, *, pii: bool, categories: Iterable[str], values: Iterable[Any] = (), protection: bool
    ) -> PiiMarks:
        """The marks of a write.

        With ``protection`` (``CB_PII_PROTECTION``) the categories are the sorted union of the explicit
        ``categories`` and those detected in ``values`` (strings or JSON-like values), and ``pii`` is true
        when it was given or any category is known. Without it the explicit marks are kept as given
        (order and duplicates aside) and nothing is detected.
        """
        explicit = list(dict.fromkeys(categories))
        if not protection:
            return cls(pii=pii, categories=tuple(explicit))
        found = set(explicit)
        for value in values:
            found.update(detect_value(value))
        return cls(pii=pii or bool(found), categories=tuple(sorted(found)))

    @classmethod
    def from_props(cls, props: Mapping[str, Any] | None) -> PiiMarks:
        """The marks stored in node props or chunk meta (missing or malformed values count as none)."""
        props = props if isinstance(props, Mapping) else {}
        raw = props.get(PII_CATEGORIES_PROP)
        categories = tuple(c for c in raw if isinstance(c, str)) if isinstance(raw, (list, tuple)) else ()
        return cls(pii=props.get(PII_PROP) is True, categories=categories)

    @property
    def marked(self) -> bool:
        """True when there is anything to store (``pii`` or any category)."""
        return self.pii or bool(self.categories)

    @property
    def undetectable(self) -> tuple[str, ...]:
        """Categories the output patterns cannot find (``fio``, ``address``, ...); ``("pii",)`` for an
        item marked ``pii`` without any category. Non-empty means masking by patterns is not enough."""
        hidden = tuple(c for c in self.categories if c not in DETECTABLE)
        if not hidden and self.pii and not self.categories:
            return (PII_PROP,)
        return hidden

    def union(self, other: PiiMarks) -> PiiMarks:
        """Both marks together: ``pii`` of either, the sorted union of the categories."""
        return PiiMarks(
            pii=self.pii or other.pii, categories=tuple(sorted({*self.categories, *other.categories}))
        )

    def as_props(self) -> dict[str, Any]:
        """``{"pii": ..., "pii_categories": [...]}`` for node props and chunk meta."""
        return {PII_PROP: self.pii, PII_CATEGORIES_PROP: list(self.categories)}


__all__ = [
    "CARD",
    "DETECTABLE",
    "EMAIL",
    "INN",
    "MAX_PII_CATEGORIES",
    "PASSPORT_RF",
    "PHONE",
    "PII_CATEGORIES_PROP",
    "PII_CATEGORY_PATTERN",
    "PII_PROP",
    "SNILS",
    "PiiMarks",
    "PiiMatch",
    "card_prefix_is_issued",
    "check_pii_categories",
    "detect",
    "detect_value",
    "find",
    "mask",
    "mask_value",
    "placeholder",
    "snils_is_valid",
]

"""Finding personal data and secrets in text: what `nbagent.guards.pii` looks for.

Owns the detectors (`find_pii`), the redaction (`redact_pii`) and how a finding is described
without repeating it (`describe`). Imports nothing from nbagent: plain `re`.

Each kind is meant to be found in real prose with few false positives, so each has a check
beyond its shape:

| kind      | shape                                                   | check                          |
|-----------|---------------------------------------------------------|--------------------------------|
| `email`   | ``name@domain.tld``                                     |                                |
| `phone`   | ``+`` and 8-15 digits; ``(415) 555-0134`` or            | not after "order", "invoice",  |
|           | ``415-555-0134``; ``020 7946 0958`` (a leading 0)       | "ref", "#", "tracking", "id"   |
| `card`    | 13-19 digits, in groups of spaces or dashes             | an issuer's prefix, and Luhn   |
| `iban`    | 2 letters, 2 digits, 11-30 letters and digits           | the country's length, mod 97   |
| `api_key` | ``sk-``, ``sk-ant-``, ``ghp_`` (and GitHub's others),   | long enough to be a key        |
|           | ``AKIA`` / ``ASIA``, ``xox?-`` (Slack), ``AIza``, ...   |                                |

A bare run of digits is never a phone number (an order number is not one), and a card number
needs both a real issuer prefix and the Luhn checksum.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable
from typing import NamedTuple

__all__ = ["KINDS", "Found", "describe", "find_pii", "redact_pii"]

KINDS = ("email", "phone", "card", "iban", "api_key")
"""Every kind `find_pii` knows, in the order it looks."""

_LABEL = {"email": "email address", "phone": "phone number", "card": "card number", "iban": "IBAN",
          "api_key": "API key"}


class Found(NamedTuple):
    """One finding: its kind and where it is (``text[start:end]``)."""

    kind: str
    start: int
    end: int


_EMAIL = re.compile(r"(?<![\w.+%-])[A-Za-z0-9][A-Za-z0-9._%+-]*@[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?"
                    r"(?:\.[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?)*\.[A-Za-z]{2,24}\b")
_PHONES = (
    re.compile(r"(?<![\w+])\+\d{1,3}(?:[ .-]?\(?\d{1,5}\)?){1,6}(?![\w-])"),  # +44 20 7946 0958
    re.compile(r"(?<![\w(-])(?:\(\d{3}\) ?|\d{3}[ .-])\d{3}[ .-]\d{4}(?![\w-])"),  # (415) 555-0134
    re.compile(r"(?<![\w-])0\d{2,4}[ -]\d{3,4}[ -]?\d{3,4}(?![\w-])"),  # 020 7946 0958
)
_NOT_A_PHONE = re.compile(r"(?:order|invoice|ref|reference|ticket|tracking|account|acct|id|no\.|number|#)"
                          r"[\s:#.]*$", re.I)
"""What, just before a number, says it is not a phone number (``order 415-555-0134``)."""
_CARD = re.compile(r"(?<![\d-])\d(?:[ -]?\d){12,18}(?![\d-])")
_IBAN = re.compile(r"\b[A-Z]{2}\d{2}(?: ?[A-Z0-9]){11,30}\b")
_KEYS = re.compile(
    r"\b(?:sk-ant-[A-Za-z0-9_-]{20,}"  # Anthropic
    r"|sk-(?:proj-|svcacct-|admin-)?[A-Za-z0-9_-]{20,}"  # OpenAI
    r"|(?:sk|rk)_(?:live|test)_[A-Za-z0-9]{16,}"  # Stripe
    r"|gh[pousr]_[A-Za-z0-9]{30,}|github_pat_[A-Za-z0-9_]{22,}"  # GitHub
    r"|(?:AKIA|ASIA)[0-9A-Z]{16}"  # AWS access key id
    r"|xox[abposr]-[A-Za-z0-9-]{10,}"  # Slack
    r"|AIza[0-9A-Za-z_-]{35}"  # Google
    r"|hf_[A-Za-z0-9]{30,}|glpat-[A-Za-z0-9_-]{20,})"  # Hugging Face, GitLab
)
_IBAN_LENGTHS = {
    "AD": 24, "AT": 20, "BE": 16, "BG": 22, "CH": 21, "CY": 28, "CZ": 24, "DE": 22, "DK": 18, "EE": 20,
    "ES": 24, "FI": 18, "FR": 27, "GB": 22, "GR": 27, "HR": 21, "HU": 28, "IE": 22, "IS": 26, "IT": 27,
    "LI": 21, "LT": 20, "LU": 20, "LV": 21, "MC": 27, "MT": 31, "NL": 18, "NO": 15, "PL": 28, "PT": 25,
    "RO": 24, "SE": 24, "SI": 19, "SK": 24, "SM": 27, "TR": 26, "UA": 29, "AE": 23, "SA": 24, "IL": 23,
}
"""IBAN lengths of the countries most often met (others: 15-34 characters and the checksum)."""


def _luhn(digits: str) -> bool:
    total = 0
    for i, ch in enumerate(reversed(digits)):
        d = ord(ch) - 48
        if i % 2:
            d = d * 2 - 9 if d > 4 else d * 2
        total += d
    return total % 10 == 0


def _issuer(digits: str) -> bool:
    """Whether `digits` start like a card of a real issuer (Visa, Mastercard, Amex, Discover, JCB,
    Diners, UnionPay) and have a length it issues."""
    n, two, four = len(digits), int(digits[:2]), int(digits[:4])
    if digits[0] == "4":
        return n in (13, 16, 19)
    if 51 <= two <= 55 or 2221 <= four <= 2720:
        return n == 16
    if two in (34, 37):
        return n == 15
    if four == 6011 or two == 65 or 644 <= int(digits[:3]) <= 649 or 3528 <= four <= 3589 or two == 62:
        return 16 <= n <= 19
    return (300 <= int(digits[:3]) <= 305 or two in (36, 38, 39)) and 14 <= n <= 19


def _card(text: str) -> Iterable[Found]:
    for m in _CARD.finditer(text):
        digits = re.sub(r"[ -]", "", m.group())
        if 13 <= len(digits) <= 19 and _issuer(digits) and _luhn(digits):
            yield Found("card", m.start(), m.end())


def _iban_ok(compact: str) -> bool:
    expected = _IBAN_LENGTHS.get(compact[:2])
    if (expected is not None and len(compact) != expected) or not 15 <= len(compact) <= 34:
        return False
    moved = compact[4:] + compact[:4]
    number = "".join(str(int(ch, 36)) for ch in moved)
    return int(number) % 97 == 1


def _iban(text: str) -> Iterable[Found]:
    for m in _IBAN.finditer(text):
        raw = m.group()
        # The pattern may run on into the next word's letters and digits: try the longest prefix
        # that is a valid IBAN (printed IBANs end at a word boundary or a group of 1-4).
        compact = raw.replace(" ", "")
        for length in range(min(len(compact), 34), 14, -1):
            if _iban_ok(compact[:length]):
                end, kept = m.start(), 0
                while kept < length:  # map the compact length back onto the spaced text
                    if text[end] != " ":
                        kept += 1
                    end += 1
                yield Found("iban", m.start(), end)
                break


def _phone(text: str) -> Iterable[Found]:
    for pattern in _PHONES:
        for m in pattern.finditer(text):
            digits = sum(ch.isdigit() for ch in m.group())
            if not 7 <= digits <= 15 or (m.group()[0] == "+" and digits < 8):
                continue
            if _NOT_A_PHONE.search(text[max(0, m.start() - 24):m.start()]):
                continue
            yield Found("phone", m.start(), m.end())


def find_pii(text: str, kinds: Iterable[str] = KINDS) -> list[Found]:
    """The personal data and secrets in `text`, in order, overlaps removed (the first kind in
    `KINDS` order wins: a key is not also read as a phone number)."""
    wanted = set(kinds)
    found: list[Found] = []
    if "api_key" in wanted:
        found += [Found("api_key", m.start(), m.end()) for m in _KEYS.finditer(text)]
    if "email" in wanted and "@" in text:
        found += [Found("email", m.start(), m.end()) for m in _EMAIL.finditer(text)]
    if "iban" in wanted:
        found += _iban(text)
    if "card" in wanted:
        found += _card(text)
    if "phone" in wanted:
        found += _phone(text)
    kept: list[Found] = []
    for f in sorted(found, key=lambda f: (f.start, -f.end)):  # earlier first; at one start, the longer
        if not kept or f.start >= kept[-1].end:
            kept.append(f)
    return kept


def redact_pii(text: str, kinds: Iterable[str] = KINDS) -> tuple[str, Counter[str]]:
    """`text` with each finding replaced by ``[redacted <kind>]``, and how many of each kind."""
    found = find_pii(text, kinds)
    if not found:
        return text, Counter()
    out, at = [], 0
    for f in found:
        out += [text[at:f.start], f"[redacted {_LABEL[f.kind]}]"]
        at = f.end
    out.append(text[at:])
    return "".join(out), Counter(f.kind for f in found)


def describe(counts: Counter[str]) -> str:
    """What was found, never the values: ``2 email addresses, 1 card number``."""
    parts = []
    for kind in KINDS:
        n = counts.get(kind, 0)
        if n:
            label = _LABEL[kind]
            plural = label + ("es" if label.endswith("s") else "s")
            parts.append(f"{n} {label if n == 1 else plural}")
    return ", ".join(parts)

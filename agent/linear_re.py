r"""Regular expressions over text that a user, a model, a query or the data chooses.

They run on RE2, which takes time linear in the text whatever the pattern (at most the text's length
times the pattern's); Python's `re` backtracks, and a pattern like `\s*:?\s*x` takes cubic time on a
long run of spaces. RE2 has no backreferences and no lookaround: rewrite those, or check the
neighbouring characters in Python.

Patterns are written as for Python's `re`, with these differences. `\w`, `\d` and `\s` (and `\W`,
`\D`, `\S`) keep the Unicode meaning they have in Python (RE2's own are ASCII-only; RE2 knows a
newer Unicode, so a few thousand recent characters differ); `\b` has no such spelling and is
refused. Without `multiline`, `$` is the end of the text only (Python's also matches before a final
newline); `\z` is Python's `\Z`. A lone surrogate in the text (it has no UTF-8) is read, and
returned, as U+FFFD.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import re2

Match = Any  # google-re2 ships no type information
error = re2.error  # a pattern RE2 does not take

_OPTIONS = re2.Options()
_OPTIONS.log_errors = False  # RE2 would write a bad pattern, or a DFA out of memory, to stderr

_WORD = r"\p{L}\p{N}_"  # Python's \w: str.isalnum() or "_"
_DIGIT = r"\p{Nd}"  # Python's \d: str.isdecimal()
_SPACE = r"\t-\r\x1c-\x1f\x85\p{Z}"  # Python's \s: str.isspace()
_IN_CLASS = {"w": _WORD, "d": _DIGIT, "s": _SPACE}
_OUTSIDE_CLASS = {
    "w": f"[{_WORD}]",
    "W": f"[^{_WORD}]",
    "d": _DIGIT,
    "D": r"\P{Nd}",
    "s": f"[{_SPACE}]",
    "S": f"[^{_SPACE}]",
}
_HEX_DIGITS = {"u": 4, "U": 8}
_SURROGATES = dict.fromkeys(range(0xD800, 0xE000), 0xFFFD)


class Pattern:
    """An RE2 pattern with the methods of Python's. Match objects are RE2's: as Python's, except that
    `start`, `end` and `span` take group numbers only, and a group name is slow to look up."""

    def __init__(self, regexp: Any) -> None:
        self._regexp = regexp
        self.groupindex: dict[str, int] = regexp.groupindex

    def search(self, text: str | bytes, pos: int | None = None) -> Match | None:
        """The first match from `pos` (a byte offset in bytes, which are read as UTF-8)."""
        return self._regexp.search(text if isinstance(text, bytes) else _encodable(text), pos)

    def match(self, text: str) -> Match | None:
        return self._regexp.match(_encodable(text))

    def fullmatch(self, text: str) -> Match | None:
        return self._regexp.fullmatch(_encodable(text))

    def finditer(self, text: str) -> Iterator[Match]:
        return self._regexp.finditer(_encodable(text))

    def findall(self, text: str) -> list[Any]:
        return self._regexp.findall(_encodable(text))

    def sub(self, replacement: Any, text: str) -> str:
        return self._regexp.sub(replacement, _encodable(text))

    def split(self, text: str) -> list[str]:
        return self._regexp.split(_encodable(text))


def compile(pattern: str, *, ignore_case: bool = False, dot_all: bool = False, multiline: bool = False) -> Pattern:
    """`pattern`, written as for Python's `re`, on RE2 (`error` for one RE2 does not take)."""
    flags = "".join(flag for flag, wanted in (("i", ignore_case), ("s", dot_all), ("m", multiline)) if wanted)
    translated = python_classes(pattern)
    try:
        return Pattern(re2.compile(f"(?{flags}){translated}" if flags else translated, _OPTIONS))
    except re2.error as exc:
        reason = exc.args[0] if exc.args else exc
        raise error(reason.decode(errors="replace") if isinstance(reason, bytes) else str(reason)) from None


def utf8(text: str) -> bytes:
    """`text` as UTF-8 (a lone surrogate as U+FFFD), for searching from byte offsets: a search from an
    offset into a str encodes the whole str again."""
    return _encodable(text).encode()


def python_classes(pattern: str) -> str:
    """`pattern` with Python's Unicode `\\w`, `\\d` and `\\s` (and their negations) and `\\uXXXX`
    escapes spelled for RE2."""
    out: list[str] = []
    in_class = False
    index = 0
    while index < len(pattern):
        char = pattern[index]
        if char == "\\" and index + 1 < len(pattern):
            letter = pattern[index + 1]
            if letter in _HEX_DIGITS:
                digits = pattern[index + 2 : index + 2 + _HEX_DIGITS[letter]]
                out.append(f"\\x{{{digits}}}")
                index += 2 + len(digits)
                continue
            out.append(_escape_sequence(letter, in_class))
            index += 2
            continue
        out.append(char)
        index += 1
        if char == "[" and not in_class:
            in_class = True
            for literal_first in ("^", "]"):  # `[^` negates; a `]` right after `[` or `[^` is a member
                if pattern.startswith(literal_first, index):
                    out.append(literal_first if literal_first == "^" else r"\]")
                    index += 1
        elif char == "]" and in_class:
            in_class = False
    return "".join(out)


def _escape_sequence(letter: str, in_class: bool) -> str:
    if letter in "bB" and not in_class:
        raise error(r"\b has no Unicode spelling in RE2: match the neighbouring characters instead")
    if letter == "Z":
        return r"\z"
    if letter in "wWdDsS":
        classes = _IN_CLASS if in_class else _OUTSIDE_CLASS
        if letter not in classes:
            raise error(f"\\{letter} inside a character class has no RE2 spelling")
        return classes[letter]
    return "\\" + letter


def _encodable(text: str) -> str:
    if text.isascii():
        return text
    try:
        text.encode()
    except UnicodeEncodeError:
        return text.translate(_SURROGATES)
    return text

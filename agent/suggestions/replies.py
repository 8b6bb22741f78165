"""Lists in a model's free-text reply: a JSON array somewhere in it, or bulleted and numbered lines.

The reply is the model's to write, so these scan it with string methods, in linear time.
"""

from __future__ import annotations

import json

_BULLETS = ("-", "*", "•")


def json_strings(text: str) -> list[str]:
    """The strings of the JSON array from the first `[` to the last `]` of `text`, if it is one."""
    start, end = text.find("["), text.rfind("]")
    if start == -1 or end < start:
        return []
    try:
        parsed = json.loads(text[start : end + 1])
    except (ValueError, RecursionError):  # RecursionError: brackets nested deeper than the parser goes
        return []
    return [item for item in parsed if isinstance(item, str)] if isinstance(parsed, list) else []


def listed_items(text: str) -> list[str]:
    """The text of each bulleted ("- x", "* x", "• x") or numbered ("1. x", "2) x") line."""
    return [item for line in text.splitlines() if (item := _list_item(line))]


def _list_item(line: str) -> str | None:
    rest = line.lstrip()
    if rest[:1] in _BULLETS:
        after = rest[1:]
    else:
        digits = _leading_digits(rest)
        if not digits or rest[digits : digits + 1] not in (".", ")"):
            return None
        after = rest[digits + 1 :]
    if not after[:1].isspace():
        return None
    return after.strip() or None


def _leading_digits(text: str) -> int:
    return next((index for index, char in enumerate(text) if not char.isdecimal()), len(text))

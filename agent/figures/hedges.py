"""The words beside a figure that change what it claims: a hedge (`about`, `over`, `nearly`) and on
which side of the figure the value lies, or a word of decrease (`fell 5%`, `lost $500`), which lets a
negative cell give it (verify.py says how)."""

from __future__ import annotations

from typing import Literal

from agent import linear_re

Hedge = Literal["near", "over", "under"]

# A hedged figure is near the value; "over" and "under" also say on which side of the figure it lies.
_HEDGES: dict[str, Hedge] = {
    "about": "near", "around": "near", "approximately": "near", "approx.": "near", "roughly": "near",
    "some": "near", "close to": "near", "~": "near", "≈": "near",
    "over": "over", "more than": "over", "upwards of": "over", "at least": "over", "above": "over",
    "exceeding": "over", "just over": "over",
    "nearly": "under", "almost": "under", "less than": "under", "fewer than": "under", "under": "under",
    "at most": "under", "below": "under", "just under": "under",
}  # fmt: skip
# A figure next to one of these may stand for a negative value (`fell 5%`, `lost $500`, `12 minutes early`).
_DECREASES = frozenset((
    "fell", "fall", "falls", "falling", "dropped", "drop", "drops", "declined", "decline", "declines", "declining",
    "decreased", "decrease", "decreases", "lost", "lose", "loses", "loss", "losses", "negative", "down", "lower",
    "less", "fewer", "early", "earlier", "ahead", "below", "shrank", "shrunk", "minus", "reduced", "reduction",
    "deficit", "cut",
))  # fmt: skip
_WORD = linear_re.compile(r"[\p{L}\p{N}]+")


def hedge_before(before: str) -> Hedge | None:
    lowered = before.lower().rstrip()
    found = [
        (len(h), side)
        for h, side in _HEDGES.items()
        if lowered.endswith(h) and (len(lowered) == len(h) or not lowered[-len(h) - 1].isalpha())
    ]
    return max(found)[1] if found else None  # the longest: "just under", not "under"


def decrease_beside(answer: str, start: int, end: int) -> bool:
    """A word of decrease among the three words before the figure or the two after it."""
    before = _WORD.findall(answer[max(0, start - 40) : start].lower())[-3:]
    after = _WORD.findall(answer[end : end + 30].lower())[:2]
    return any(word in _DECREASES for word in (*before, *after))

"""Which rows a sentence names by one of their text cells (`EWR had 15.5% more flights than LGA`).

A sentence is read once into its words and runs of words; a label is then a set lookup, so the cost
is the sentence's length plus the labels', whatever the answer repeats. A label of 3 characters or
more names its row in any case (`ewr`, `EWR`); a shorter one only as written and as a whole word
(`OR`, `PA`, `B6`), or the words `in`, `or`, `ok` of any sentence would name the rows of such cells.
"""

from __future__ import annotations

from agent import linear_re

_WORD = linear_re.compile(r"[\p{L}\p{N}]+")
_MAX_LABEL_WORDS = 6  # a longer label (a long name or a sentence in a cell) names no row
MIN_FOLDED_LABEL = 3  # characters


class Sentence:
    """The words of one sentence: exactly as written, and every run of up to _MAX_LABEL_WORDS, lowercased."""

    def __init__(self, text: str) -> None:
        words = _WORD.findall(text)
        self._written = set(words)
        folded = [w.lower() for w in words]
        self._runs = {
            " ".join(folded[i : i + n]) for n in range(1, _MAX_LABEL_WORDS + 1) for i in range(len(folded) - n + 1)
        }

    def names(self, label: Label) -> bool:
        key, folded = label
        return key in (self._runs if folded else self._written)


Label = tuple[str, bool]  # what to look up, and whether among the lowercased runs of words


def label(text: str) -> Label:
    """A text cell as a sentence may name it."""
    text = text.strip()
    if len(text) < MIN_FOLDED_LABEL:
        return text, False
    return " ".join(_WORD.findall(text.lower())), True

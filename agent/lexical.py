"""Lexical search over small documents (tables, knowledge entries): words, not embeddings.

A person asks in business words ("refunds last quarter"); a warehouse names things in its own
(`fct_refund_txn`, "Refund transactions, one row per refund"). Both sides are cut into the same
terms: lower case, split at `_`, `.` and camelCase, common warehouse abbreviations spelled out,
plurals (an acronym's too: "VMs" is `vm`) and verb endings folded. A question's two adjacent words
also count as one where the index has that word ("high schoolers" finds `Highschooler`, "super
power" finds `superpower`), and a word finds the other words of its stem the index has, at half
weight ("published" finds `publisher`, "migrated" `migrations`). A code of a letter or two and digits
(`Q1`, `A11`) is also a term whole. A document may carry tags, terms no text spells (`~date` for a
table with a date column), which a search finds only where the caller says the text implies them; tags
and codes make no document longer. Documents are scored with BM25 over
weighted fields (a word in a table's name counts for more than one among its sampled values). A
document may count each term once, at its best field (`best_field=True`): a table of 300 columns
then scores by the columns that match, not by how often a word recurs among them, so a wide table no
longer outranks the narrow right one. An inverted index keeps a search over 5,000 tables to
milliseconds; no dependency, no server, and the same answer every time.
"""

from __future__ import annotations

import math
import re
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from itertools import pairwise

_WORD = re.compile(r"[^\W\d_]+|\d+")  # letters of any script (Zürich, Москва), or digits
_CAMEL = re.compile(r"(?<=[a-z])(?=[A-Z])")
_ACRONYMS = re.compile(r"[A-Z]{2,}s")
# A code of digits and a letter or two (`q1`, `A11`, `B365H`): cut, it is a letter and a digit, which say
# nothing. Not an ordinal or a decade (`3rd`, `1990s`), nor a word with a number (`blitz1`).
_CODE = re.compile(
    r"(?<![^\W_])(?!\d+(?:st|nd|rd|th|s)(?![^\W_]))(?=[^\W_]*[^\W\d_])"
    r"[^\W\d_]{0,2}(?:\d+[^\W\d_]{1,2})*\d+[^\W\d_]{0,2}(?![^\W_])"
)  # VMs, IPs, CPUs: the plural of what a schema writes `vm`, `ip`
# Abbreviations warehouses use in names, read as the word a person would ask with.
ABBREVIATIONS = {
    "acct": "account",
    "addr": "address",
    "amt": "amount",
    "avg": "average",
    "cnt": "count",
    "cust": "customer",
    "dept": "department",
    "dt": "date",
    "emp": "employee",
    "inv": "invoice",
    "msg": "message",
    "num": "number",
    "org": "organization",
    "pmt": "payment",
    "prod": "product",
    "qty": "quantity",
    "rev": "revenue",
    "sub": "subscription",
    "ts": "timestamp",
    "txn": "transaction",
    "usr": "user",
}
_STOPWORDS_TEXT = """a an and are as at be by did do does for from had has have how i in into is it its last many
much of on or our per show that the their them there these this those to us was we were what when which who
whose why will with would you your each every most top than"""
STOPWORDS = frozenset(_STOPWORDS_TEXT.split())
K1, B = 1.2, 0.75
DERIVED_WEIGHT = 0.5  # a derived form of the question's word counts half as much as the word itself


def stem(word: str) -> str:
    """A light, predictable folding of English endings, the same for every form of a word (customers,
    customer -> customer; prices, priced, price -> pric; shipped, shipping -> ship; statuses, status ->
    status; rulings, ruling -> rul)."""
    endings = (("ies", "y"), ("sses", "ss"), ("ings", ""), ("ing", ""), ("ed", ""), ("es", ""), ("s", ""))
    for suffix, replacement in endings:
        if word.endswith(suffix) and len(word) - len(suffix) >= 3 and not word.endswith(("ss", "us")):
            word = word[: len(word) - len(suffix)] + replacement
            break
    if len(word) > 3 and word[-1] == word[-2] and word[-1] not in "lsz":
        word = word[:-1]  # shipp -> ship
    return word[:-1] if len(word) > 3 and word.endswith("e") else word


@lru_cache(maxsize=65_536)
def terms(text: str) -> tuple[str, ...]:
    """The search terms of a text, in order, stopwords dropped (cached: warehouses repeat their comments)."""
    out = []
    for raw in _WORD.findall(_CAMEL.sub(" ", text)):
        word = (raw[:-1] if _ACRONYMS.fullmatch(raw) else raw).lower()
        word = ABBREVIATIONS.get(word, word)
        if word in STOPWORDS or len(word) < 2:
            continue
        out.append(stem(word))
    return tuple(out)


@lru_cache(maxsize=65_536)
def codes(text: str) -> tuple[str, ...]:
    """The codes a text writes (`Q1` -> `q1`), kept whole beside its terms: a document has them as tags,
    which make it no longer (a table of sixty `B365H`-like columns is no wider for them)."""
    return tuple(code.lower() for code in _CODE.findall(text))


def words_of(text: str) -> list[str]:
    """A text's words as written: split at `_`, `.`, camelCase and between letters and digits."""
    return _WORD.findall(_CAMEL.sub(" ", text))


def compounds(text: str) -> tuple[str, ...]:
    """Each two adjacent words of a text written as one, as a term: a person writes "high school" and
    "super power" where a schema has `highschool` and `superpower`."""
    words = [word.lower() for word in _WORD.findall(text) if not word.isdigit()]
    return tuple(stem(one + two) for one, two in pairwise(words))


# Endings that make another word of the same stem: the one who does it (publish -> publisher, create ->
# creator), the act (migrate -> migration, reserve -> reservation).
DERIVATIONS = ("er", "or", "ion", "ation")


def derived(term: str) -> tuple[str, ...]:
    """The terms of the same stem's other words, both ways: "published" (`publish`) finds `publisher`,
    "migrated" (`migrat`) `migration`, and "publishers" `publish`. Searched only where the index has them,
    at DERIVED_WEIGHT: the question's own word still counts for more."""
    out = [term + ending for ending in DERIVATIONS]
    if len(term) >= 3 and term[-1] not in "aeiouwxy" and term[-2] in "aeiou" and term[-3] not in "aeiou":
        out.append(term + term[-1] + "er")  # win -> winner, ship -> shipper
    out += [term[: -len(ending)] for ending in DERIVATIONS if term.endswith(ending) and len(term) - len(ending) >= 4]
    return tuple(out)


@dataclass(frozen=True)
class Hit:
    key: str
    score: float
    matched: frozenset[str] = frozenset()  # the query's terms the document has


# A field: its text and weight; a tuple of terms instead of a text is taken as it is (a tag no text
# spells, such as `~date` for a table with a date column).
Field = tuple[str | tuple[str, ...], float]


class LexicalIndex:
    """BM25 over documents made of weighted fields: `[(text, weight), ...]` per key; `best_field`: a
    term counts once per document, at the weight of its best field (and `b` is then how much a long
    document is discounted)."""

    def __init__(
        self,
        documents: Iterable[tuple[str, Sequence[Field]]],
        *,
        best_field: bool = False,
        b: float = B,
    ) -> None:
        self._postings: dict[str, list[tuple[int, float]]] = defaultdict(list)
        self._keys: list[str] = []
        self._b = b
        lengths: list[float] = []
        for key, fields in documents:
            weights: dict[str, float] = defaultdict(float)
            tags: dict[str, float] = {}
            for text, weight in fields:
                if not isinstance(text, str):
                    for tag in text:
                        tags[tag] = max(weight, tags.get(tag, 0.0))
                    continue
                for term in terms(text):
                    weights[term] = max(weights[term], weight) if best_field else weights[term] + weight
                for code in codes(text):
                    tags[code] = max(weight, tags.get(code, 0.0))
            doc = len(self._keys)
            self._keys.append(key)
            lengths.append(sum(weights.values()))  # a tag is no text: it makes no document longer
            weights.update(tags)
            for term, weight in weights.items():
                self._postings[term].append((doc, weight))
        self._lengths = lengths
        self._average = (sum(lengths) / len(lengths)) if lengths else 1.0

    def __len__(self) -> int:
        return len(self._keys)

    def has(self, term: str) -> bool:
        return term in self._postings

    def idf(self, term: str) -> float:
        """How rare a term is among the documents (0 for a term none has)."""
        postings = self._postings.get(term)
        if not postings:
            return 0.0
        return math.log(1 + (len(self._keys) - len(postings) + 0.5) / (len(postings) + 0.5))

    def search(self, text: str, limit: int = 10, implied: Mapping[str, float] | None = None) -> list[Hit]:
        """The best `limit` documents for the text, best first (ties by key, so results are stable);
        `implied`: terms the text means without writing them (`date` for "in 2010"), with their weights."""
        scores: dict[int, float] = defaultdict(float)
        matched: dict[int, set[str]] = defaultdict(set)
        query = dict.fromkeys(terms(text), 1.0) | {term: 1.0 for term in compounds(text) if term in self._postings}
        query |= dict.fromkeys(codes(text), 1.0)
        for term in list(query):
            for form in derived(term):
                if form in self._postings and form not in query:
                    query[form] = DERIVED_WEIGHT
        for term, factor in (implied or {}).items():
            query.setdefault(term, factor)
        for term, factor in query.items():
            idf = factor * self.idf(term)
            for doc, tf in self._postings.get(term, ()):
                norm = K1 * (1 - self._b + self._b * self._lengths[doc] / self._average)
                scores[doc] += idf * tf * (K1 + 1) / (tf + norm)
                matched[doc].add(term)
        ranked = sorted(scores.items(), key=lambda item: (-item[1], self._keys[item[0]]))
        return [Hit(self._keys[doc], round(score, 6), frozenset(matched[doc])) for doc, score in ranked[:limit]]

"""Families of split tables: one table's data spread over many names, shown and found as one.

Warehouses split a table by date, version or shard (`events_20180915`, `ga_sessions_2017*`,
`storms_1950`) or keep copies beside it (`shadow_instances`, `orders_backup`). Their documents are
near-identical, so a search returns ten of them in a row and the catalogue spends a line on each;
and "September 15, 2018" never matches `20180915`. A family is the tables of one database whose names
differ only in their digits (and whose columns are nearly the same), or that have the same columns
and names that are one name with a word before or after it. It is found and listed once, with its
range; which member stands for it depends on the question: the one whose date the question names,
else the newest (a copy: the original).
"""

from __future__ import annotations

import calendar
import re
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass

from agent.schema.tables import Table

_DIGITS = re.compile(r"\d+")
_MONTHS = "|".join(calendar.month_name[1:] + calendar.month_abbr[1:])
_DATES = (
    re.compile(r"\b((?:19|20)\d\d)[-/.](\d{1,2})(?:[-/.](\d{1,2}))?\b"),  # 2018-09-15, 2018/9
    re.compile(rf"\b({_MONTHS})\.?\s+(\d{{1,2}})(?:st|nd|rd|th)?,?\s+((?:19|20)\d\d)\b", re.IGNORECASE),
    re.compile(rf"\b(\d{{1,2}})(?:st|nd|rd|th)?\s+({_MONTHS})\.?,?\s+((?:19|20)\d\d)\b", re.IGNORECASE),
    re.compile(rf"\b({_MONTHS})\.?,?\s+((?:19|20)\d\d)\b", re.IGNORECASE),
    re.compile(r"\b((?:19|20)\d\d)\b"),
)
SIMILAR_COLUMNS = 0.8  # a dated family's members may gain or lose a few columns over the years


@dataclass(frozen=True)
class Family:
    members: tuple[str, ...]  # qualified names, in name order
    dated: bool  # the members differ in their digits (a date, a version, a shard)

    def describe(self, shown: str) -> str:
        others = [m.split(".", 1)[1] for m in self.members if m != shown]
        if self.dated:
            first, last = self.members[0].split(".", 1)[1], self.members[-1].split(".", 1)[1]
            return f"one of {len(self.members)} tables split by date or number, {first} … {last}"
        return f"{len(others)} more with the same columns: {', '.join(others[:5])}" + (", …" if len(others) > 5 else "")


class Families:
    """The families among some tables; every other table is its own."""

    def __init__(self, tables: Sequence[Table]) -> None:
        self._of: dict[str, Family] = {}
        ordered = sorted(tables, key=lambda t: t.qualified)  # the same families whatever the tables' order
        for family in _dated(ordered) + sorted(_copies(ordered), key=lambda f: f.members):
            for member in family.members:
                self._of.setdefault(member, family)
        chosen = {family: self._chosen(family, ()) for family in set(self._of.values())}  # asked per table, kept
        self._plain = {member: chosen[family] for member, family in self._of.items()}

    def of(self, qualified: str) -> Family | None:
        return self._of.get(qualified)

    def representative(self, qualified: str, dates: Sequence[str] = ()) -> str:
        """The member that stands for the table's family: the one a date of the question names
        (`question_dates`), else the newest (dated families), or the original (copies)."""
        if not dates:
            return self._plain.get(qualified, qualified)
        family = self._of.get(qualified)
        return qualified if family is None else self._chosen(family, dates)

    @staticmethod
    def _chosen(family: Family, dates: Sequence[str]) -> str:
        if not family.dated:
            return min(family.members, key=lambda m: (len(m), m))
        return max(family.members, key=lambda m: (_date_match(_stamp(m), dates), _stamp(m), m))

    def hidden(self, qualified: str) -> bool:
        """Whether a catalogue leaves this table out for its family's newest (or original) member."""
        return self.representative(qualified) != qualified


def _stamp(qualified: str) -> str:
    digits = _DIGITS.findall(qualified.split(".", 1)[1])
    return digits[-1] if digits else ""


def _pattern(name: str) -> str:
    return _DIGITS.sub("#", name)


def _columns(table: Table) -> frozenset[str]:
    return frozenset(c.name.lower() for c in table.columns)


def _dated(tables: Sequence[Table]) -> list[Family]:
    groups: dict[tuple[str, str], list[Table]] = defaultdict(list)
    for table in tables:
        if _DIGITS.search(table.name):
            groups[(table.database, _pattern(table.name))].append(table)
    families = []
    for group in groups.values():
        if len(group) < 2:
            continue
        base = _columns(max(group, key=lambda t: (_stamp(t.qualified), t.name)))  # the newest's columns
        similar = [t for t in group if _jaccard(_columns(t), base) >= SIMILAR_COLUMNS]
        if len(similar) >= 2:
            families.append(Family(tuple(sorted(t.qualified for t in similar)), dated=True))
    return families


def _copies(tables: Sequence[Table]) -> list[Family]:
    groups: dict[tuple[str, frozenset[str]], list[Table]] = defaultdict(list)
    for table in tables:
        if len(table.columns) >= 2:
            groups[(table.database, _columns(table))].append(table)
    families = []
    for group in groups.values():
        taken: set[str] = set()
        for original in sorted(group, key=lambda t: (len(t.name), t.name)):
            copies = [t for t in group if t.qualified not in taken and _copy_name(original.name, t.name)]
            if len(copies) >= 2 and original.qualified not in taken:
                families.append(Family(tuple(sorted(t.qualified for t in copies)), dated=False))
                taken.update(t.qualified for t in copies)
    return families


def _copy_name(original: str, other: str) -> bool:
    """Whether `other` is `original` with one word before or after it (`shadow_instances`, `orders_old`)."""
    original, other = original.lower(), other.lower()
    if other == original:
        return True
    if other.startswith(original):
        affix = other[len(original) :]
    elif other.endswith(original):
        affix = other[: -len(original)]
    else:
        return False
    return "_" not in affix.strip("_") and "." not in affix


def _jaccard(a: frozenset[str], b: frozenset[str]) -> float:
    return len(a & b) / len(a | b) if a or b else 1.0


def question_dates(question: str) -> list[str]:
    """The dates a question names, as digit prefixes (`20180915`, `201809`, `2018`)."""
    found: list[str] = []
    rest = question
    for number, pattern in enumerate(_DATES):
        for match in pattern.finditer(rest):
            found.append(_as_digits(number, match.groups()))
        rest = pattern.sub(" ", rest)
    return found


def _as_digits(number: int, groups: tuple[str | None, ...]) -> str:
    if number == 0:
        year, month, day = groups
        return f"{year}{int(month or 0):02d}" + (f"{int(day):02d}" if day else "")
    if number == 1:
        month_name, day, year = groups
        return f"{year}{_month(month_name or ''):02d}{int(day or 0):02d}"
    if number == 2:
        day, month_name, year = groups
        return f"{year}{_month(month_name or ''):02d}{int(day or 0):02d}"
    if number == 3:
        month_name, year = groups
        return f"{year}{_month(month_name or ''):02d}"
    return str(groups[0])


def _month(name: str) -> int:
    key = name[:3].title()
    return list(calendar.month_abbr).index(key)


def _date_match(stamp: str, wanted: Sequence[str]) -> int:
    """How many leading digits a member's stamp shares with a date the question names (0: none)."""
    best = 0
    for date in wanted:
        shared = min(len(stamp), len(date))
        if shared >= 2 and stamp[:shared] == date[:shared]:
            best = max(best, shared)
    return best

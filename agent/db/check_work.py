"""What keeps the statement check's work in proportion to the statement: a budget of steps, and the name sets
the walk changes as it goes without copying them.

The SQL comes from a model anyone can talk to, and a check that can be made to do far more work than the
statement's size suggests holds a CPU (and, on the event loop, every other user) for as long as the statement
asks. Every unit of the check's work is spent from one budget; past it the statement is refused as too complex,
so no statement the parser accepts costs more than the budget, whatever shape it has.
"""

from __future__ import annotations

from collections.abc import Iterable


class TooMuchWork(Exception):
    """The statement needs more checking than the budget allows; the check refuses it as too complex."""


# Steps a whole check may take: each is a node visited, a table checked, or a name moved in or out of a set or
# looked up in one. The statements accepted (60,000 characters) take at most some 35,000 steps to walk once, and
# the re-walk of a UNION's copied scalar aliases is capped at 50,000 nodes (statement.py, MAX_REVISITS).
MAX_CHECK_STEPS = 200_000


class CheckBudget:
    def __init__(self, limit: int | None = None) -> None:
        self.limit = MAX_CHECK_STEPS if limit is None else limit
        self.spent = 0

    def spend(self, steps: int = 1) -> None:
        self.spent += steps
        if self.spent > self.limit:
            raise TooMuchWork


class NameCounts:
    """A multiset of names that a depth-first walk adds to on the way in and takes from on the way out: O(1)
    per name, where a frozenset rebuilt per element makes a long WITH clause quadratic. A set of names that
    many places share (a WITH clause the engine copies into every later SELECT of a UNION) is added whole, as
    one layer, rather than name by name in each of them."""

    def __init__(self, budget: CheckBudget) -> None:
        self.budget = budget
        self.counts: dict[str, int] = {}
        self.layers: list[frozenset[str]] = []

    def __contains__(self, name: object) -> bool:
        if not isinstance(name, str):
            return False
        if self.counts.get(name, 0) > 0:
            return True
        self.budget.spend(len(self.layers))
        return any(name in layer for layer in self.layers)

    def push(self, layer: frozenset[str]) -> None:
        self.budget.spend()
        self.layers.append(layer)

    def pop(self) -> None:
        self.layers.pop()

    def add(self, names: Iterable[str]) -> None:
        for name in names:
            self.budget.spend()
            self.counts[name] = self.counts.get(name, 0) + 1

    def remove(self, names: Iterable[str]) -> None:
        for name in names:
            self.budget.spend()
            if (left := self.counts[name] - 1) > 0:
                self.counts[name] = left
            else:
                del self.counts[name]

"""The figure check's time limit, kept by the check itself.

A thread cannot be stopped from outside: a caller that stops waiting leaves the work running, holding
its worker and the interpreter. So the check is handed the moment it must give up and looks at the
clock between steps (each match of the answer, each figure, each row of a result, none of them long);
past the moment it raises `CheckTimedOut` and its worker is free again.
"""

from __future__ import annotations

import time
from collections.abc import Callable


class CheckTimedOut(Exception):
    """The check reached its deadline; what it found so far is dropped."""


class Deadline:
    """The moment (on `clock`) after which the check stops; `None` for none."""

    def __init__(self, at: float | None, clock: Callable[[], float] = time.monotonic) -> None:
        self._at = at
        self._clock = clock
        self.steps = 0  # checkpoints passed: what a test counts

    @classmethod
    def after(cls, seconds: float) -> Deadline:
        return cls(time.monotonic() + seconds)

    def expire(self) -> None:
        """End the check at its next step (its run was cancelled: no one waits for it any more)."""
        self._at = float("-inf")

    def check(self) -> None:
        """Raise `CheckTimedOut` once the deadline has passed."""
        self.steps += 1
        if self._at is not None and self._clock() >= self._at:
            raise CheckTimedOut


def no_deadline() -> Deadline:
    return Deadline(None)

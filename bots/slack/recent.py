"""What Slack said a moment ago, kept briefly: who a person is, their user groups, a channel's members.

A question's asker and a link's opener are looked up on every question and every open; Slack's tiers
(users.info 100+ a minute, usergroups.list 20+) and the wait would both suffer without a short memory.
Brief, because a person removed from a channel or a group must lose access soon; bounded, because the
keys (people, channels) come from outside. Only answers are kept: a failure is asked again next time.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable
from typing import Generic, TypeVar

K = TypeVar("K")
V = TypeVar("V")

DEFAULT_TTL_S = 60.0
DEFAULT_MAX_ENTRIES = 10_000


class Recent(Generic[K, V]):
    """At most `max_entries` values, each for `ttl_s` after it was put; the least recently put goes first."""

    def __init__(
        self,
        ttl_s: float = DEFAULT_TTL_S,
        max_entries: int = DEFAULT_MAX_ENTRIES,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.ttl_s, self.max_entries, self._clock = ttl_s, max(1, max_entries), clock
        self._entries: OrderedDict[K, tuple[float, V]] = OrderedDict()

    def get(self, key: K) -> V | None:
        found = self.get_until(key)
        return None if found is None else found[1]

    def get_until(self, key: K) -> tuple[float, V] | None:
        """The value with the clock time it expires at, so what is built from it can expire no later."""
        found = self._entries.get(key)
        if found is None:
            return None
        if self._clock() >= found[0]:
            del self._entries[key]
            return None
        return found

    def put(self, key: K, value: V, *, until: float | None = None) -> float:
        """Keep `value` for `ttl_s`, or only `until` (clock time) when that comes first; returns the expiry."""
        expires = self._clock() + self.ttl_s if until is None else min(until, self._clock() + self.ttl_s)
        self._entries.pop(key, None)
        self._entries[key] = (expires, value)
        while len(self._entries) > self.max_entries:
            self._entries.popitem(last=False)
        return expires

    def __len__(self) -> int:
        return len(self._entries)

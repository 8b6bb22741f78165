"""When a schedule fires: daily at a time, weekly on a day at a time, or a cron expression, each in a
time zone, as wall time there. "Every day at 09:00 Europe/Berlin" fires at 09:00 in Berlin in winter
and in summer, so its UTC instant moves by an hour across a daylight-saving change.

croniter walks the expression over naive local times, and zoneinfo turns each into an instant: a wall
time that does not exist (the hour the clocks skip) fires at the same offset it had before, an hour
later on the clock; one that happens twice (the hour the clocks repeat) fires once, the first time.
Walking the local calendar rather than UTC is what keeps 09:00 at 09:00 on both sides of a change. Asked
during the second pass of a repeated stretch (up to two hours, as in Antarctica/Troll), the walk steps past
the rest of that stretch at once rather than minute by minute: it has fired there already.

MIN_INTERVAL_S is the shortest gap between two fires a cadence may have (AGENT_SCHEDULE_MIN_INTERVAL_S
sets the store's): a schedule firing every minute runs a query, or a model call, every minute for nothing.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Literal
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from croniter import CroniterBadCronError, CroniterBadDateError, croniter

__all__ = ["MIN_INTERVAL_S", "WEEKDAYS", "Cadence", "CadenceError", "Kind"]

Kind = Literal["daily", "weekly", "cron"]
WEEKDAYS = ("monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday")
_CLOCK = re.compile(r"^([01]?\d|2[0-3]):([0-5]\d)$")
_MAX_STEPS = 64  # cron times that do not fire (the hour a repeat or a gap moves): a few at most
MIN_INTERVAL_S = 15 * 60.0
_SAMPLED_FIRES = 96  # consecutive fires of a cadence checked for the shortest gap (a day of every 15 minutes)


class CadenceError(ValueError):
    """A cadence that cannot fire: its message says which part is wrong, for the person who wrote it."""


@dataclass(frozen=True)
class Cadence:
    kind: Kind
    timezone: str = "UTC"
    at: str = "09:00"  # HH:MM, daily and weekly
    weekday: int = 0  # 0 Monday .. 6 Sunday, weekly
    cron: str = ""  # five fields, kind "cron"

    def __post_init__(self) -> None:
        self.zone()  # an unknown zone is refused where the cadence is made, not when it should fire
        croniter(self.expression())  # so is an expression croniter does not read

    @classmethod
    def of(cls, data: dict[str, object]) -> Cadence:
        """From JSON as a form or the store sends it; CadenceError for anything wrong."""
        kind = str(data.get("kind", ""))
        if kind not in ("daily", "weekly", "cron"):
            raise CadenceError("Say daily, weekly or cron.")
        weekday = data.get("weekday", 0)
        if isinstance(weekday, str):
            weekday = _weekday(weekday)
        if not isinstance(weekday, int) or not 0 <= weekday <= 6:
            raise CadenceError("A weekday is 0 (Monday) to 6 (Sunday), or its name.")
        timezone, at, cron = (str(data.get(k, d)) for k, d in (("timezone", "UTC"), ("at", "09:00"), ("cron", "")))
        return cls(kind, timezone=timezone, at=at, weekday=weekday, cron=cron)  # type: ignore[arg-type]

    def as_dict(self) -> dict[str, object]:
        return {"kind": self.kind, "timezone": self.timezone, "at": self.at, "weekday": self.weekday, "cron": self.cron}

    def zone(self) -> ZoneInfo:
        try:
            return ZoneInfo(self.timezone)
        except (ZoneInfoNotFoundError, ValueError):
            raise CadenceError(f"Unknown time zone {self.timezone!r}: use a name such as Europe/Berlin.") from None

    def expression(self) -> str:
        """The cron expression of this cadence (daily and weekly are cron expressions too)."""
        if self.kind == "cron":
            fields = self.cron.split()
            if len(fields) != 5:
                raise CadenceError("A cron expression has five fields: minute hour day month weekday.")
            try:
                croniter(self.cron)
            except (CroniterBadCronError, ValueError) as exc:
                raise CadenceError(f"The cron expression {self.cron!r} does not read: {exc}") from None
            return " ".join(fields)
        found = _CLOCK.match(self.at)
        if found is None:
            raise CadenceError(f"A time of day is HH:MM (24 hours), not {self.at!r}.")
        hour, minute = int(found.group(1)), int(found.group(2))
        day = "*" if self.kind == "daily" else str((self.weekday + 1) % 7)  # cron's 0 is Sunday
        return f"{minute} {hour} * * {day}"

    def next_after(self, after: float) -> float:
        """The first instant (Unix seconds) strictly after `after` at which this cadence fires."""
        zone = self.zone()
        local = datetime.fromtimestamp(after, zone).replace(tzinfo=None, second=0, microsecond=0)
        walk = croniter(self.expression(), local - timedelta(minutes=1))
        try:
            for _ in range(_MAX_STEPS):
                wall = walk.get_next(datetime)
                instant = wall.replace(tzinfo=zone).astimezone(UTC).timestamp()
                if instant > after:
                    return instant
                # A wall time of a repeated stretch that fired on its first pass: skip what is left of it
                walk = croniter(self.expression(), _repeat_end(zone, wall) - timedelta(seconds=1))
        except CroniterBadDateError:
            pass
        raise CadenceError(f"{self.describe()} never fires.")

    def shortest_gap(self, after: float) -> float:
        """The shortest time (seconds) between consecutive fires over the next _SAMPLED_FIRES from `after`."""
        shortest, at = math.inf, self.next_after(after)
        for _ in range(_SAMPLED_FIRES):
            following = self.next_after(at)
            shortest, at = min(shortest, following - at), following
        return shortest

    def describe(self) -> str:
        """In words, for a list of schedules: "every day at 09:00 (Europe/Berlin)"."""
        if self.kind == "daily":
            return f"every day at {self.at} ({self.timezone})"
        if self.kind == "weekly":
            return f"every {WEEKDAYS[self.weekday].capitalize()} at {self.at} ({self.timezone})"
        return f"on cron {self.cron} ({self.timezone})"


def _repeat_end(zone: ZoneInfo, wall: datetime) -> datetime:
    """The first wall time after the repeated stretch `wall` lies in (a clock set back): found by halving
    between its first and its second instant, as zoneinfo lists no transitions."""
    first = int(wall.replace(tzinfo=zone, fold=0).timestamp())
    second = int(wall.replace(tzinfo=zone, fold=1).timestamp())
    if second <= first:  # not repeated: a minute on
        return wall + timedelta(minutes=1)
    before = datetime.fromtimestamp(first, zone).utcoffset()
    while second - first > 1:
        middle = (first + second) // 2
        if datetime.fromtimestamp(middle, zone).utcoffset() == before:
            first = middle
        else:
            second = middle
    # `second` is the change's instant: the wall time it ends the repeat at is the one just before it, on
    return datetime.fromtimestamp(first, zone).replace(tzinfo=None) + timedelta(seconds=1)


def _weekday(name: str) -> int:
    found = [i for i, day in enumerate(WEEKDAYS) if name.strip().lower() and day.startswith(name.strip().lower())]
    if len(found) != 1:
        raise CadenceError(f"Unknown weekday {name!r}.")
    return found[0]

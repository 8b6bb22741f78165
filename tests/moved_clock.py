"""A clock the tests move: schedules and the scheduler read time from it, so a test steps across a
daylight-saving change or a day of downtime without sleeping on real time."""

from __future__ import annotations

from datetime import UTC, datetime


class MovedClock:
    def __init__(self, start: datetime) -> None:
        self.now = start.astimezone(UTC).timestamp()

    def __call__(self) -> float:
        return self.now

    def to(self, when: datetime) -> None:
        at = when.astimezone(UTC).timestamp()
        assert at >= self.now, "the clock only moves forward"
        self.now = at

    def forward(self, seconds: float) -> None:
        self.now += seconds

    def utc(self) -> datetime:
        return datetime.fromtimestamp(self.now, UTC)

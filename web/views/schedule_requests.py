"""What the schedule dialog sends (web/templates/_schedule_dialog.html), checked as it arrives: a field that
is wrong is named in a 400 with what it must be, and the dialog keeps everything the person typed. The
meaning of a schedule (the next fire, what an alert's condition is) is the kit's (chats/schedules.py)."""

from __future__ import annotations

import math
import re
from functools import cache
from typing import Literal, Self
from zoneinfo import available_timezones

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator
from pydantic_core import PydanticCustomError

Every = Literal["day", "week", "cron"]
Weekday = Literal["mon", "tue", "wed", "thu", "fri", "sat", "sun"]
WEEKDAY_NUMBER = {"sun": 0, "mon": 1, "tue": 2, "wed": 3, "thu": 4, "fri": 5, "sat": 6}  # cron's numbering
TIME = re.compile(r"([01][0-9]|2[0-3]):([0-5][0-9])")
QUERY_LABEL = re.compile(r"Q[1-9][0-9]{0,8}")
# A cron expression's five fields, as the dialog accepts it: digits, names and cron's punctuation only.
CRON_FIELD = re.compile(r"[0-9A-Za-z*/,\-?]{1,40}")


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", str_strip_whitespace=True)


class When(_Strict):
    every: Every
    time: str = "09:00"
    weekday: Weekday = "mon"
    cron: str = Field("", max_length=100)
    time_zone: str = Field(max_length=64)

    @field_validator("time")
    @classmethod
    def _time(cls, value: str) -> str:
        if value and not TIME.fullmatch(value):  # empty: only for a cron expression (checked below)
            raise _invalid("must be a time of day as HH:MM (24-hour), such as 09:00")
        return value

    @field_validator("time_zone")
    @classmethod
    def _zone(cls, value: str) -> str:
        if value not in _time_zones():
            raise _invalid(f"{value!r} is not a time zone; use an IANA name such as Europe/Paris or UTC")
        return value

    @model_validator(mode="after")
    def _cron_given(self) -> Self:
        if self.every != "cron" and not self.time:
            raise _invalid("give the time of day as HH:MM (24-hour), such as 09:00")
        if self.every == "cron":
            fields = self.cron.split()
            if len(fields) != 5 or not all(CRON_FIELD.fullmatch(f) for f in fields):
                raise _invalid(
                    "a cron expression is five fields (minute hour day-of-month month day-of-week), such as 0 9 * * 1-5"
                )
        return self

    def expression(self) -> str:
        """The cron expression of this choice, in its time zone."""
        if self.every == "cron":
            return " ".join(self.cron.split())
        hour, minute = (int(part) for part in self.time.split(":"))
        weekday = str(WEEKDAY_NUMBER[self.weekday]) if self.every == "week" else "*"
        return f"{minute} {hour} * * {weekday}"


class Where(_Strict):
    to: Literal["inbox", "slack"]
    channel: str = Field("", max_length=100)

    @model_validator(mode="after")
    def _channel_given(self) -> Self:
        if self.to == "slack" and not self.channel.lstrip("#").strip():
            raise _invalid("name the Slack channel to post to (#channel or its id)")
        return self


class AlertCondition(_Strict):
    """A condition on one of the answer's queries: its column's value above or below a threshold, changed by
    more than a share (0.1: 10%) since the last check, or any rows at all."""

    query: str = Field(max_length=12)
    condition: Literal["above", "below", "change", "rows"]
    column: str | None = Field(None, max_length=200)
    value: float | None = None

    @field_validator("query")
    @classmethod
    def _label(cls, value: str) -> str:
        if not QUERY_LABEL.fullmatch(value):
            raise _invalid("must be one of the answer's queries, such as Q1")
        return value

    @model_validator(mode="after")
    def _complete(self) -> Self:
        if self.condition == "rows":
            return self.model_copy(update={"column": None, "value": None})
        if not self.column:
            raise _invalid(f"say which column of {self.query} to watch")
        if self.value is None or not math.isfinite(self.value):
            raise _invalid("give the threshold as a number" if self.condition != "change" else _SHARE)
        if self.condition == "change" and self.value <= 0:
            raise _invalid(_SHARE)
        return self


_SHARE = "give the change as a percentage above 0"


class ScheduleRequest(_Strict):
    """A schedule made from an answer (`run_id`), or the changes to one (without it)."""

    run_id: str | None = Field(None, max_length=64)
    name: str = Field(min_length=1, max_length=200)
    kind: Literal["schedule", "alert"] = "schedule"
    when: When
    where: Where
    how: Literal["rerun", "afresh"] = "rerun"
    alert: AlertCondition | None = None

    @model_validator(mode="after")
    def _alert_fits_kind(self) -> Self:
        if self.kind == "alert":
            if self.alert is None:
                raise _invalid("an alert needs its condition (alert)")
            if self.how != "rerun":
                raise _invalid("an alert re-runs its query's SQL (how: rerun); it is never asked afresh")
        elif self.alert is not None:
            raise _invalid("only an alert (kind: alert) has a condition")
        return self


def _invalid(message: str) -> PydanticCustomError:
    """A refusal that reads as written (pydantic would prefix a ValueError's words with "Value error, ")."""
    return PydanticCustomError("invalid", message)


@cache
def _time_zones() -> frozenset[str]:
    return frozenset(available_timezones())


EXAMPLE = (
    '{"run_id": "...", "name": "...", "kind": "schedule", "when": {"every": "day", "time": "09:00", '
    '"time_zone": "UTC"}, "where": {"to": "inbox"}, "how": "rerun"}'
)

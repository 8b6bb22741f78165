"""What the schedule dialog sends (web/templates/_schedule_dialog.html), checked as it arrives: a field that
is wrong is named in a 400 with what it must be, and the dialog keeps everything the person typed. The
cadence and the alert are the kit's own (chats/schedule_times.py `Cadence`, chats/schedules.py `Alert`), read
here by their own constructors, so what the web accepts is what the scheduler runs."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Literal, Self

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator
from pydantic_core import PydanticCustomError

from chats.schedules import Alert, Cadence, ScheduleError

QUERY_LABEL = re.compile(r"Q[1-9][0-9]{0,8}")
# A Slack conversation's id (a channel, a private one, a DM): what the scheduler posts to.
SLACK_CHANNEL = re.compile(r"[CGD][A-Z0-9]{2,20}")


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", str_strip_whitespace=True)


class CadenceIn(_Strict):
    kind: Literal["daily", "weekly", "cron"]
    at: str = Field("09:00", max_length=5)
    weekday: int = Field(0, ge=0, le=6)  # 0 Monday .. 6 Sunday
    cron: str = Field("", max_length=100)
    timezone: str = Field(max_length=64)

    @model_validator(mode="after")
    def _fires(self) -> Self:
        _checked(self.cadence)
        return self

    def cadence(self) -> Cadence:
        return Cadence.of(self.model_dump())


class Destination(_Strict):
    to: Literal["inbox", "slack"]
    channel: str = Field("", max_length=40)

    @model_validator(mode="after")
    def _channel_given(self) -> Self:
        if self.to == "slack":
            channel = self.channel.lstrip("#")
            if not SLACK_CHANNEL.fullmatch(channel):
                raise _invalid("give the Slack channel's id (such as C0123ABCD: its details in Slack show it)")
            return self.model_copy(update={"channel": channel})
        return self


class AlertIn(_Strict):
    """A condition on one of the answer's queries (`query`; the kit watches the first query it keeps, so the
    schedule keeps this one first)."""

    query: str = Field(max_length=12)
    kind: Literal["above", "below", "change", "rows"]
    column: str = Field("", max_length=200)
    threshold: float | None = Field(None, allow_inf_nan=False)
    share: float | None = Field(None, allow_inf_nan=False)
    repeat: Literal["until_clear", "every_check"] = "until_clear"

    @field_validator("query")
    @classmethod
    def _label(cls, value: str) -> str:
        if not QUERY_LABEL.fullmatch(value):
            raise _invalid("must be one of the answer's queries, such as Q1")
        return value

    @model_validator(mode="after")
    def _holds(self) -> Self:
        _checked(self.alert)
        return self

    def alert(self) -> Alert:
        return Alert.of(self.model_dump(exclude={"query"}))


class ScheduleRequest(_Strict):
    """A schedule made from an answer (`run_id`), or an edit of one (without it)."""

    run_id: str | None = Field(None, max_length=64)
    title: str = Field("", max_length=200)
    kind: Literal["question", "alert"] = "question"
    cadence: CadenceIn
    destination: Destination
    how: Literal["rerun", "ask"] = "rerun"
    alert: AlertIn | None = None

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


def _checked(build: Callable[[], object]) -> None:
    """The kit's own check of what `build` makes; its refusal, under the field it is about."""
    try:
        build()
    except (ScheduleError, ValueError) as exc:  # CadenceError, croniter's refusals: ValueErrors that say why
        raise _invalid(str(exc)) from None


def _invalid(message: str) -> PydanticCustomError:
    """A refusal that reads as written (pydantic would prefix a ValueError's words with "Value error, ")."""
    return PydanticCustomError("invalid", message)


EXAMPLE = (
    '{"run_id": "...", "title": "...", "kind": "question", "cadence": {"kind": "daily", "at": "09:00", '
    '"timezone": "UTC"}, "destination": {"to": "inbox"}, "how": "rerun"}'
)

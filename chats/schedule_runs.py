"""What one fire of a schedule makes, before it is delivered: a normal answer (figures checked against the
rows, a receipt, its queries stored so their pages open), a line on what changed since the previous
delivery, and for an alert whether its condition holds.

A scheduled question either runs its answer's stored SQL again and writes a short answer from the fresh
rows with no model (prompts/schedules/rows.md: every figure is a cell as ClickHouse printed it, cited, so
the figure check finds each one), or asks the question afresh through the Runner. An alert runs its query
and evaluates its condition on the rows, with no model at all; it posts only when the condition holds.

Every query goes through the library (`AgentApp.rerun`, the Runner), under the policy `fire_policy` picks:
the policy the answer was asked under, while the owner's own policy (picked again now, from who they are
as last seen: chats/schedules.py `seen`) still covers it; and for a Slack channel, only when the channel's
policy covers those rows too, since everyone in it reads them. Otherwise `AccessLost` says why, and the schedule stops.
"""

from __future__ import annotations

import math
import re
import time
from dataclasses import dataclass
from datetime import UTC, datetime, tzinfo
from typing import Any

from agent import QueryResult
from agent.access.policy import Policies, Policy
from agent.app import AgentApp
from agent.figures import Evidence, check_answer
from agent.prompts import PromptLibrary
from agent.receipts import Receipt
from agent.runner import Classification, ExecutedQuery, Interface, Outcome, Platform, RunResult
from chats.daily_budgets import DailyBudget, Refusal
from chats.pacing import Pacing
from chats.schedules import Alert, Draft, Schedule, slack_of

SHOWN_ROWS = 5  # rows a scheduled answer lists per query; its query's page has them all
MAX_CHANGES = 6  # changes the "what changed" line names


class AccessLost(Exception):
    """The schedule may no longer run or deliver as made; the message is for its owner, and `reason` is
    why, for refusing one as it is made."""

    def __init__(self, reason: str) -> None:
        super().__init__(f"{reason}, so this schedule has stopped.")
        self.reason = reason


class OverBudget(Exception):
    """Its owner's daily budget is spent: this fire asks no model; the message (when it resets) is for them."""


def budget_key(schedule: Schedule) -> str:
    """The key its owner's questions count under: Slack's (team:user) for one made in Slack and posting
    there, else the web's (the person's id, the owner string without its prefix)."""
    where = slack_of(schedule.draft.destination)
    if where is not None and schedule.draft.asker.slack_user:
        return f"{where[0]}:{schedule.draft.asker.slack_user}"
    return schedule.owner.removeprefix("person:")


@dataclass(frozen=True)
class Made:
    """What a fire made: the answer to deliver (None: an alert with nothing to post), the values the next
    fire compares with, the line on what changed, and an alert's state after this check."""

    result: RunResult | None
    values: dict[str, Any]
    changed: str = ""
    alert_firing: bool | None = None


def fire_policy(policies: Policies | None, draft: Draft) -> Policy | None:
    """The policy a fire of `draft` runs under (None: no policy file, all of the scope); AccessLost
    otherwise. Checked as a schedule is made too, so one that could never deliver is refused then."""
    if policies is None:
        return None
    owner_now = policies.for_asker(draft.asker)
    if draft.how == "ask" and draft.kind == "question":
        run = owner_now
        if run.reads_nothing:
            raise AccessLost("The access policy no longer gives you any data")
    else:
        asked = policies.named(draft.policy) if draft.policy else None
        if asked is None or not owner_now.covers(asked):
            raise AccessLost("Your access no longer covers the rows of the answer this schedule repeats")
        run = asked
    where = slack_of(draft.destination)
    if where is not None and not is_direct_message(where[1]) and not policies.for_channel(where[1]).covers(run):
        raise AccessLost(
            "Not everyone in the channel it posts to may read these rows (the channel's access policy does not "
            "cover them)"
        )
    return run


def is_direct_message(channel: str) -> bool:
    """A Slack DM's id (D...): its one reader is the owner, so the owner's policy is the readers'."""
    return channel.startswith("D")


class FireMaker:
    """Makes each fire's answer or alert through the library (the agent's queries and runner)."""

    def __init__(self, agent: AgentApp, prompts: PromptLibrary, *, budget: DailyBudget | None = None) -> None:
        self._agent, self._prompts = agent, prompts
        # Asked afresh, a fire spends its owner's daily budget as their questions do; `agent serve` passes
        # the state's (shared across workers), else one of this process's.
        self._budget = budget or Pacing().asker_budget(agent.settings)

    async def make(self, schedule: Schedule, policy: Policy | None, *, interface: Interface) -> Made:
        if schedule.kind == "alert":
            return await self.check_alert(schedule, policy)
        if schedule.draft.how == "ask":
            return await self.ask(schedule, policy, interface=interface)
        return await self.rerun(schedule, policy)

    async def rerun(self, schedule: Schedule, policy: Policy | None) -> Made:
        started = time.perf_counter()
        ran = [await self._run(q.label, q.sql, q.question, policy) for q in schedule.draft.queries]
        queries = [_shown(q) for q in ran]
        answer = self._prompts.render("schedules/rows.md", queries=queries)
        result = _answer(schedule.draft.question, answer, ran, policy, started)
        values = values_of(ran)
        return Made(
            result,
            values,
            what_changed(schedule.last_values, values, schedule.last_delivered_at, schedule.draft.cadence.zone()),
        )

    async def ask(self, schedule: Schedule, policy: Policy | None, *, interface: Interface) -> Made:
        platform: Platform = "slack" if interface == "slack" else "web"
        booked = await self._budget.reserve(budget_key(schedule))
        if isinstance(booked, Refusal):
            raise OverBudget(booked.message)
        receipt = None
        try:
            result = await self._agent.runner.run(
                schedule.draft.question, platform=platform, interface=interface, followups=False, policy=policy
            )
            receipt = result.receipt
        finally:
            await self._budget.settle(booked, receipt)
        if result.outcome is Outcome.ERROR:
            raise RuntimeError(result.error or "the question failed")
        values = values_of(result.queries)
        return Made(
            result,
            values,
            what_changed(schedule.last_values, values, schedule.last_delivered_at, schedule.draft.cadence.zone()),
        )

    async def check_alert(self, schedule: Schedule, policy: Policy | None) -> Made:
        """The alert's query and its condition, with no model; an answer only when it is to post."""
        alert, first = schedule.draft.alert, schedule.draft.queries[0]
        assert alert is not None
        started = time.perf_counter()
        query = await self._run(first.label, first.sql, first.question, policy)
        if query.result.error is not None:
            raise RuntimeError(f"{first.label} did not run: {query.result.error}")
        value = watched(query.result, alert.column) if alert.kind != "rows" else None
        previous = (schedule.last_values or {}).get("value") if isinstance(schedule.last_values, dict) else None
        holds = condition_holds(alert, query.result, value, previous)
        post = holds and (alert.repeat == "every_check" or not schedule.alert_firing)
        values = {"value": value}
        if not post:
            return Made(None, values, alert_firing=holds)
        shown = _shown(query)
        text = self._prompts.render(
            "schedules/alert.md",
            title=schedule.title,
            kind=alert.kind,
            column=as_text(alert.column),
            value=_cell(query.result, alert.column),
            label=first.label,
            threshold=_number(alert.threshold),
            previous=_number(previous),
            share=f"{(alert.share or 0):.0%}",
            **{k: shown[k] for k in ("columns", "rows", "more")},
        )
        asked = f"{schedule.draft.question} (alert: {describe_alert(alert)}; previous value {_number(previous)})"
        return Made(_answer(asked, text, [query], policy, started), values, alert_firing=True)

    async def _run(self, label: str, sql: str, question: str, policy: Policy | None) -> ExecutedQuery:
        result = await self._agent.rerun(sql, label=label, policy=policy)
        return ExecutedQuery(id=label, question=question, sql=sql, result=result)


def _answer(question: str, answer: str, ran: list[ExecutedQuery], policy: Policy | None, started: float) -> RunResult:
    """A RunResult as the pipeline's: its figures checked against its rows, its receipt (no model)."""
    figures = check_answer(answer, question=question, evidence=[Evidence(q.id, q.sql, q.result) for q in ran])
    elapsed_ms = round((time.perf_counter() - started) * 1000)
    receipt = Receipt.build(
        usage={},
        prices=None,
        rounds=0,
        reads=[(q.result.rows_read, q.result.bytes_read) for q in ran if q.result.ok],
        first_event_ms=None,
        answer_ms=elapsed_ms,
    )
    return RunResult(
        question=question,
        answer=answer,
        classification=Classification.DATA_ANALYSIS,
        queries=ran,
        figures=figures,
        receipt=receipt,
        policy=policy.name if policy is not None else None,
    )


# What Markdown (and GFM's autolinks, and HTML) would make live in a cell: data anyone who writes a table
# may have put there, written into an answer with no model between, so never a link in its owner's inbox.
_LIVE = re.compile(r"[\[\]()<>`*_\\!&|#~@]|://|www\.", re.IGNORECASE)


def as_text(cell: Any) -> str:
    """A cell or column name as Markdown shows it verbatim and never as a link: plain when it has nothing
    Markdown or HTML reads (numbers, dates, most names, so the figure check finds them as printed), else
    a code span fenced by more backticks than it holds."""
    text = " ".join(str(cell).split())
    if not _LIVE.search(text):
        return text
    fence = "`" * (max((len(run) for run in re.findall(r"`+", text)), default=0) + 1)
    return f"{fence} {text} {fence}"


def _shown(query: ExecutedQuery) -> dict[str, Any]:
    result = query.result
    return {
        "label": query.id,
        "question": query.question,
        "columns": [as_text(c) for c in result.columns],
        "rows": [[as_text(cell) for cell in row] for row in result.rows[:SHOWN_ROWS]],
        "more": result.row_count > SHOWN_ROWS or result.has_more,
        "error": result.error,
    }


def values_of(queries: list[ExecutedQuery]) -> dict[str, Any]:
    """What a delivery showed, for the next one to compare: each query's row count and first row."""
    values: dict[str, Any] = {}
    for q in queries:
        if q.result.ok:
            first = q.result.json_rows(1)
            row = dict(zip(q.result.columns, first[0], strict=False)) if first else {}
            values[q.id] = {"rows": q.result.row_count, "first": row}
    return values


def what_changed(before: Any, now: dict[str, Any], since: float | None, zone: tzinfo | None = None) -> str:
    """One line: the first row's numbers and the row counts that moved since the previous delivery."""
    if not isinstance(before, dict) or not before:
        return "The first delivery of this schedule."
    when = datetime.fromtimestamp(since, zone or UTC).strftime("%Y-%m-%d %H:%M") if since else "the previous delivery"
    changes = []
    for label, current in now.items():
        previous = before.get(label)
        if not isinstance(previous, dict):
            continue
        if previous.get("rows") != current["rows"]:
            changes.append(f"{label} rows {previous.get('rows')} → {current['rows']}")
        for column, value in current["first"].items():
            was = _float(previous.get("first", {}).get(column))
            is_now = _float(value)
            if was is not None and is_now is not None and was != is_now:
                changes.append(f"{column} {_number(was)} → {_number(is_now)} ({_delta(was, is_now)})")
    if not changes:
        return f"No change since the previous delivery ({when})."
    return f"Since the previous delivery ({when}): " + "; ".join(changes[:MAX_CHANGES]) + "."


def _delta(was: float, now: float) -> str:
    diff = now - was
    share = f", {diff / abs(was):+.1%}" if was else ""
    return f"{'+' if diff > 0 else ''}{_number(diff)}{share}"


def watched(result: QueryResult, column: str) -> float | None:
    """The watched column's value in the first row, as a number (None: no row, no such column, not a number)."""
    if not result.rows or column not in result.columns:
        return None
    return _float(result.json_rows(1)[0][result.columns.index(column)])


def _cell(result: QueryResult, column: str) -> str:
    if not result.rows or column not in result.columns:
        return ""
    return as_text(result.rows[0][result.columns.index(column)])


def condition_holds(alert: Alert, result: QueryResult, value: float | None, previous: Any) -> bool:
    if alert.kind == "rows":
        return result.row_count > 0
    if value is None:
        return False
    if alert.kind == "above":
        return alert.threshold is not None and value > alert.threshold
    if alert.kind == "below":
        return alert.threshold is not None and value < alert.threshold
    was = _float(previous)
    if was is None:
        return False  # the first check has nothing to compare with
    if was == 0:
        return value != 0
    return abs(value - was) / abs(was) > (alert.share or 0)


def describe_alert(alert: Alert) -> str:
    if alert.kind == "rows":
        return "when the query returns any rows"
    if alert.kind == "change":
        return f"when {alert.column} changes by more than {(alert.share or 0):.0%} between checks"
    return f"when {alert.column} is {alert.kind} {_number(alert.threshold)}"


def _float(value: Any) -> float | None:
    if isinstance(value, bool) or value is None:
        return None
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return number if math.isfinite(number) else None


def _number(value: Any) -> str:
    number = _float(value)
    if number is None:
        return "none"
    return f"{number:,.0f}" if number == int(number) else f"{number:,.4g}"

"""The run as Slack's own plan in the streamed answer: each query it ran a task card with its Q number and
question, its status (in progress, complete, error), its row count, and a link to it in the web UI.

A report's plan is its steps instead (each model round and the queries it ran, with what the report has
spent of its budget), as `StepEvent`s tell them.

Sent as `task_update` chunks of chat.startStream / appendStream with `task_display_mode="plan"` ("plan
task updates render together in a plan block", docs.slack.dev/reference/methods/chat.startStream); each
update carries the task's whole state, so only what changed since the last write is sent.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import partial
from typing import Any

from agent.runner import ExecutingEvent, ResultEvent, StepEvent, WireEvent
from bots.slack.blocks import no_pings, query_page_url
from chats.run_view import QueryView, RunView

PLAN_TITLE = "Querying the data"
REPORT_PLAN_TITLE = "Writing the report"
STEP_STATUS = {"running": "in_progress", "done": "complete"}
MAX_TASK_TITLE_CHARS = 120  # as the progress message's steps (no_pings adds a character per `<`)
MAX_DETAILS_CHARS = 200
STATUS = {"executing": "in_progress", "result": "complete", "error": "error"}  # the task card's statuses


def task_chunk(query: QueryView, web_url: str | None, run_id: str) -> dict[str, Any]:
    """A query's task card, whole, from the run's view of it."""
    question = " ".join(query.question.split())
    if len(question) > MAX_TASK_TITLE_CHARS:
        question = question[: MAX_TASK_TITLE_CHARS - 1] + "…"
    chunk: dict[str, Any] = {
        "type": "task_update",
        "id": query.query_id,
        "title": no_pings(f"{query.query_id} {question}"),
        "status": STATUS[query.state],
    }
    output, details = _output(query)
    if output:
        chunk["output"] = no_pings(output)
    if details:
        chunk["details"] = no_pings(details)
    # Its page once the query is done (a query is stored with its answer; a link while it runs
    # could lead nowhere). Without AGENT_WEB_URL, Show SQL below the answer remains.
    if web_url and not query.running:
        url = query_page_url(web_url, run_id, query.query_id)
        chunk["sources"] = [{"type": "url", "url": url, "text": f"{query.query_id} SQL and results"}]
    return chunk


def step_chunk(step: StepEvent) -> dict[str, Any]:
    """A report's step as a task card: what it does, its queries, and the report's spending so far."""
    title = " ".join(step.title.split()) or "Thinking"
    if len(title) > MAX_TASK_TITLE_CHARS:
        title = title[: MAX_TASK_TITLE_CHARS - 1] + "…"
    used, budget = step.used, step.budget
    chunk: dict[str, Any] = {
        "type": "task_update",
        "id": f"S{step.number}",
        "title": no_pings(f"{step.number}. {title}"),
        "status": STEP_STATUS[step.state],
        "output": f"{used.queries} of {budget.queries} queries, step {used.steps} of {budget.steps}",
    }
    if step.queries:
        chunk["details"] = ", ".join(step.queries)
    return chunk


@dataclass
class Plan:
    """Which of the run's queries (in its `RunView`, which the answerer keeps) changed since the last write."""

    run_id: str
    view: RunView
    web_url: str | None = None
    report: bool = False  # a report's plan: its steps, not its queries
    _changed: set[str] = field(default_factory=set)
    _titled: bool = False

    def update(self, event: WireEvent) -> bool:
        """Note a query's start or result, or a report's step (the view has taken it already); True when the
        plan changed."""
        match event:
            case StepEvent(number=number) if self.report:
                self._changed.add(f"S{number}")
                return True
            case ExecutingEvent(query_id=query_id) | ResultEvent(query_id=query_id) if (
                query_id in self.view.queries and not self.report
            ):
                self._changed.add(query_id)
                return True
        return False

    def take_changes(self) -> list[dict[str, Any]]:
        """The chunks for what changed since the last call (the plan's title first, once)."""
        tasks = self._tasks()
        title = REPORT_PLAN_TITLE if self.report else PLAN_TITLE
        chunks = [] if self._titled or not tasks else [{"type": "plan_update", "title": title}]
        self._titled = self._titled or bool(tasks)
        chunks += [tasks[t]() for t in tasks if t in self._changed]
        self._changed.clear()
        return chunks

    def _tasks(self) -> dict[str, Any]:
        """Each task's id, and how to make its chunk now."""
        if self.report:
            return {f"S{n}": partial(step_chunk, step) for n, step in self.view.steps.items()}
        return {q: partial(task_chunk, query, self.web_url, self.run_id) for q, query in self.view.queries.items()}

    def resend(self) -> None:
        """The plan's message was taken back: the next write sends the whole plan again."""
        self._titled = False
        self._changed = set(self._tasks())

    @property
    def changed(self) -> bool:
        return bool(self._changed) or (bool(self._tasks()) and not self._titled)


def _output(query: QueryView) -> tuple[str, str]:
    if query.running:
        return "", ""
    if query.error:
        first = query.error.strip().splitlines()[0] if query.error.strip() else ""
        return "failed", first if len(first) <= MAX_DETAILS_CHARS else first[: MAX_DETAILS_CHARS - 1] + "…"
    if query.reused_from:
        return f"same as {query.reused_from}", ""
    return f"{query.row_count:,} row{'s' if query.row_count != 1 else ''}", ""

"""The run as Slack's own plan in the streamed answer: each query it ran a task card with its Q number and
question, its status (in progress, complete, error), its row count, and a link to it in the web UI.

Sent as `task_update` chunks of chat.startStream / appendStream with `task_display_mode="plan"` ("plan
task updates render together in a plan block", docs.slack.dev/reference/methods/chat.startStream); each
update carries the task's whole state, so only what changed since the last write is sent.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from agent.runner import ExecutingEvent, ResultEvent, WireEvent
from bots.slack.blocks import no_pings, query_page_url

PLAN_TITLE = "Querying the data"
MAX_TASK_TITLE_CHARS = 120  # as the progress message's steps (no_pings adds a character per `<`)
MAX_DETAILS_CHARS = 200


@dataclass
class Task:
    query_id: str
    question: str
    status: str = "in_progress"  # pending, in_progress, complete, error (the task card's statuses)
    output: str = ""
    details: str = ""

    def chunk(self, web_url: str | None, run_id: str) -> dict[str, Any]:
        question = " ".join(self.question.split())
        if len(question) > MAX_TASK_TITLE_CHARS:
            question = question[: MAX_TASK_TITLE_CHARS - 1] + "…"
        chunk: dict[str, Any] = {
            "type": "task_update",
            "id": self.query_id,
            "title": no_pings(f"{self.query_id} {question}"),
            "status": self.status,
        }
        if self.output:
            chunk["output"] = no_pings(self.output)
        if self.details:
            chunk["details"] = no_pings(self.details)
        # Its page once the query is done (a query is stored with its answer; a link while it runs
        # could lead nowhere). Without AGENT_WEB_URL, Show SQL below the answer remains.
        if web_url and self.status in ("complete", "error"):
            url = query_page_url(web_url, run_id, self.query_id)
            chunk["sources"] = [{"type": "url", "url": url, "text": f"{self.query_id} SQL and results"}]
        return chunk


@dataclass
class Plan:
    run_id: str
    web_url: str | None = None
    tasks: dict[str, Task] = field(default_factory=dict)
    _changed: set[str] = field(default_factory=set)
    _titled: bool = False

    def update(self, event: WireEvent) -> bool:
        """Take a query's start or result; True when the plan changed."""
        match event:
            case ExecutingEvent(query_id=query_id, question=question):
                self.tasks[query_id] = Task(query_id, question)
            case ResultEvent(query_id=query_id) if task := self.tasks.get(query_id):
                task.status, task.output, task.details = _result(event)
            case _:
                return False
        self._changed.add(event.query_id)
        return True

    def take_changes(self) -> list[dict[str, Any]]:
        """The chunks for what changed since the last call (the plan's title first, once)."""
        chunks = [] if self._titled or not self.tasks else [{"type": "plan_update", "title": PLAN_TITLE}]
        self._titled = self._titled or bool(self.tasks)
        chunks += [self.tasks[q].chunk(self.web_url, self.run_id) for q in self.tasks if q in self._changed]
        self._changed.clear()
        return chunks

    def resend(self) -> None:
        """The plan's message was taken back: the next write sends the whole plan again."""
        self._titled = False
        self._changed = set(self.tasks)

    @property
    def changed(self) -> bool:
        return bool(self._changed) or (bool(self.tasks) and not self._titled)


def _result(event: ResultEvent) -> tuple[str, str, str]:
    if event.error:
        first = event.error.strip().splitlines()[0] if event.error.strip() else ""
        return "error", "failed", first if len(first) <= MAX_DETAILS_CHARS else first[: MAX_DETAILS_CHARS - 1] + "…"
    if event.reused_from:
        return "complete", f"same as {event.reused_from}", ""
    return "complete", f"{event.row_count:,} row{'s' if event.row_count != 1 else ''}", ""

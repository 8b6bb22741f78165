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
from chats.run_view import QueryView, RunView

PLAN_TITLE = "Querying the data"
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


@dataclass
class Plan:
    """Which of the run's queries (in its `RunView`, which the answerer keeps) changed since the last write."""

    run_id: str
    view: RunView
    web_url: str | None = None
    _changed: set[str] = field(default_factory=set)
    _titled: bool = False

    def update(self, event: WireEvent) -> bool:
        """Note a query's start or result (the view has taken it already); True when the plan changed."""
        match event:
            case ExecutingEvent(query_id=query_id) | ResultEvent(query_id=query_id) if query_id in self.view.queries:
                self._changed.add(query_id)
                return True
        return False

    def take_changes(self) -> list[dict[str, Any]]:
        """The chunks for what changed since the last call (the plan's title first, once)."""
        queries = self.view.queries
        chunks = [] if self._titled or not queries else [{"type": "plan_update", "title": PLAN_TITLE}]
        self._titled = self._titled or bool(queries)
        chunks += [task_chunk(queries[q], self.web_url, self.run_id) for q in queries if q in self._changed]
        self._changed.clear()
        return chunks

    def resend(self) -> None:
        """The plan's message was taken back: the next write sends the whole plan again."""
        self._titled = False
        self._changed = set(self.view.queries)

    @property
    def changed(self) -> bool:
        return bool(self._changed) or (bool(self.view.queries) and not self._titled)


def _output(query: QueryView) -> tuple[str, str]:
    if query.running:
        return "", ""
    if query.error:
        first = query.error.strip().splitlines()[0] if query.error.strip() else ""
        return "failed", first if len(first) <= MAX_DETAILS_CHARS else first[: MAX_DETAILS_CHARS - 1] + "…"
    if query.reused_from:
        return f"same as {query.reused_from}", ""
    return f"{query.row_count:,} row{'s' if query.row_count != 1 else ''}", ""

"""Evals on a schedule: what an eval schedule runs, and the job a serving process fires for it.

An eval schedule (kind "evals", chats/schedules.py) keeps, as its question, the command it runs
(`agent evals job --suite ... --when-knowledge-changes`): the schedules' list shows a person exactly what
fires, and the job reads its options back from it, so evals need no column of their own in the store.

The job runs `run_eval_job` (process/evals_job.py) on the serving process's own engine and model client:
the embedded engine has one owner per data folder, so a second one must never be opened beside it. Its
line says the pass rate, cases, cost and the change from the previous recorded run; a knowledge-change
schedule whose knowledge did not change delivers nothing.
"""

from __future__ import annotations

import logging
import shlex
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from agent.app import AgentApp
from chats.eval_runs import EvalRun
from chats.schedules import INBOX, Cadence, Draft, Schedule, ScheduleError
from chats.state import ChatState
from process.evals_job import run_eval_job
from process.scheduler import Job

log = logging.getLogger(__name__)

COMMAND = ("agent", "evals", "job")
KNOWLEDGE_FLAG = "--when-knowledge-changes"


@dataclass(frozen=True)
class EvalSpec:
    """What an eval schedule runs: its suites (none: every suite in evals/suites), and whether only after
    the team's knowledge changed."""

    suites: tuple[str, ...] = ()
    when_knowledge_changes: bool = False

    def command(self) -> str:
        words = [*COMMAND, *(["--suite", *self.suites] if self.suites else [])]
        return shlex.join([*words, *([KNOWLEDGE_FLAG] if self.when_knowledge_changes else [])])

    @classmethod
    def of(cls, question: str) -> EvalSpec:
        """Read back from a schedule's question; ScheduleError for one `command` did not write."""
        try:
            words = shlex.split(question)
        except ValueError:
            words = []
        if tuple(words[: len(COMMAND)]) != COMMAND:
            raise ScheduleError(f"An eval schedule runs `{' '.join(COMMAND)} ...`, not {question[:80]!r}.")
        rest = words[len(COMMAND) :]
        knowledge = KNOWLEDGE_FLAG in rest
        rest = [w for w in rest if w != KNOWLEDGE_FLAG]
        if rest and (rest[0] != "--suite" or len(rest) == 1):
            raise ScheduleError(f"An eval schedule's options are --suite PATH... and {KNOWLEDGE_FLAG}.")
        return cls(tuple(rest[1:]), knowledge)

    def draft(self, cadence: Cadence, destination: str = INBOX) -> Draft:
        what = ", ".join(Path(s).stem for s in self.suites) or "all suites"
        when = " when the knowledge changes" if self.when_knowledge_changes else ""
        title = f"Evals ({what}){when}"
        return Draft(title=title, question=self.command(), cadence=cadence, destination=destination, kind="evals")


def eval_job(agent: AgentApp, state: ChatState) -> Job:
    """The job `Service.jobs["evals"]` fires: with the agent's own database and model client."""

    async def job(schedule: Schedule) -> str | None:
        spec = EvalSpec.of(schedule.draft.question)
        previous = await state.eval_runs.runs(limit=1)
        done = await run_eval_job(
            agent.settings,
            state,
            suites=[Path(s) for s in spec.suites] or None,
            trigger="knowledge" if spec.when_knowledge_changes else "schedule",
            when_knowledge_changes=spec.when_knowledge_changes,
            db=agent.db,
            llm=agent.llm,
        )
        if not done.ran or done.run is None:
            log.info("evals schedule %s: not run: %s", schedule.id, done.why)
            return None
        return result_line(done.run, previous[0] if previous else None)

    return job


def result_line(run: EvalRun, previous: EvalRun | None) -> str:
    """ "Evals: pass rate 90.0% (18 of 20 cases), cost $0.0421; up 5.0 points from 85.0% (Mon 28 Mar)."""
    cost = f"${run.cost_usd:.4f}" if run.cost_usd is not None else "cost not priced"
    line = f"Evals: pass rate {100 * run.pass_rate:.1f}% ({run.passed} of {run.total} cases), {cost}"
    if previous is None:
        return f"{line}; the first recorded run."
    points = 100 * (run.pass_rate - previous.pass_rate)
    when = datetime.fromtimestamp(previous.finished_at, UTC).strftime("%a %d %b %H:%M UTC")
    if abs(points) < 0.05:
        return f"{line}; unchanged from the previous run ({when})."
    direction = "up" if points > 0 else "down"
    return f"{line}; {direction} {abs(points):.1f} points from {100 * previous.pass_rate:.1f}% ({when})."

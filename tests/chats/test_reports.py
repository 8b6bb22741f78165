"""The kit's store of reports (chats/reports.py) on both backends, and a report run through the run registry:
stored as running before the runner starts, as it ended before `done`, owned like the conversation it was
asked in (anyone else gets None, as for an id never seen)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

from agent.reports import Finding, Report, ReportOutcome, ReportRequest, ReportStatus
from agent.runner import Checkpoint, EventSink, RunResult, Turn, ignore_events
from chats.audiences import Audiences
from chats.durable import DurableRun, DurableRuns
from chats.people import Person
from chats.reports import FAILED, RUNNING
from chats.runs import RunRegistry
from chats.state import ChatState

ALICE, BOB = Person(id="email:alice@example.com"), Person(id="email:bob@example.com")


@pytest.fixture
def state(state_location: Path | str) -> Iterator[ChatState]:
    opened = ChatState(state_location)
    yield opened
    opened.close()


def _report(report_id: str, outcome: ReportOutcome = ReportOutcome.COMPLETE) -> Report:
    return Report(
        id=report_id,
        question="why did delays rise in July?",
        outcome=outcome,
        summary="Delays rose [Q1].",
        findings=[Finding(text="July averaged 20 minutes [Q1].", citations=["Q1"])],
    )


async def test_a_report_is_stored_running_then_as_it_ended_and_only_its_audience_reads_it(state: ChatState) -> None:
    reports, audiences = state.reports, Audiences()
    asked = ReportRequest()
    await reports.begin(
        "r1", run_id="run1", owner=ALICE.owner, interface="web", question="why?", request=asked, policy="analysts"
    )
    found = await reports.get("r1")
    assert found is not None and found.state == RUNNING and found.report is None and found.policy == "analysts"
    assert found.request == asked and await reports.checkpoint("r1") is None
    assert [r.id for r in await reports.running()] == ["r1"]

    assert await reports.save(_report("r1", ReportOutcome.PARTIAL), run_id="run1")
    assert await reports.readable("r1", BOB, audiences) is None, "another person: as for an id never seen"
    assert await reports.readable("nope", ALICE, audiences) is None
    mine = await reports.readable("r1", ALICE, audiences)
    assert mine is not None and mine.state == "partial" and mine.report is not None
    assert mine.report.findings[0].citations == ["Q1"] and await reports.running() == []
    assert await reports.get("r1", interface="slack") is None, "another interface's report is not there"

    # A Resume: running again by a new run, keeping the owner and what was written; it fails without a report.
    await reports.begin("r1", run_id="run2", owner=BOB.owner, interface="web", question="changed", request=asked)
    await reports.fail("r1", run_id="run2")
    resumed = await reports.get("r1")
    assert resumed is not None and resumed.state == FAILED and resumed.owner == ALICE.owner
    assert resumed.question == "why?" and resumed.report is not None and resumed.report.outcome == "partial"
    assert [r.id for r in await reports.of_owner(ALICE.owner)] == ["r1"] and await reports.of_owner(BOB.owner) == []


async def test_a_running_report_is_claimed_by_one_host_and_keeps_only_its_own_runs_checkpoints(
    state: ChatState,
) -> None:
    reports = state.reports
    await reports.begin("r2", run_id="gone", owner=ALICE.owner, interface="web", question="q", request=ReportRequest())
    await reports.keep_checkpoint("r2", "gone", Checkpoint(question="q", rounds=2))
    await reports.keep_checkpoint("r2", "another", Checkpoint(question="q", rounds=9))  # not the report's run
    saved = await reports.checkpoint("r2")
    assert saved is not None and saved.rounds == 2
    claims = await asyncio.gather(*(reports.claim("r2", from_run="gone", to_run=f"host{n}") for n in range(3)))
    assert sorted(claims) == [False, False, True], "exactly one host takes a report over"


async def test_a_host_that_lost_a_durable_report_run_writes_neither_its_checkpoint_nor_its_delivery(
    state: ChatState,
) -> None:
    """A takeover keeps the run id, so only the durable run's holder tells the host that took the run over
    from the one that froze: the report's writes are fenced by it (the review's finding 4)."""
    reports = state.reports
    await reports.begin("r3", run_id="run3", owner=ALICE.owner, interface="web", question="q", request=ReportRequest())
    kept = DurableRun("run3", "c1", "web", "web", "q")
    await DurableRuns(state.file, lease_s=30.0, host="taker").begin(kept)
    await reports.keep_checkpoint("r3", "run3", Checkpoint(question="q", rounds=2), holder="taker")
    await reports.keep_delivery("r3", "run3", {"thread": "taker's"}, holder="taker")
    await reports.keep_checkpoint("r3", "run3", Checkpoint(question="q", rounds=9), holder="frozen")
    await reports.keep_delivery("r3", "run3", {"thread": "frozen's"}, holder="frozen")
    saved, stored = await reports.checkpoint("r3"), await reports.get("r3")
    assert saved is not None and saved.rounds == 2, "the frozen host's checkpoint went into the report"
    assert stored is not None and stored.delivery == {"thread": "taker's"}


class ReportingRunner:
    """A Runner that writes the report it is asked for (and records the request), or raises."""

    def __init__(self, *, raises: bool = False) -> None:
        self.requests: list[ReportRequest | None] = []
        self.raises = raises
        self.seen_running: list[str] = []

    async def run(
        self,
        question: str,
        *,
        history: Sequence[Turn] = (),
        platform: Any = "cli",
        interface: Any = "cli",
        on_event: EventSink = ignore_events,
        followups: bool = True,
        policy: Any = None,
        checkpoint: Any = None,
        resume: Any = None,
        report: ReportRequest | None = None,
    ) -> RunResult:
        self.requests.append(report)
        if self.raises:
            raise RuntimeError("a bug")
        assert report is not None
        return RunResult(question=question, answer="Delays rose [Q1].", report=_report(report.report_id))


async def test_a_report_run_through_the_registry_is_stored_before_done_and_done_says_how_it_ended(
    state: ChatState,
) -> None:
    runner = ReportingRunner()
    runs = RunRegistry(runner, state.conversations)
    conversation = await state.conversations.create_conversation("why?", owner=ALICE.owner)
    handle = runs.start(conversation, "why?", [], platform="web", interface="web", report=ReportRequest())
    assert handle.report_id == handle.run_id, "a new report is named by its run, known at once"
    events = [event async for event in runs.follow(handle)]
    assert runner.requests[0] is not None and runner.requests[0].report_id == handle.report_id

    done = events[-1].body
    assert done.type == "done" and done.result is not None
    assert done.result.report == ReportStatus(id=handle.report_id, outcome=ReportOutcome.COMPLETE, findings=1)
    stored = await runs.reports.readable(handle.report_id, ALICE, Audiences())
    assert stored is not None and stored.report is not None and stored.owner == ALICE.owner
    assert stored.conversation_id == conversation and stored.run_id == handle.run_id

    # A Resume of the same report: a new run, the same report id.
    again = runs.start(
        conversation, "why?", [], platform="web", interface="web", report=ReportRequest(report_id=handle.report_id)
    )
    await asyncio.wait_for(handle_done(runs, again), 30)
    assert again.report_id == handle.report_id != again.run_id
    resumed = await state.reports.get(handle.report_id)
    assert resumed is not None and resumed.run_id == again.run_id


async def test_an_answer_run_passes_no_report_and_a_failed_report_run_is_stored_failed(state: ChatState) -> None:
    runner = ReportingRunner(raises=True)
    runs = RunRegistry(runner, state.conversations)
    conversation = await state.conversations.create_conversation("why?", owner=ALICE.owner)
    answer = runs.start(conversation, "hi", [], platform="web", interface="web")
    await handle_done(runs, answer)
    assert runner.requests == [None] and answer.report_id == ""
    failed = runs.start(conversation, "why?", [], platform="web", interface="web", report=ReportRequest())
    await handle_done(runs, failed)
    stored = await state.reports.get(failed.report_id)
    assert stored is not None and stored.state == FAILED


async def handle_done(runs: RunRegistry, handle: Any) -> None:
    async for _ in runs.follow(handle):
        pass


async def test_a_report_row_this_release_cannot_read_breaks_nothing_but_itself(state: ChatState, make_app: Any) -> None:
    """A column torn, tampered with or in another release's shape made `_stored` raise: its owner's whole
    list of reports and its page failed (500), and every restart's resume stopped at it. Now the row reads
    without that column (a finished report that lost its text reads as failed), the others read whole, and
    a running one that cannot be resumed is ended rather than left running for ever."""
    from chats.report_runs import ReportRuns

    reports, audiences = state.reports, Audiences()
    for report_id in ("whole", "text", "asked", "delivery", "running"):
        await reports.begin(
            report_id,
            run_id=f"run-{report_id}",
            owner=ALICE.owner,
            interface="web",
            question="why?",
            request=ReportRequest(),
            delivery={"channel": "C1"},
        )
        if report_id != "running":
            assert await reports.save(_report(report_id), run_id=f"run-{report_id}")

    def tear(report_id: str, column: str, value: str) -> None:
        reports._file.now(lambda c: c.execute(f"UPDATE reports SET {column} = ? WHERE id = ?", (value, report_id)))

    tear("text", "report", '{"id": "text", "outcome": "complete", "summary": ')
    tear("asked", "request", '{"budget": {"queries": "many"}}')
    tear("delivery", "delivery", "[1, 2]")
    tear("running", "request", "{not json")

    listed = {r.id: r for r in await reports.of_owner(ALICE.owner)}
    assert set(listed) == {"whole", "text", "asked", "delivery", "running"}
    assert not listed["whole"].torn and listed["whole"].report is not None and listed["whole"].state == "complete"
    assert listed["text"].torn and listed["text"].report is None and listed["text"].state == FAILED
    assert listed["asked"].torn and listed["asked"].request is None and listed["asked"].report is not None
    assert listed["delivery"].torn and listed["delivery"].delivery == {} and listed["delivery"].state == "complete"
    shown = await reports.readable("text", ALICE, audiences)
    assert shown is not None and shown.state == FAILED and await reports.readable("text", BOB, audiences) is None

    assert [r.id for r in await reports.running()] == ["running"]
    runs = RunRegistry(make_app().runner, state.conversations)
    assert await ReportRuns(runs).resume_unfinished(lambda name: None) == []
    ended = await reports.get("running")
    assert ended is not None and ended.state == FAILED and await reports.running() == []

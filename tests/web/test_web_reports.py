"""Reports in the web over HTTP, against a real server: the chat's Report choice (POST /api/reports) streams
the report's steps and ends with it; its page's API gives its sections, figures and the page of every query
it cites; its downloads are a PDF and a Markdown file; and it is its asker's alone: another person, and a
report asked in Slack, answer byte for byte as an id never seen."""

from __future__ import annotations

import subprocess
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import httpx
import pytest

from agent.app import AgentApp
from agent.db import Database
from agent.reports.model import ReportRequest
from chats.people import channel_owner
from tests.agent.pipeline.test_checkpoints import CountingDatabase
from tests.fakes.anthropic_api import FakeAnthropic
from tests.report_helpers import partial_then_resumed_script, report_script
from tests.web.people_helpers import PROXY_MODE, Served, said
from tests.web_helpers import read_all

ALICE, BOB = "alice@example.com", "bob@example.com"


@pytest.fixture
async def served(make_app: Callable[..., AgentApp], tmp_path: Path) -> AsyncIterator[tuple[Served, Served]]:
    async with (
        Served(make_app, tmp_path / "ours", **PROXY_MODE) as ours,
        Served(make_app, tmp_path / "twin", **PROXY_MODE) as twin,
    ):
        yield ours, twin


async def ask_report(client: httpx.AsyncClient, message: str) -> list:
    async with client.stream("POST", "/api/reports", json={"message": message}) as response:
        assert response.status_code == 200 and response.headers["content-type"].startswith("text/event-stream")
        return await read_all(response)


def images_in(pdf: bytes, tmp_path: Path) -> int:
    """How many images the PDF holds, as poppler's pdfimages lists them."""
    path = tmp_path / "report.pdf"
    path.write_bytes(pdf)
    listed = subprocess.run(["pdfimages", "-list", str(path)], capture_output=True, text=True, check=True, timeout=60)
    return len(listed.stdout.splitlines()[2:])  # after its two header lines, one line an image


async def test_a_report_from_the_chat_streams_its_steps_and_its_page_reads_it_back(
    served: tuple[Served, Served], fake_anthropic: FakeAnthropic, tmp_path: Path
) -> None:
    ours, _ = served
    fake_anthropic.script(*report_script())
    alice = ours.client(email=ALICE)
    events = await ask_report(alice, "why did delays rise in July?")
    steps = [(e.data["number"], e.data["state"]) for e in events if e.event == "step"]
    assert steps == [(1, "running"), (1, "done"), (2, "running"), (2, "done"), (3, "running"), (3, "done")]
    done = events[-1].data["result"]
    assert done["report"]["outcome"] == "complete" and done["report"]["unverified"] == 1
    report_id, run_id = done["report"]["id"], events[0].data["run_id"]

    conversation_id = events[0].data["conversation_id"]
    [turn] = (await alice.get(f"/api/conversations/{conversation_id}")).json()["turns"]
    assert turn["report"] == done["report"] and turn["report"]["findings"] == 3, "a reopened chat links it"

    stored = (await alice.get(f"/api/reports/{report_id}")).json()
    report = stored["report"]
    assert (stored["state"], stored["question"]) == ("complete", "why did delays rise in July?")
    assert report["summary"].startswith("Departure delays peaked in July at 21.7 minutes")
    assert [f["chart"] for f in report["findings"]] == ["C1", None, None]
    assert [m["text"] for f in report["findings"] for m in f["marks"]] == ["9.2"], "the one figure that is no cell"
    assert stored["query_pages"] == {"Q1": f"{run_id}-Q1", "Q2": f"{run_id}-Q2"}
    page = (await alice.get(f"/api/queries/{stored['query_pages']['Q2']}")).json()
    assert page["question"] == "July's delays per origin airport" and page["row_count"] == 3

    markdown = await alice.get(f"/api/reports/{report_id}.md")
    pdf = await alice.get(f"/api/reports/{report_id}.pdf", timeout=150)  # its chart renders in a process of its own
    assert markdown.headers["content-type"].startswith("text/markdown")
    assert 'filename="why-did-delays-rise-in-july.md"' in markdown.headers["content-disposition"]
    assert "21.7" in markdown.text and "SELECT month" in markdown.text
    assert pdf.headers["content-type"] == "application/pdf" and pdf.content.startswith(b"%PDF-")
    assert images_in(pdf.content, tmp_path) == 1, "the chart C1 drawn in the PDF, not only named"


async def test_a_report_is_its_askers_alone_and_the_webs_alone(
    served: tuple[Served, Served], fake_anthropic: FakeAnthropic
) -> None:
    ours, twin = served
    fake_anthropic.script(*report_script())
    alice, bob, bob_at_twin = ours.client(email=ALICE), ours.client(email=BOB), twin.client(email=BOB)
    report_id = (await ask_report(alice, "why did delays rise in July?"))[-1].data["result"]["report"]["id"]
    asked = len(fake_anthropic.requests)
    for path in (f"/api/reports/{report_id}", f"/api/reports/{report_id}.md", f"/api/reports/{report_id}.pdf"):
        theirs, never = await bob.get(path), await bob_at_twin.get(path)
        assert theirs.status_code == 404 and said(theirs) == said(never), path
    resumed = await bob.post("/api/reports", json={"resume": report_id})
    never = await bob_at_twin.post("/api/reports", json={"resume": report_id})
    assert resumed.status_code == 404 and said(resumed) == said(never)
    assert len(fake_anthropic.requests) == asked, "nothing was asked for Bob"

    # A report asked in a Slack channel, in the same file: not the web's, whoever asks.
    store, runs = ours.state.conversations, ours.app.state.web.runs
    owner = channel_owner("T0TEAM0001", "C0FINANCE1")
    conversation_id = await store.create_conversation("q", key="slack:T:C:1.0", interface="slack", owner=owner)
    await runs.reports.begin("f" * 32, run_id="f" * 32, owner=owner, interface="slack", question="q",
                             conversation_id=conversation_id, request=ReportRequest())  # fmt: skip
    for client, at_twin in ((alice, twin.client(email=ALICE)), (bob, bob_at_twin)):
        theirs, never = await client.get(f"/api/reports/{'f' * 32}"), await at_twin.get(f"/api/reports/{'f' * 32}")
        assert theirs.status_code == 404 and said(theirs) == said(never)
    assert (await alice.get(f"/api/reports/{report_id}")).status_code == 200, "Alice still opens hers"


async def test_a_report_page_shell_opens_only_for_a_reports_id(served: tuple[Served, Served]) -> None:
    ours, _ = served
    browser = ours.client(email=ALICE, Accept="text/html")
    shell = await browser.get(f"/reports/{'a' * 32}")
    mistyped = await browser.get("/reports/not-an-id.pdf")
    assert shell.status_code == 200 and 'data-page="report"' in shell.text and "report.js" in shell.text
    assert mistyped.status_code == 404 and "a report&#39;s page is /reports/&lt;id&gt;" in mistyped.text


async def test_a_partial_report_resumes_from_the_web_without_running_its_queries_again(
    make_app: Callable[..., AgentApp], tmp_path: Path, fake_anthropic: FakeAnthropic, db: Database
) -> None:
    counting = CountingDatabase(db)
    first, resumed = partial_then_resumed_script()
    fake_anthropic.script(*first)
    async with Served(make_app, tmp_path, database=counting, agent_report_max_queries=2, **PROXY_MODE) as ours:
        alice = ours.client(email=ALICE)
        report = (await ask_report(alice, "why did delays rise in July?"))[-1].data["result"]["report"]
        assert (report["outcome"], len(counting.executed)) == ("partial", 2)
        fake_anthropic.reset()
        fake_anthropic.script(*resumed)
        async with alice.stream("POST", "/api/reports", json={"resume": report["id"]}) as response:
            assert response.status_code == 200, await response.aread()
            events = await read_all(response)
        assert [e.data["number"] for e in events if e.event == "step"] == [2, 2]
        assert events[-1].data["result"]["report"]["outcome"] == "complete"
        assert len(counting.executed) == 3 and "nycflights13.weather" in counting.executed[2], "Q1, Q2 not again"
        stored = (await alice.get(f"/api/reports/{report['id']}")).json()
        assert stored["state"] == "complete" and len(stored["report"]["runs"]) == 2
        assert set(stored["query_pages"]) == {"Q1", "Q2", "Q3"}
        turns = (await alice.get(f"/api/conversations/{events[0].data['conversation_id']}")).json()["turns"]
        assert [t["report"]["id"] for t in turns] == [report["id"]] * 2, "both runs' turns link the report"
        again = await alice.post("/api/reports", json={"resume": report["id"]})
        assert again.status_code == 409 and "not partial" in again.json()["error"]

"""The web serves only what the web made. A Slack thread stored in the same file (by the bot, as `agent
serve` runs it beside the web chat) is not there for the web API: reading, continuing, deleting, following
or thumbing it answers exactly as an id never seen, which a web app over an empty file shows. The one door
is the query page a Slack answer links to, which gives that query alone.

The attacker replays the chain a Slack answer's link opens: the link's run id, the run's events (which
named its conversation), the conversation, a web turn in it, its deletion, a thumb on it."""

from __future__ import annotations

import asyncio
import re
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any, Literal

import httpx
import pytest

from agent.app import AgentApp
from bots.slack.receive import conversation_key
from chats.conversations import ConversationStore
from chats.people import LOCAL, person_owner
from process.service import Service
from tests.fakes.anthropic_api import FakeAnthropic, Hang, Reply
from tests.fakes.slack_api import GENERAL_ID, FakeSlack
from tests.fakes.slack_events import new_ts
from tests.fakes.slack_workspace import TEAM_ID
from tests.slack_helpers import SlackHarness, carriers_script
from tests.web_helpers import LiveServer, WebApps, chat

WEB = "https://analyst.example"
QUERY_FIELDS = {
    "id", "label", "query_id", "question", "sql", "columns", "rows", "row_count", "has_more", "error", "hint",
    "elapsed_ms", "run_id", "asked", "answered_at",
}  # fmt: skip
UNSEEN_HEADERS = {"date", "server"}  # what may differ between two responses that say the same


@pytest.fixture
async def slack(
    make_app: Callable[..., AgentApp], fake_slack: FakeSlack, tmp_path: Path
) -> AsyncIterator[SlackHarness]:
    """The bot and the web chat on one socket and one conversation file, as `agent serve` runs them."""
    harness = await SlackHarness(make_app, fake_slack, tmp_path).start(agent_web_url=WEB)
    yield harness
    await harness.stop()


@pytest.fixture
async def unknown(make_app: Callable[..., AgentApp], tmp_path: Path) -> AsyncIterator[httpx.AsyncClient]:
    """The same web app over an empty file: how it answers an id it has never seen."""
    apps = WebApps(make_app, tmp_path / "empty")
    url, _ = await apps.start(store_path=tmp_path / "empty" / "state.sqlite3")
    async with httpx.AsyncClient(base_url=url, timeout=30) as client:
        yield client
    await apps.close()


def linked_queries(fake: FakeSlack) -> list[str]:
    """The web links Slack's plan gave its tasks (`<AGENT_WEB_URL>/queries/<run>-Qn`), as the thread shows them."""
    calls = fake.calls("chat.startStream") + fake.calls("chat.appendStream")
    chunks = [chunk for c in calls if c.ok for chunk in c.args.get("chunks") or [] if chunk["type"] == "task_update"]
    return [source["url"] for chunk in chunks for source in chunk.get("sources") or []]


async def slack_answer(slack: SlackHarness, fake_anthropic: FakeAnthropic) -> tuple[str, str, str]:
    """A question answered in a Slack thread: its query's id (from the answer's link), the run's id, and the
    conversation's id (which the attacker no longer learns; the test reads it from the file)."""
    fake_anthropic.script(*carriers_script())
    asked = await slack.ask("which carrier flew the most?")
    [link] = linked_queries(slack.fake)
    query_id = link.removeprefix(f"{WEB}/queries/")
    run_id = query_id.rsplit("-", 1)[0]
    conversation_id = await store_of(slack).find(f"slack:{slack.fake.team_id}:{GENERAL_ID}:{asked}")
    assert conversation_id is not None
    return query_id, run_id, conversation_id


def store_of(slack: SlackHarness) -> ConversationStore:
    assert slack.service is not None
    return slack.service.store


def said(response: httpx.Response) -> tuple[int, dict[str, str], bytes]:
    headers = {name: value for name, value in response.headers.items() if name not in UNSEEN_HEADERS}
    return response.status_code, headers, response.content


async def both(
    ours: httpx.AsyncClient, unknown: httpx.AsyncClient, method: str, path: str, **request: Any
) -> tuple[httpx.Response, httpx.Response]:
    return await ours.request(method, path, **request), await unknown.request(method, path, **request)


async def test_a_slack_answers_link_opens_its_query_alone(slack: SlackHarness, fake_anthropic: FakeAnthropic) -> None:
    query_id, run_id, conversation_id = await slack_answer(slack, fake_anthropic)
    assert slack.http is not None
    page = await slack.http.get(f"/queries/{query_id}")
    shown = await slack.http.get(f"/api/queries/{query_id}")
    download = await slack.http.get(f"/api/queries/{query_id}.csv")
    assert page.status_code == 200 and shown.status_code == 200 and download.status_code == 200
    query = shown.json()
    assert set(query) == QUERY_FIELDS and query["run_id"] == run_id and query["asked"] == "which carrier flew the most?"
    assert query["sql"].startswith("SELECT carrier, count() AS n") and query["rows"][0] == ["UA", 58665]
    assert conversation_id not in shown.text and GENERAL_ID not in shown.text and "slack:" not in shown.text
    assert download.text.splitlines()[:2] == ["carrier,n", "UA,58665"]


async def test_the_chain_from_a_slack_link_ends_at_its_query(
    slack: SlackHarness, unknown: httpx.AsyncClient, fake_anthropic: FakeAnthropic
) -> None:
    query_id, run_id, conversation_id = await slack_answer(slack, fake_anthropic)
    before = await store_of(slack).get_conversation(conversation_id)
    asked_model = len(fake_anthropic.requests)
    web = slack.http
    assert web is not None
    steps = [
        ("GET", f"/api/runs/{run_id}/events", {}),
        ("GET", f"/api/conversations/{conversation_id}", {}),
        ("POST", "/api/chat", {"json": {"message": "And the rest of the thread?", "conversation_id": conversation_id}}),
        ("POST", f"/api/runs/{run_id}/feedback", {"json": {"value": "down", "reason": "Poisoned."}}),
        ("DELETE", f"/api/conversations/{conversation_id}", {}),
    ]
    for method, path, request in steps:
        ours, theirs = await both(web, unknown, method, path, **request)
        assert ours.status_code == 404, (method, path, ours.text)
        assert said(ours) == said(theirs), (method, path)
    listed, none = await both(web, unknown, "GET", "/api/conversations")
    assert listed.json() == none.json() == {"conversations": []}
    assert len(fake_anthropic.requests) == asked_model, "no web turn was asked in the Slack thread"
    assert await store_of(slack).get_conversation(conversation_id) == before, "neither deleted, thumbed nor continued"
    assert await slack.service.state.proposals.pending() == [], "no thumb proposed anything"
    assert (await web.get(f"/api/queries/{query_id}")).status_code == 200, "the link itself still opens"


async def test_every_route_answers_a_slack_id_as_one_never_seen(
    slack: SlackHarness, unknown: httpx.AsyncClient, fake_anthropic: FakeAnthropic
) -> None:
    """Every route of the app with an id in its path, given each of the Slack thread's ids: only the query
    routes (the link's door) tell it from an id never seen."""
    query_id, run_id, conversation_id = await slack_answer(slack, fake_anthropic)
    assert slack.service is not None and slack.http is not None
    doors = {"/api/queries/{query_id}", "/api/queries/{query_id}.csv"}
    checked = []
    for route in slack.service.app.routes:
        path = getattr(route, "path", "")
        if "{" not in path or path.startswith("/static") or path in doors:
            continue
        for some_id in (query_id, run_id, conversation_id):
            filled = re.sub(r"\{[^}]+\}", some_id, path)
            for method in sorted((getattr(route, "methods", None) or {"GET"}) - {"HEAD"}):
                body = {"json": {"value": "up"}} if method == "POST" else {}
                ours, theirs = await both(slack.http, unknown, method, filled, **body)
                if path.startswith("/api/"):
                    assert said(ours) == said(theirs), (method, filled)
                else:  # a page: a shell the same for every id, but for the server's own address in it
                    assert ours.status_code == theirs.status_code, (method, filled)
                checked.append((method, path))
    assert {path for _, path in checked} >= {
        "/api/conversations/{conversation_id}", "/api/runs/{run_id}/events", "/api/runs/{run_id}/feedback",
    }  # fmt: skip


async def test_a_slack_run_in_progress_is_not_followed_from_the_web(
    slack: SlackHarness, unknown: httpx.AsyncClient, fake_anthropic: FakeAnthropic
) -> None:
    """The bot and the web share one registry in `agent serve`: a Slack run still running is not the web's."""
    assert slack.service is not None and slack.http is not None
    hang = Hang()
    fake_anthropic.script(hang)
    handle = await start_as_slack_does(slack.service, "which carrier flew the most?")
    try:
        ours = await opened(slack.http, f"/api/runs/{handle.run_id}/events")
        theirs = await unknown.get(f"/api/runs/{handle.run_id}/events")
    finally:
        hang.release.set()
    assert ours.status_code == 404 and said(ours) == said(theirs)


async def opened(client: httpx.AsyncClient, path: str) -> httpx.Response:
    """The response to a GET, read whole unless it is a stream (of a run that does not end here)."""
    async with client.stream("GET", path) as response:
        if not response.headers["content-type"].startswith("text/event-stream"):
            await response.aread()
        return response


async def start_as_slack_does(service: Service, question: str, *, interface: Literal["slack", "web"] = "slack") -> Any:
    """A run started with the kit as the bot starts one (bots/slack/answer.py): a conversation under its
    thread's key, a run of the Slack interface; or, with `interface="web"`, as the web chat starts one."""
    key = conversation_key(TEAM_ID, "G0PAYROLL01", new_ts()) if interface == "slack" else None
    owner = (
        person_owner(LOCAL) if interface == "web" else ""
    )  # the web's, where nobody signs in, are the local person's
    conversation_id = await service.store.create_conversation(question, key=key, interface=interface, owner=owner)
    return service.runs.start(conversation_id, question, [], platform=interface, interface=interface)


async def test_a_slack_run_in_another_worker_is_not_followed_from_the_web(
    make_app: Callable[..., AgentApp], fake_anthropic: FakeAnthropic, tmp_path: Path
) -> None:
    """With several workers, a page's reattach may reach a worker that does not run the answer: it follows the
    run through the shared file, the web's runs only."""
    owner_agent, reader_agent = make_app(agent_data_dir=tmp_path), make_app(agent_data_dir=tmp_path)
    owner = await Service.open(owner_agent.settings, web=True, slack=False, agent=owner_agent, workers=2)
    reader = await Service.open(reader_agent.settings, web=True, slack=False, agent=reader_agent, workers=2)
    hang = Hang()
    fake_anthropic.script(hang, hang)
    try:
        async with LiveServer(reader.app) as served, httpx.AsyncClient(base_url=served.url, timeout=30) as web:
            slack_run = await start_as_slack_does(owner, "which carrier flew the most?")
            web_run = await start_as_slack_does(owner, "and the least?", interface="web")
            for handle in (slack_run, web_run):
                await until_shared(owner, handle.run_id)
            refused = await opened(web, f"/api/runs/{slack_run.run_id}/events")
            async with web.stream("GET", f"/api/runs/{web_run.run_id}/events") as followed:
                assert followed.status_code == 200, "the web's own run is followed from any worker"
            never = await web.get(f"/api/runs/{'0' * 32}/events")
    finally:
        hang.release.set()
        await reader.close()
        await owner.close()
    assert refused.status_code == 404
    assert refused.content == never.content.replace(b"0" * 32, slack_run.run_id.encode())


async def until_shared(service: Service, run_id: str) -> None:
    shared = service.state.shared_runs
    assert shared is not None
    for _ in range(200):
        if await shared.find(run_id) is not None:
            return
        await asyncio.sleep(0.02)
    raise AssertionError(f"run {run_id} was never shared")


async def test_thumbs_have_a_budget_and_touch_only_the_webs_answers(
    slack: SlackHarness, fake_anthropic: FakeAnthropic
) -> None:
    _, slack_run, conversation_id = await slack_answer(slack, fake_anthropic)
    await slack.restart(agent_web_thumbs_per_minute=3)  # on the same file
    assert slack.http is not None
    fake_anthropic.script(Reply(text="There are 16 airlines."), Reply(text="[]"))
    web_run = (await chat(slack.http, "How many airlines?"))[0].data["run_id"]
    thumbs = [await slack.http.post(f"/api/runs/{run}/feedback", json={"value": "up"}) for run in [web_run, slack_run]]
    over = [await slack.http.post(f"/api/runs/{run}/feedback", json={"value": "up"}) for run in [web_run, "nope"]]
    assert [t.status_code for t in thumbs] == [200, 404]
    assert [o.status_code for o in over] == [200, 429], "the budget counts every thumb, found or not"
    assert over[1].json()["error"].startswith("Too many thumbs; try again in ")
    assert int(over[1].headers["Retry-After"]) > 0
    stored = await store_of(slack).get_conversation(conversation_id)
    assert stored is not None and stored["turns"][0]["feedback"] is None

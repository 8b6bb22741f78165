"""Two people at one web chat, told apart by a trusted proxy's identity header, over HTTP against a real
server: everything one asked (a conversation, its runs and their events, queries, their pages and CSVs,
charts, thumbs) answers the other exactly as an id never seen, which a twin server over an empty file
shows; the list shows one's own; budgets count people, not the address they share.

The steps that once read a Slack thread from the web (issue 26: the answer's link, its run's events, the
conversation, a turn added to it, its thumb, its deletion) are replayed by someone outside the channel,
and fail at every step; a member of the channel opens the link, and nothing else."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import httpx
import pytest

from agent.app import AgentApp
from bots.slack.receive import conversation_key
from chats.people import Person, channel_owner
from tests.fakes.anthropic_api import FakeAnthropic, Hang, Reply
from tests.fakes.slack_api import GENERAL_ID, HUMAN_EMAIL, FakeSlack
from tests.fakes.slack_events import new_ts
from tests.slack_helpers import SlackHarness, carriers_script
from tests.web.people_helpers import EMAIL_HEADER, PROXY_MODE, Served, said
from tests.web.test_web_contain import linked_queries
from tests.web_helpers import chat, sse_events

ALICE, BOB, CAROL = "alice@example.com", "bob@example.com", "carol@example.com"
TEAM, CHANNEL = "T0TEAM0001", "C0FINANCE1"
SITE = "https://analyst.example"  # AGENT_WEB_URL, which Slack's answers link to


class Members:
    """The Slack adapter's ChannelMembers, as a test double: who is in which channel now."""

    def __init__(self, members: dict[tuple[str, str], set[str]]) -> None:
        self.members, self.asked = members, 0

    async def member(self, channel: str, person: Person) -> tuple[str, str] | None:
        self.asked += 1
        found = [team for (team, there), people in self.members.items() if there == channel and person.email in people]
        return (found[0], f"U{person.email}") if found else None

    async def includes(self, team: str, channel: str, person: Person) -> bool:
        self.asked += 1
        return person.email in self.members.get((team, channel), set())


@pytest.fixture
async def served(make_app: Callable[..., AgentApp], tmp_path: Path) -> AsyncIterator[tuple[Served, Served, Members]]:
    """The chat where Alice, Bob and Carol sign in through the proxy (Carol is in #finance, Bob is not), and
    its twin over an empty file."""
    members = Members({(TEAM, CHANNEL): {CAROL}})
    async with (
        Served(make_app, tmp_path / "ours", channel_members=members, **PROXY_MODE) as ours,
        Served(make_app, tmp_path / "twin", channel_members=members, **PROXY_MODE) as twin,
    ):
        yield ours, twin, members


async def alices_answer(ours: Served, fake_anthropic: FakeAnthropic) -> tuple[str, str, str]:
    """Alice asks; her query's id, her run's and her conversation's."""
    fake_anthropic.script(*carriers_script())
    events = await chat(ours.client(email=ALICE), "which carrier flew the most?")
    run_id, conversation_id = events[0].data["run_id"], events[0].data["conversation_id"]
    return f"{run_id}-Q1", run_id, conversation_id


async def both(
    ours: httpx.AsyncClient, twin: httpx.AsyncClient, method: str, path: str, **request: Any
) -> tuple[httpx.Response, httpx.Response]:
    return await ours.request(method, path, **request), await twin.request(method, path, **request)


async def test_every_route_and_id_of_alices_answers_bob_as_never_seen(
    served: tuple[Served, Served, Members], fake_anthropic: FakeAnthropic
) -> None:
    ours, twin, _ = served
    ids = await alices_answer(ours, fake_anthropic)
    alice, bob, bob_at_twin = ours.client(email=ALICE), ours.client(email=BOB), twin.client(email=BOB)
    asked_model = len(fake_anthropic.requests)
    checked = set()
    for route in ours.app.routes:
        path = getattr(route, "path", "")
        if "{" not in path or path.startswith("/static"):
            continue
        for some_id in ids:
            filled = re.sub(r"\{[^}]+\}", some_id, path)
            for method in sorted((getattr(route, "methods", None) or {"GET"}) - {"HEAD"}):
                body = {"json": {"value": "down", "reason": "Bob's"}} if method == "POST" else {}
                theirs, never = await both(bob, bob_at_twin, method, filled, **body)
                if path.startswith("/api/"):
                    assert theirs.status_code == 404 and said(theirs) == said(never), (method, filled, theirs.text)
                else:  # a page: the same shell for every id
                    assert theirs.status_code == never.status_code, (method, filled)
                checked.add(path)
    assert checked >= {
        "/api/conversations/{conversation_id}", "/api/runs/{run_id}/events", "/api/runs/{run_id}/feedback",
        "/api/queries/{query_id}", "/api/queries/{query_id}.csv", "/queries/{query_id}", "/c/{conversation_id}",
    }  # fmt: skip
    query_id, run_id, conversation_id = ids
    continued, never = await both(
        bob, bob_at_twin, "POST", "/api/chat", json={"message": "and the rest?", "conversation_id": conversation_id}
    )
    assert continued.status_code == 404 and said(continued) == said(never)
    assert len(fake_anthropic.requests) == asked_model, "Bob's turn was never asked in Alice's conversation"
    for path in [f"/api/conversations/{conversation_id}", f"/api/runs/{run_id}/events", f"/api/queries/{query_id}"]:
        assert (await alice.get(path)).status_code == 200, f"Alice still opens {path}"
    kept = (await alice.get(f"/api/conversations/{conversation_id}")).json()
    assert len(kept["turns"]) == 1 and kept["turns"][0]["feedback"] is None, "Bob neither continued nor thumbed it"
    assert await ours.state.proposals.pending() == [], "Bob's thumb proposed nothing"


async def test_the_list_shows_ones_own(served: tuple[Served, Served, Members], fake_anthropic: FakeAnthropic) -> None:
    ours, _, _ = served
    _, _, alices = await alices_answer(ours, fake_anthropic)
    fake_anthropic.script(Reply(text="There are 16 airlines."), Reply(text="[]"))
    bobs = (await chat(ours.client(email=BOB), "How many airlines?"))[0].data["conversation_id"]
    listed = {
        who: [c["id"] for c in (await ours.client(email=who).get("/api/conversations")).json()["conversations"]]
        for who in (ALICE, BOB, CAROL)
    }
    assert listed == {ALICE: [alices], BOB: [bobs], CAROL: []}


async def test_a_run_in_progress_is_its_askers_alone(
    served: tuple[Served, Served, Members], fake_anthropic: FakeAnthropic
) -> None:
    ours, twin, _ = served
    hang = Hang()
    fake_anthropic.script(hang)
    alice = ours.client(email=ALICE)
    try:
        async with alice.stream("POST", "/api/chat", json={"message": "which carrier flew the most?"}) as stream:
            started = await anext(sse_events(stream))
            run_id = started.data["run_id"]
            theirs, never = await both(
                ours.client(email=BOB), twin.client(email=BOB), "GET", f"/api/runs/{run_id}/events"
            )
            async with alice.stream("GET", f"/api/runs/{run_id}/events") as followed:
                assert followed.status_code == 200, "Alice follows her own run from another tab"
    finally:
        hang.release.set()
    assert theirs.status_code == 404 and said(theirs) == said(never)


async def test_budgets_count_people_not_the_address_they_share(
    make_app: Callable[..., AgentApp], tmp_path: Path, fake_anthropic: FakeAnthropic
) -> None:
    """Alice and Bob reach the server from one address (the proxy's): each has a question a minute."""
    fake_anthropic.script(*[Reply(text="16 airlines.") if i % 2 == 0 else Reply(text="[]") for i in range(4)])
    async with Served(make_app, tmp_path, agent_web_rate_per_minute=1, **PROXY_MODE) as ours:
        alice, bob = ours.client(email=ALICE), ours.client(email=BOB)
        first = await alice.post("/api/chat", json={"message": "How many airlines?"})
        again = await alice.post("/api/chat", json={"message": "How many airlines?"})
        bobs = await bob.post("/api/chat", json={"message": "How many airlines?"})
        refusals = [e for e in await ours.state.audit.entries() if e.outcome.startswith("refused")]
    assert [first.status_code, again.status_code, bobs.status_code] == [200, 429, 200]
    # the refused question still leaves its entry, naming its asker (refused before its body was read)
    assert [(e.person, e.interface, e.outcome, e.question) for e in refusals] == [
        (f"person:email:{ALICE}", "web", "refused: rate_limited", "")
    ]


async def test_the_chain_from_a_slack_link_fails_at_every_step_for_someone_outside_the_channel(
    served: tuple[Served, Served, Members], fake_anthropic: FakeAnthropic
) -> None:
    """An answer asked in #finance, stored as the Slack adapter stores it (the channel owns it). Carol, in the
    channel, opens its link (the query, its page and CSV) and nothing more of the thread; Bob, forwarded the
    link, is answered at every step as for ids never seen."""
    ours, twin, members = served
    query_id, run_id, conversation_id = await slack_answer(ours, fake_anthropic)
    before = await ours.state.conversations.get_conversation(conversation_id)
    asked_model = len(fake_anthropic.requests)
    carol, bob, bob_at_twin = ours.client(email=CAROL), ours.client(email=BOB), twin.client(email=BOB)
    opened = [await carol.get(path) for path in (f"/api/queries/{query_id}", f"/api/queries/{query_id}.csv")]
    assert [o.status_code for o in opened] == [200, 200] and opened[1].text.splitlines()[1] == "UA,58665"
    steps = [
        ("GET", f"/api/queries/{query_id}", {}),
        ("GET", f"/api/queries/{query_id}.csv", {}),
        ("GET", f"/api/runs/{run_id}/events", {}),
        ("GET", f"/api/conversations/{conversation_id}", {}),
        ("POST", "/api/chat", {"json": {"message": "And the rest of the thread?", "conversation_id": conversation_id}}),
        ("POST", f"/api/runs/{run_id}/feedback", {"json": {"value": "down", "reason": "Poisoned."}}),
        ("DELETE", f"/api/conversations/{conversation_id}", {}),
    ]
    for method, path, request in steps:
        theirs, never = await both(bob, bob_at_twin, method, path, **request)
        assert theirs.status_code == 404 and said(theirs) == said(never), (method, path, theirs.text)
    for method, path, request in steps[2:]:  # past the link, not even the channel's members
        theirs, never = await both(carol, twin.client(email=CAROL), method, path, **request)
        assert theirs.status_code == 404 and said(theirs) == said(never), (method, path, theirs.text)
    assert len(fake_anthropic.requests) == asked_model, "no web turn was asked in the Slack thread"
    assert await ours.state.conversations.get_conversation(conversation_id) == before, "untouched"
    assert members.asked >= 4, "the channel's members were asked each time the link was opened"


async def slack_answer(ours: Served, fake_anthropic: FakeAnthropic) -> tuple[str, str, str]:
    """A question answered in a Slack channel, stored through the kit as the bot stores it: a conversation
    under its thread's key, owned by the channel, and a run of the Slack interface."""
    fake_anthropic.script(*carriers_script())
    store, runs = ours.state.conversations, ours.app.state.web.runs
    key = conversation_key(TEAM, CHANNEL, new_ts())
    owner = channel_owner(TEAM, CHANNEL)
    conversation_id = await store.create_conversation("which carrier?", key=key, interface="slack", owner=owner)
    handle = runs.start(conversation_id, "which carrier flew the most?", [], platform="slack", interface="slack")
    assert handle.task is not None
    await handle.task
    return f"{handle.run_id}-Q1", handle.run_id, conversation_id


async def test_the_proxys_header_counts_only_from_the_proxy(
    make_app: Callable[..., AgentApp], tmp_path: Path, fake_anthropic: FakeAnthropic
) -> None:
    """From a peer not listed, the header is anyone's to write: it is ignored. Behind a listed proxy that also
    forwards the client's address (AGENT_WEB_TRUSTED_PROXIES), the header still counts."""
    elsewhere = {**PROXY_MODE, "agent_web_identity_proxies": "10.0.0.0/8"}
    async with Served(make_app, tmp_path / "a", **elsewhere) as ours:
        forged = await ours.client(email=ALICE).get("/api/me")
    forwarded = {**PROXY_MODE, "agent_web_trusted_proxies": "127.0.0.1"}
    async with Served(make_app, tmp_path / "b", **forwarded) as ours:
        me = await ours.client(email=ALICE, **{"X-Forwarded-For": "203.0.113.9"}).get("/api/me")
        nobody = await ours.client().get("/api/me")
        twice = await ours.client().get("/api/me", headers=[(EMAIL_HEADER, BOB), (EMAIL_HEADER, ALICE)])
    assert forged.status_code == 401 and nobody.status_code == 401 and twice.status_code == 401
    assert me.status_code == 200 and me.json()["id"] == f"email:{ALICE}" and me.json()["signed_in_with"] == "proxy"


async def test_changes_under_a_proxys_sign_in_come_from_our_own_pages(
    served: tuple[Served, Served, Members], fake_anthropic: FakeAnthropic
) -> None:
    """The proxy's sign-in rides on its own cookie, which any site's form would send along: a change needs
    this site's Origin."""
    ours, _, _ = served
    fake_anthropic.script(Reply(text="16 airlines."), Reply(text="[]"))
    body = {"message": "How many airlines?"}
    cross = await ours.client(email=ALICE, origin=False, Origin="https://evil.example").post("/api/chat", json=body)
    missing = await ours.client(email=ALICE, origin=False).post("/api/chat", json=body)
    assert (cross.status_code, missing.status_code) == (403, 403)
    assert (await ours.client(email=ALICE).post("/api/chat", json=body)).status_code == 200
    assert EMAIL_HEADER.lower() not in cross.text


async def test_a_slack_channels_link_opens_for_its_signed_in_members_alone(
    make_app: Callable[..., AgentApp], fake_slack: FakeSlack, fake_anthropic: FakeAnthropic, tmp_path: Path
) -> None:
    """End to end, as `agent serve` runs the bot and the web chat together: a question asked in #general, the
    link its answer gives, opened on the web by Alice (in #general: Slack says so, by her verified email) and
    by Bob (in the workspace, not in the channel), who is answered as for ids never seen at every step."""
    fake_slack.workspace.add_user("U0BOB00001", "bob", real_name="Bob", email=BOB)
    harness = await SlackHarness(make_app, fake_slack, tmp_path / "serve").start(agent_web_url=SITE, **PROXY_MODE)
    try:
        fake_anthropic.script(*carriers_script())
        asked = await harness.ask("which carrier flew the most?")
        [link] = linked_queries(fake_slack)
        query_id = link.removeprefix(f"{SITE}/queries/")
        run_id = query_id.rsplit("-", 1)[0]
        assert harness.service is not None and harness.http is not None
        conversation_id = await harness.service.store.find(f"slack:{fake_slack.team_id}:{GENERAL_ID}:{asked}")
        assert conversation_id is not None
        base = str(harness.http.base_url)
        async with (
            httpx.AsyncClient(base_url=base, headers={EMAIL_HEADER: HUMAN_EMAIL, "Origin": base}) as alice,
            httpx.AsyncClient(base_url=base, headers={EMAIL_HEADER: BOB, "Origin": base}) as bob,
            Served(make_app, tmp_path / "twin", **PROXY_MODE) as twin,
        ):
            opened = [await alice.get(f"/api/queries/{query_id}"), await alice.get(f"/api/queries/{query_id}.csv")]
            bob_at_twin = twin.client(email=BOB)
            refused = [
                await both(bob, bob_at_twin, method, path, **request)
                for method, path, request in [
                    ("GET", f"/api/queries/{query_id}", {}),
                    ("GET", f"/api/queries/{query_id}.csv", {}),
                    ("GET", f"/api/runs/{run_id}/events", {}),
                    ("GET", f"/api/conversations/{conversation_id}", {}),
                    ("POST", "/api/chat", {"json": {"message": "More?", "conversation_id": conversation_id}}),
                    ("POST", f"/api/runs/{run_id}/feedback", {"json": {"value": "down"}}),
                    ("DELETE", f"/api/conversations/{conversation_id}", {}),
                ]
            ]
    finally:
        await harness.stop()
    assert [o.status_code for o in opened] == [200, 200] and opened[1].text.splitlines()[1] == "UA,58665"
    for theirs, never in refused:
        assert theirs.status_code == 404 and said(theirs) == said(never), (theirs.request.url, theirs.text)
    assert fake_slack.calls("conversations.members"), "membership was asked of Slack"


async def test_the_daily_budget_is_each_persons(
    make_app: Callable[..., AgentApp], tmp_path: Path, fake_anthropic: FakeAnthropic
) -> None:
    """Alice spends her day's budget; Bob, behind the same proxy address, still asks."""
    fake_anthropic.always(Reply(text="ok"))
    async with Served(make_app, tmp_path, agent_daily_user_tokens=1, **PROXY_MODE) as ours:
        alice, bob = ours.client(email=ALICE), ours.client(email=BOB)
        await chat(alice, "hello")  # answered: the question that crosses the budget is the last
        refused = await alice.post("/api/chat", json={"message": "hello again"})
        bobs = await bob.post("/api/chat", json={"message": "hello"})
        refusals = [e for e in await ours.state.audit.entries() if e.outcome.startswith("refused")]
    assert refused.status_code == 429 and refused.json()["error"].startswith("You have used today's budget")
    assert [(e.person, e.outcome, e.question) for e in refusals] == [
        (f"person:email:{ALICE}", "refused: over_budget", "hello again")
    ]
    assert bobs.status_code == 200

"""An outside review's attacks on scheduled questions, alerts and the inbox over HTTP (web/views/schedules.py,
web/views/inbox.py, web/views/schedule_requests.py), against a real server where people sign in through a
trusted proxy, and the scheduler (process/scheduler.py) firing over the same state.

Findings (these fail on the code as reviewed): a schedule keeps the OIDC groups its owner had when they
made it, so taking a person out of the group that grants a policy does not stop their schedules, which go
on delivering that policy's rows; the web takes a cadence that fires every minute; the web makes a schedule
into a Slack channel whose policy does not cover its rows (Slack's modal refuses it); a delivery older than
the newest 1,000 cannot be opened or deleted by its owner. Attacks that held (these pass): the inbox page's
address is never reflected into the page; a delivery's text (data values, a question) reaches the browser
only as JSON, never as HTML the server wrote; schedules' changes need JSON of a bounded size; the turn a
delivery is stored as is its owner's alone."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from prometheus_client import CollectorRegistry

from agent.app import AgentApp
from agent.metrics import Metrics
from agent.prompts import prompt_library
from chats.schedule_deliveries import InboxOutlet
from chats.schedule_runs import FireMaker
from chats.schedules import INBOX, Delivery, ScheduleStore
from process.scheduler import Scheduler
from tests.fakes.anthropic_api import FakeAnthropic
from tests.slack_helpers import carriers_script
from tests.web.people_helpers import GROUPS_HEADER, PROXY_MODE, Served
from tests.web.test_schedules import ALICE, alices_run, daily, made
from tests.web.test_web_people import CHANNEL, TEAM, Members
from tests.web_helpers import chat

ALICE_OWNER = f"person:email:{ALICE}"
GROUP_POLICY = """
contact: "#data-help"
policies:
  - name: finance
    members:
      - group: finance
    tables:
      nycflights13.flights: origin = 'JFK'
"""


def scheduler_over(site: Served, at: float) -> tuple[Scheduler, ScheduleStore]:
    """The scheduler of `agent serve` over the site's state, its clock at `at` (Unix seconds)."""
    store = ScheduleStore(site.state.file, clock=lambda: at)
    maker = FireMaker(site.agent, prompt_library(site.agent.settings.agent_prompts_dir))
    scheduler = Scheduler(
        store,
        site.state.conversations,
        maker,
        {INBOX: InboxOutlet(store)},
        Metrics(CollectorRegistry()),
        policies=lambda: site.agent.policies,
        clock=lambda: at,
    )
    return scheduler, store


# --- findings -----------------------------------------------------------------------------------


async def test_a_person_taken_out_of_the_group_that_grants_a_policy_stops_getting_its_rows(
    make_app: Callable[..., AgentApp], tmp_path: Path, fake_anthropic: FakeAnthropic
) -> None:
    """FINDING (access outlives its revocation): the web stores the asker's groups as they were at the
    schedule's making (`Draft.asker`), and each fire picks the policy from that snapshot. When the identity
    provider takes Alice out of `finance` (her proxy stops sending it; the web itself now gives her the
    default, no data), her schedule still fires under `finance` and delivers its rows to her inbox, forever.
    A fix picks the owner's policy from who they are now (the groups of their latest sign-in), and stops
    the schedule, telling them, when that no longer covers it."""
    access = tmp_path / "access.yaml"
    access.write_text(GROUP_POLICY, encoding="utf-8")
    async with Served(make_app, tmp_path, agent_access_file=str(access), **PROXY_MODE) as ours:
        in_finance = ours.client(email=ALICE, **{GROUPS_HEADER: "finance"})
        assert (await in_finance.get("/api/me")).json()["policy"] == "finance"
        fake_anthropic.script(*carriers_script())
        run_id = str((await chat(in_finance, "which carrier flew the most?"))[0].data["run_id"])
        schedule = await made(in_finance, daily(run_id))

        taken_out = ours.client(email=ALICE)  # the proxy no longer sends the group
        assert (await taken_out.get("/api/me")).json()["policy"] != "finance"
        shown = (await taken_out.get(f"/api/queries/{run_id}-Q1")).json()
        assert shown["rows"] == [] and shown["rows_hidden"], "the web itself withholds the answer's rows from her now"

        scheduler, store = scheduler_over(ours, schedule["next_at"] + 1)
        assert await scheduler.tick() == 1
        delivered = [i for i in await store.inbox(ALICE_OWNER) if not i.details.get("notice")]
        kept = await store.get(schedule["id"], owner=ALICE_OWNER)
    assert delivered == [], "no rows of a policy she no longer holds reach her inbox"
    assert kept is not None and kept.state == "stopped"


async def test_the_web_refuses_a_cadence_that_fires_every_minute(
    make_app: Callable[..., AgentApp], tmp_path: Path, fake_anthropic: FakeAnthropic
) -> None:
    """FINDING (flood): `* * * * *` is taken; a person's 100 schedules then fire 100 queries a minute (or,
    asked afresh, 100 model calls), beyond what the scheduler claims per tick. Refused with a 400 naming the
    cadence once a floor exists; nothing is kept."""
    async with Served(make_app, tmp_path, **PROXY_MODE) as ours:
        run_id = await alices_run(ours, fake_anthropic)
        alice = ours.client(email=ALICE)
        every_minute = {"kind": "cron", "at": "09:00", "weekday": 0, "cron": "* * * * *", "timezone": "UTC"}
        refused = await alice.post("/api/schedules", json=daily(run_id, how="ask", cadence=every_minute))
        listed = (await alice.get("/api/schedules")).json()["schedules"]
    assert refused.status_code == 400 and "cadence" in refused.json()["error"], refused.text
    assert listed == []


# --- attacks that held ----------------------------------------------------------------------------


async def test_the_inbox_address_is_never_reflected_into_the_page(
    make_app: Callable[..., AgentApp], tmp_path: Path
) -> None:
    async with Served(make_app, tmp_path, **PROXY_MODE) as ours:
        alice = ours.client(email=ALICE, Accept="text/html")
        for path in ('/inbox/"><script>alert(1)</script>', "/inbox/%22%3E%3Cimg%20src%3Dx%20onerror%3Dalert(1)%3E"):
            response = await alice.get(path)
            assert response.status_code == 404, path
            assert "<script>alert" not in response.text and "onerror=alert" not in response.text


async def test_a_deliverys_html_and_script_reach_the_browser_only_as_json_text(
    make_app: Callable[..., AgentApp], tmp_path: Path, fake_anthropic: FakeAnthropic
) -> None:
    """A delivered answer quotes data values and the question: the server never writes them into a page
    (the inbox page is a shell; the API answers JSON), so what the browser shows is the Markdown renderer's
    (marked, then DOMPurify, in app.js's TurnView), never HTML the server made from data."""
    hostile = "<script>alert(1)</script><img src=x onerror=alert(2)>"
    async with Served(make_app, tmp_path, **PROXY_MODE) as ours:
        run_id = await alices_run(ours, fake_anthropic)
        alice = ours.client(email=ALICE)
        schedule = await made(alice, daily(run_id, title=hostile[:200]))
        found = await ours.state.schedules.get(schedule["id"], owner=ALICE_OWNER)
        assert found is not None
        item = await ours.state.schedules.deliver_to_inbox(found, Delivery(text=f"carrier {hostile} [Q1]."))
        page = await ours.client(email=ALICE, Accept="text/html").get(f"/inbox/{item.id}")
        api = await alice.get(f"/api/inbox/{item.id}")
        listed = await alice.get("/api/inbox")
    assert page.status_code == 200 and "alert(" not in page.text and item.id in page.text
    assert api.headers["content-type"].startswith("application/json") and api.json()["text"].count(hostile) == 1
    assert listed.headers["content-type"].startswith("application/json")
    assert "text" not in listed.json()["deliveries"][0], "the list carries no answer text"


async def test_a_huge_or_non_json_schedule_body_is_refused_and_nothing_is_kept(
    make_app: Callable[..., AgentApp], tmp_path: Path, fake_anthropic: FakeAnthropic
) -> None:
    async with Served(make_app, tmp_path, **PROXY_MODE) as ours:
        run_id = await alices_run(ours, fake_anthropic)
        alice = ours.client(email=ALICE)
        huge = await alice.post("/api/schedules", json=daily(run_id, title="x" * 5_000_000))
        form = await alice.post(
            "/api/schedules", content=b"run_id=x", headers={"Content-Type": "application/x-www-form-urlencoded"}
        )
        long_zone = await alice.post(
            "/api/schedules", json=daily(run_id, cadence={"kind": "daily", "at": "09:00", "timezone": "A" * 65})
        )
        listed = (await alice.get("/api/schedules")).json()["schedules"]
    assert huge.status_code in (400, 413) and form.status_code == 415 and long_zone.status_code == 400
    assert listed == []


async def test_a_schedule_is_not_made_for_a_days_old_delivery_of_someone_elses(
    make_app: Callable[..., AgentApp], tmp_path: Path, fake_anthropic: FakeAnthropic
) -> None:
    """The turn a delivery was stored as belongs to the schedule's owner: another person naming its run id
    to make their own schedule of it is told it does not exist."""
    async with Served(make_app, tmp_path, **PROXY_MODE) as ours:
        run_id = await alices_run(ours, fake_anthropic)
        alice = ours.client(email=ALICE)
        schedule = await made(alice, daily(run_id))
        scheduler, store = scheduler_over(ours, schedule["next_at"] + 1)
        assert await scheduler.tick() == 1
        (item,) = await store.inbox(ALICE_OWNER)
        bob = ours.client(email="bob@example.com")
        refused = await bob.post("/api/schedules", json=daily(item.run_id))
        bobs_view = await bob.get(f"/api/queries/{item.queries[0]}")
    assert refused.status_code == 404 and bobs_view.status_code == 404


CHANNEL_POLICY = """
contact: "#data-help"
policies:
  - name: all-flights
    members:
      - email: alice@example.com
    tables:
      nycflights13.flights:
  - name: jfk
    members:
      - email: nobody@example.com
    tables:
      nycflights13.flights: origin = 'JFK'
channels:
  C0FINANCE1: jfk
"""


async def test_a_schedule_posting_rows_a_channels_policy_does_not_cover_is_refused_when_made(
    make_app: Callable[..., AgentApp], tmp_path: Path, fake_anthropic: FakeAnthropic
) -> None:
    """FINDING (low): Slack's modal runs `fire_policy` before it makes a schedule (chats/schedule_runs.py:
    "Checked as a schedule is made too, so one that could never deliver is refused then"); the web does not.
    Alice, who reads every flight, makes a schedule of her answer into a channel whose policy reads only
    JFK's: it is made (201, active), and only its first fire stops it. No row leaks (the fire checks), but
    the person is told "scheduled" for something that can never deliver; a fix runs the same check in
    web/views/schedules.py `_make` and `_edit` and answers 400 on `destination`."""
    access = tmp_path / "access.yaml"
    access.write_text(CHANNEL_POLICY, encoding="utf-8")
    members = Members({(TEAM, CHANNEL): {ALICE}})
    slack = {"slack_bot_token": "xoxb-test", "slack_signing_secret": "s"}
    async with Served(
        make_app, tmp_path, channel_members=members, agent_access_file=str(access), **slack, **PROXY_MODE
    ) as ours:
        run_id = await alices_run(ours, fake_anthropic)
        alice = ours.client(email=ALICE)
        to_channel = daily(run_id, destination={"to": "slack", "channel": CHANNEL})
        response = await alice.post("/api/schedules", json=to_channel)
        kept = await ours.state.schedules.list_for(ALICE_OWNER)
    assert response.status_code == 400 and "destination" in response.json()["error"], response.text
    assert kept == []


async def test_an_owner_can_open_and_delete_a_delivery_older_than_the_newest_thousand(
    make_app: Callable[..., AgentApp], tmp_path: Path, fake_anthropic: FakeAnthropic
) -> None:
    """FINDING (low): web/views/inbox.py finds a delivery by reading the owner's newest FOUND_AMONG (1,000)
    deliveries whole (text, figures, receipt) and searching them in Python: every GET of any id, however
    made-up, reads up to 1,000 answers, and a delivery older than the newest 1,000 (a day and a half of an
    hourly-or-faster schedule's deliveries; retention keeps them for the retention period) can no longer be
    opened, marked read or deleted by its owner: it answers 404 as if it did not exist, while it is still
    counted unread in every page's header. A fix looks one up by (id, owner) in the store."""
    async with Served(make_app, tmp_path, **PROXY_MODE) as ours:
        run_id = await alices_run(ours, fake_anthropic)
        alice = ours.client(email=ALICE)
        schedule = await ours.state.schedules.get((await made(alice, daily(run_id)))["id"], owner=ALICE_OWNER)
        assert schedule is not None
        oldest = await ours.state.schedules.deliver_to_inbox(schedule, Delivery(text="the oldest"))
        for n in range(1_000):
            await ours.state.schedules.deliver_to_inbox(schedule, Delivery(text=f"delivery {n}"))
        opened = await alice.get(f"/api/inbox/{oldest.id}")
        deleted = await alice.delete(f"/api/inbox/{oldest.id}")
    assert opened.status_code == 200 and opened.json()["text"] == "the oldest"
    assert deleted.status_code == 200

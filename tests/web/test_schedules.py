"""Schedules and alerts on the web, over HTTP against a real server where Alice and Bob sign in through a
trusted proxy: Alice makes a schedule from her answer and lists, pauses, resumes, edits and deletes it;
every id of hers (a schedule, an answer it is made from) answers Bob byte for byte as the same id answers
at a twin server over an empty file; a Slack answer's run is not the web's to schedule; bad input is
refused with the field named and nothing is kept; changes need our own pages' Origin and JSON, and are
rate limited per person."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import httpx
import pytest

from agent.app import AgentApp
from tests.fakes.anthropic_api import FakeAnthropic
from tests.slack_helpers import carriers_script
from tests.web.people_helpers import PROXY_MODE, Served, said
from tests.web.test_web_people import CHANNEL, TEAM, Members, slack_answer
from tests.web_helpers import chat

ALICE, BOB = "alice@example.com", "bob@example.com"


def daily(run_id: str | None = None, **changes: Any) -> dict[str, Any]:
    """The body the dialog sends for "every day at 09:00 in Paris, to my inbox, re-running its SQL"."""
    body: dict[str, Any] = {
        "title": "Flights per carrier",
        "kind": "question",
        "cadence": {"kind": "daily", "at": "09:00", "weekday": 0, "cron": "", "timezone": "Europe/Paris"},
        "destination": {"to": "inbox", "channel": ""},
        "how": "rerun",
        "alert": None,
    }
    if run_id is not None:
        body["run_id"] = run_id
    return {**body, **changes}


@pytest.fixture
async def served(make_app: Callable[..., AgentApp], tmp_path: Path) -> AsyncIterator[tuple[Served, Served]]:
    async with (
        Served(make_app, tmp_path / "ours", **PROXY_MODE) as ours,
        Served(make_app, tmp_path / "twin", **PROXY_MODE) as twin,
    ):
        yield ours, twin


async def alices_run(ours: Served, fake_anthropic: FakeAnthropic) -> str:
    fake_anthropic.script(*carriers_script())
    events = await chat(ours.client(email=ALICE), "which carrier flew the most?")
    return str(events[0].data["run_id"])


async def made(client: httpx.AsyncClient, body: dict[str, Any]) -> dict[str, Any]:
    response = await client.post("/api/schedules", json=body)
    assert response.status_code == 201, response.text
    schedule: dict[str, Any] = response.json()["schedule"]
    return schedule


async def test_a_schedule_made_from_an_answer_is_listed_paused_resumed_edited_and_deleted(
    served: tuple[Served, Served], fake_anthropic: FakeAnthropic
) -> None:
    ours, _ = served
    run_id = await alices_run(ours, fake_anthropic)
    alice = ours.client(email=ALICE)
    schedule = await made(alice, daily(run_id))
    assert schedule["question"] == "which carrier flew the most?" and schedule["state"] == "active"
    assert schedule["cadence"]["timezone"] == "Europe/Paris" and schedule["how"] == "rerun"
    assert schedule["summary"] == "every day at 09:00 (Europe/Paris), to your inbox, re-running its SQL"
    assert schedule["queries"] == ["Q1"] and schedule["source_run_id"] == run_id
    whole = (await alice.get(f"/api/schedules/{schedule['id']}")).json()["schedule"]
    assert [(q["label"], q["columns"]) for q in whole["queries"]] == [("Q1", ["carrier", "n"])]
    listed = (await alice.get("/api/schedules")).json()
    assert [s["id"] for s in listed["schedules"]] == [schedule["id"]]
    assert listed["destinations"] == {"inbox": True, "slack": False}

    paused = await alice.post(f"/api/schedules/{schedule['id']}/pause", json={})
    assert paused.status_code == 200 and paused.json()["schedule"]["state"] == "paused"
    resumed = await alice.post(f"/api/schedules/{schedule['id']}/resume", json={})
    assert resumed.status_code == 200 and resumed.json()["schedule"]["state"] == "active"

    weekly = daily(cadence={"kind": "weekly", "weekday": 4, "at": "17:30", "timezone": "America/New_York"})
    edited = await alice.patch(f"/api/schedules/{schedule['id']}", json={**weekly, "title": "Carriers, weekly"})
    assert edited.status_code == 200, edited.text
    shown = (await alice.get(f"/api/schedules/{schedule['id']}")).json()["schedule"]
    assert shown["title"] == "Carriers, weekly"
    assert shown["summary"] == "every Friday at 17:30 (America/New_York), to your inbox, re-running its SQL"

    deleted = await alice.delete(f"/api/schedules/{schedule['id']}")
    assert deleted.status_code == 200 and deleted.json() == {"deleted": schedule["id"]}
    assert (await alice.get(f"/api/schedules/{schedule['id']}")).status_code == 404
    assert (await alice.get("/api/schedules")).json()["schedules"] == []


async def test_an_alert_is_made_with_its_condition(
    served: tuple[Served, Served], fake_anthropic: FakeAnthropic
) -> None:
    ours, _ = served
    run_id = await alices_run(ours, fake_anthropic)
    alert = {"query": "Q1", "kind": "change", "column": "n", "share": 0.1}
    schedule = await made(ours.client(email=ALICE), daily(run_id, kind="alert", alert=alert, title="Carrier swing"))
    assert schedule["kind"] == "alert" and schedule["alert"]["kind"] == "change"
    assert schedule["alert"]["text"] == "Q1, when n changes by more than 10% between checks"
    assert schedule["summary"] == "every day at 09:00 (Europe/Paris), to your inbox, checking its SQL"


async def test_every_schedule_route_answers_another_persons_id_as_never_seen(
    served: tuple[Served, Served], fake_anthropic: FakeAnthropic
) -> None:
    ours, twin = served
    run_id = await alices_run(ours, fake_anthropic)
    alice = ours.client(email=ALICE)
    schedule_id = (await made(alice, daily(run_id)))["id"]
    bob, bob_at_twin = ours.client(email=BOB), twin.client(email=BOB)
    steps: list[tuple[str, str, dict[str, Any]]] = [
        ("GET", f"/api/schedules/{schedule_id}", {}),
        ("PATCH", f"/api/schedules/{schedule_id}", {"json": daily(title="Bob's now")}),
        ("PATCH", f"/api/schedules/{schedule_id}", {"content": b"not json"}),
        ("POST", f"/api/schedules/{schedule_id}/pause", {"json": {}}),
        ("POST", f"/api/schedules/{schedule_id}/resume", {"json": {}}),
        ("DELETE", f"/api/schedules/{schedule_id}", {}),
        ("POST", "/api/schedules", {"json": daily(run_id)}),  # a schedule from Alice's answer
    ]
    for method, path, request in steps:
        theirs = await bob.request(method, path, **request)
        never = await bob_at_twin.request(method, path, **request)
        assert theirs.status_code == 404 and said(theirs) == said(never), (method, path, theirs.text)
    assert (await bob.get("/api/schedules")).json()["schedules"] == []
    kept = (await alice.get(f"/api/schedules/{schedule_id}")).json()["schedule"]
    assert kept["state"] == "active" and kept["title"] == "Flights per carrier", "Bob changed nothing"


async def test_a_slack_answer_is_not_the_webs_to_schedule(
    served: tuple[Served, Served], fake_anthropic: FakeAnthropic
) -> None:
    """A run the Slack adapter stored (in a channel) answers as an id never seen, whoever asks; Alice's own web
    answer, asked in the same state, is hers to schedule."""
    ours, twin = served
    _, run_id, _ = await slack_answer(ours, fake_anthropic)
    theirs = await ours.client(email=ALICE).post("/api/schedules", json=daily(run_id))
    never = await twin.client(email=ALICE).post("/api/schedules", json=daily(run_id))
    assert theirs.status_code == 404 and said(theirs) == said(never)
    await made(ours.client(email=ALICE), daily(await alices_run(ours, fake_anthropic)))


@pytest.mark.parametrize(
    ("change", "says"),
    [
        ({"cadence": {"kind": "daily", "at": "9am", "timezone": "UTC"}}, "cadence: A time of day is HH:MM"),
        ({"cadence": {"kind": "daily", "timezone": "Mars/Olympus"}}, "cadence: Unknown time zone 'Mars/Olympus'"),
        ({"cadence": {"kind": "daily", "timezone": "../../etc/passwd"}}, "cadence: Unknown time zone"),
        (
            {"cadence": {"kind": "cron", "cron": "every monday", "timezone": "UTC"}},
            "cadence: A cron expression has five",
        ),
        ({"cadence": {"kind": "cron", "cron": "61 * * * *", "timezone": "UTC"}}, "does not read"),
        ({"cadence": {"kind": "cron", "cron": "0 0 30 2 *", "timezone": "UTC"}}, "never fires"),
        ({"cadence": {"kind": "fortnightly", "timezone": "UTC"}}, "cadence.kind:"),
        ({"destination": {"to": "slack", "channel": "C0FINANCE1"}}, "destination: Slack is not configured"),
        ({"destination": {"to": "slack", "channel": "finance"}}, "destination: give the Slack channel's id"),
        ({"title": "x" * 201}, "title:"),
        ({"kind": "alert"}, "an alert needs its condition"),
        ({"kind": "alert", "alert": {"query": "Q1", "kind": "above", "column": "n"}}, "needs a threshold"),
        ({"kind": "alert", "alert": {"query": "Q9", "kind": "rows"}}, "alert.query: the answer has no Q9"),
        ({"kind": "alert", "alert": {"query": "Q1", "kind": "above", "column": "nope", "threshold": 3}}, "no column"),
        ({"surprise": True}, "surprise: Extra inputs are not permitted"),
    ],
)
async def test_bad_input_is_refused_naming_what_is_wrong(
    served: tuple[Served, Served], fake_anthropic: FakeAnthropic, change: dict[str, Any], says: str
) -> None:
    ours, _ = served
    run_id = await alices_run(ours, fake_anthropic)
    alice = ours.client(email=ALICE)
    refused = await alice.post("/api/schedules", json=daily(run_id, **change))
    assert refused.status_code == 400 and says in refused.json()["error"], refused.text
    assert (await alice.get("/api/schedules")).json()["schedules"] == [], "nothing was kept"


async def test_changes_come_from_our_own_pages_as_json(
    served: tuple[Served, Served], fake_anthropic: FakeAnthropic
) -> None:
    ours, _ = served
    run_id = await alices_run(ours, fake_anthropic)
    schedule_id = (await made(ours.client(email=ALICE), daily(run_id)))["id"]
    forged = ours.client(email=ALICE, origin=False, Origin="https://evil.example")
    for method, path, request in [
        ("POST", "/api/schedules", {"json": daily(run_id)}),
        ("PATCH", f"/api/schedules/{schedule_id}", {"json": daily()}),
        ("POST", f"/api/schedules/{schedule_id}/pause", {"json": {}}),
        ("DELETE", f"/api/schedules/{schedule_id}", {}),
    ]:
        assert (await forged.request(method, path, **request)).status_code == 403, (method, path)
    as_form = await ours.client(email=ALICE).patch(
        f"/api/schedules/{schedule_id}", content=b"name=x", headers={"Content-Type": "text/plain"}
    )
    assert as_form.status_code == 415
    listed = (await ours.client(email=ALICE).get("/api/schedules")).json()["schedules"]
    assert [(s["id"], s["state"]) for s in listed] == [(schedule_id, "active")]


async def test_changes_are_rate_limited_per_person(
    make_app: Callable[..., AgentApp], tmp_path: Path, fake_anthropic: FakeAnthropic
) -> None:
    async with Served(make_app, tmp_path, agent_web_schedule_changes_per_minute=2, **PROXY_MODE) as ours:
        run_id = await alices_run(ours, fake_anthropic)
        alice, bob = ours.client(email=ALICE), ours.client(email=BOB)
        codes = [(await alice.post("/api/schedules", json=daily(run_id))).status_code for _ in range(3)]
        bobs = await bob.post("/api/schedules", json=daily(run_id))
        listed = (await alice.get("/api/schedules")).json()["schedules"]
    assert codes == [201, 201, 429] and len(listed) == 2
    assert bobs.status_code == 404, "Bob's own budget is untouched: he is refused for the answer, not the rate"


async def test_the_pages_are_shells(served: tuple[Served, Served], fake_anthropic: FakeAnthropic) -> None:
    ours, _ = served
    run_id = await alices_run(ours, fake_anthropic)
    alice = ours.client(email=ALICE, Accept="text/html")
    await made(alice, daily(run_id, title="A name only the API gives"))
    for path, page in [("/schedules", "schedules"), ("/inbox", "inbox"), (f"/inbox/{'0' * 32}", "inbox")]:
        response = await alice.get(path)
        assert response.status_code == 200 and f'data-page="{page}"' in response.text, path
        assert "A name only the API gives" not in response.text
    chat_page = await alice.get("/")
    assert 'id="schedule-dialog"' in chat_page.text and 'id="unread"' in chat_page.text
    assert (await alice.get("/inbox/not-an-id")).status_code == 404


async def test_a_slack_destination_is_a_channel_the_person_is_in(
    make_app: Callable[..., AgentApp], tmp_path: Path, fake_anthropic: FakeAnthropic
) -> None:
    """Where the Slack bot runs beside the web, a schedule may post to a channel its maker is a member of now
    (Slack says so, by their verified email); a channel they are not in is refused, and nothing is kept."""
    members = Members({(TEAM, CHANNEL): {ALICE}})
    slack = {"slack_bot_token": "xoxb-test", "slack_signing_secret": "s"}
    async with Served(make_app, tmp_path, channel_members=members, **slack, **PROXY_MODE) as ours:
        run_id = await alices_run(ours, fake_anthropic)
        alice = ours.client(email=ALICE)
        assert (await alice.get("/api/schedules")).json()["destinations"] == {"inbox": True, "slack": True}
        outside = await alice.post(
            "/api/schedules", json=daily(run_id, destination={"to": "slack", "channel": "C0OTHER001"})
        )
        schedule = await made(alice, daily(run_id, destination={"to": "slack", "channel": f"#{CHANNEL}"}))
        kept = await ours.state.schedules.list_for(f"person:email:{ALICE}")
    assert (
        outside.status_code == 400
        and outside.json()["error"] == "destination: you are not a member of C0OTHER001 in Slack"
    )
    assert [(s.draft.destination, s.draft.asker.slack_user) for s in kept] == [(f"slack:{TEAM}:{CHANNEL}", f"U{ALICE}")]
    assert schedule["summary"] == f"every day at 09:00 (Europe/Paris), to Slack channel {CHANNEL}, re-running its SQL"


CHANNEL_READS_JFK_ONLY = """
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
  C0ALLFLT01: all-flights
"""
ALL_FLIGHTS_CHANNEL = "C0ALLFLT01"


async def test_an_edit_moving_a_schedule_into_a_channel_whose_policy_does_not_cover_its_rows_is_refused(
    make_app: Callable[..., AgentApp], tmp_path: Path, fake_anthropic: FakeAnthropic
) -> None:
    """As Slack's modal does (chats/schedule_runs.py `fire_policy`): refused on `destination`, the schedule
    kept as it was."""
    access = tmp_path / "access.yaml"
    access.write_text(CHANNEL_READS_JFK_ONLY, encoding="utf-8")
    members = Members({(TEAM, CHANNEL): {ALICE}, (TEAM, ALL_FLIGHTS_CHANNEL): {ALICE}})
    slack = {"slack_bot_token": "xoxb-test", "slack_signing_secret": "s"}
    async with Served(
        make_app, tmp_path, channel_members=members, agent_access_file=str(access), **slack, **PROXY_MODE
    ) as ours:
        run_id = await alices_run(ours, fake_anthropic)
        alice = ours.client(email=ALICE)
        schedule = await made(alice, daily(run_id, destination={"to": "slack", "channel": ALL_FLIGHTS_CHANNEL}))
        moved = await alice.patch(
            f"/api/schedules/{schedule['id']}", json=daily(destination={"to": "slack", "channel": CHANNEL})
        )
        kept = (await alice.get(f"/api/schedules/{schedule['id']}")).json()["schedule"]
    assert moved.status_code == 400 and moved.json()["error"].startswith("destination:"), moved.text
    assert kept["destination"] == f"slack:{TEAM}:{ALL_FLIGHTS_CHANNEL}"

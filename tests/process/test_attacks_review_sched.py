"""An outside review's attacks on the scheduler and the schedule store (process/scheduler.py,
chats/schedules.py, chats/schedule_runs.py, chats/schedule_times.py), on the moved clock of
tests/process/test_scheduler.py.

Findings (these fail on the code as reviewed): a data value becomes a live link in the inbox; one
schedule that no longer reads (a stored zone tzdata dropped), or a cron inside a two-hour clock change,
stops every other schedule's fire, for everyone, at every tick; a schedule may fire every minute (and,
asked afresh, call the model every minute); a schedule asked afresh spends its owner's model budget
without counting against it. Attacks that held (these pass): another owner's ids change nothing and read
nothing in the store; an alert's column is a name read from the rows, never SQL; a cron time in the hour a
daylight-saving change skips or repeats fires once that day."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from datetime import datetime, timedelta

import pytest

from agent.app import AgentApp
from chats.schedules import Alert, Cadence, Delivery, SavedQuery, ScheduleError
from tests.fakes.anthropic_api import FakeAnthropic
from tests.process.test_scheduler import (  # noqa: F401 (the fixture)
    ANN,
    JFK_SQL,
    World,
    _draft,
    utc,
    world,
)
from tests.slack_helpers import carriers_script

EVE = "person:email:eve@example.com"


async def _corrupt_zone(w: World, schedule_id: str, zone: str) -> None:
    """The schedule's stored time zone becomes `zone`: what a tzdata upgrade that drops a zone does to a
    schedule made under the old data (US/Pacific-New was dropped in 2020b, for one)."""

    def write(c: sqlite3.Connection) -> None:
        c.execute(
            "UPDATE schedules SET cadence = ? WHERE id = ?",
            (f'{{"kind": "daily", "timezone": "{zone}", "at": "08:00", "weekday": 0, "cron": ""}}', schedule_id),
        )

    await w.store._file.run(write)


# --- findings -----------------------------------------------------------------------------------


async def test_a_schedule_that_no_longer_reads_does_not_stop_everyone_elses_fires(
    world: Callable[..., World],  # noqa: F811
) -> None:
    """FINDING: `claim_due` reads each due row with `_schedule`, which raises on a stored cadence whose zone
    no longer exists; the exception leaves `claim_due`, so the tick fails before any fire, and since the
    poison row stays due and first by `next_at`, every later tick fails the same way: nobody's schedule
    fires again until someone edits the database."""
    w = world()
    poison = await w.store.create(EVE, _draft(cadence=Cadence("daily", timezone="Europe/Berlin", at="08:00")))
    await w.store.create(ANN, _draft())  # 09:00 Berlin
    await _corrupt_zone(w, poison.id, "Mars/Olympus_Mons")

    await w.tick_at(utc(2026, 3, 28, 8, 0))  # Ann's 09:00 CET; Eve's poison has been due since 07:00 UTC
    assert len(await w.store.inbox(ANN)) == 1, "Ann's schedule fires although Eve's cannot"


async def test_a_cron_inside_a_two_hour_clock_change_does_not_stop_the_scheduler(
    world: Callable[..., World],  # noqa: F811
) -> None:
    """FINDING (the same crash, reached with a cadence anyone may make): Antarctica/Troll turns its clocks
    back two hours (03:00 +02 to 01:00 +00, 2026-10-25 01:00 UTC). With "* 1-2 * * *" there, a tick in the
    repeated hours asks `next_after` for a time whose local minutes up to 02:59 all map to instants already
    past: more than `_MAX_STEPS` (64) of them, so it raises CadenceError("... never fires") inside
    `_claim`, out of `claim_due`, and every tick fails for every schedule until the local clock passes
    about 01:56. A fix isolates each claim (a schedule that cannot be claimed is stopped with its reason,
    the others fire) and walks past the repeated hours instead of counting steps."""
    w = world()
    w.clock.to(utc(2026, 10, 24, 12))
    w.store.min_interval_s = 60  # made before the floor existed, or under a lower AGENT_SCHEDULE_MIN_INTERVAL_S
    await w.store.create(EVE, _draft(cadence=Cadence("cron", timezone="Antarctica/Troll", cron="* 1-2 * * *")))
    await w.store.create(ANN, _draft(cadence=Cadence("daily", timezone="UTC", at="01:05")))
    await w.tick_at(utc(2026, 10, 25, 1, 10))  # 01:10 in Troll, the second time; Ann's 01:05 UTC is due
    assert len(await w.store.inbox(ANN)) == 1, "Ann's schedule fires"


async def test_a_schedule_cannot_fire_every_minute(
    world: Callable[..., World],  # noqa: F811
) -> None:
    """FINDING: any five-field cron is taken, `* * * * *` too: with MAX_PER_OWNER = 100 one person makes
    100 fires a minute (each a query on ClickHouse, or with how "ask" a model call), more than the
    scheduler's 20 claims per 30 s tick, so the backlog grows without end. A fix refuses cadences firing
    more often than a floor (a few minutes at least)."""
    w = world()
    with pytest.raises(ScheduleError):
        await w.store.create(ANN, _draft(cadence=Cadence("cron", cron="* * * * *")))
    assert await w.store.list_for(ANN) == []


async def test_a_scheduled_ask_counts_against_its_owners_daily_budget(
    world: Callable[..., World],  # noqa: F811
    make_app: Callable[..., AgentApp],
    fake_anthropic: FakeAnthropic,
) -> None:
    """FINDING: a schedule asked afresh (how "ask") runs the Runner with no asker, so AGENT_DAILY_USER_TOKENS
    never sees it: a person whose budget is spent keeps the model busy through schedules. With a budget of
    one token the first fire is answered (the question that crosses the budget is) and the next is not."""
    w = world(app=make_app(agent_daily_user_tokens=1))
    fake_anthropic.script(*carriers_script()[:2], *carriers_script()[:2])
    hourly = Cadence("cron", timezone="UTC", cron="0 * * * *")
    await w.store.create(ANN, _draft(cadence=hourly, how="ask", question="Which carrier flew the most?"))
    await w.tick_at(utc(2026, 3, 28, 8))
    await w.tick_at(utc(2026, 3, 28, 9))
    assert len(fake_anthropic.requests) == 2, "the second fire, over its owner's budget, calls no model"


async def test_a_data_value_cannot_become_a_live_link_in_the_inbox(world: Callable[..., World]) -> None:  # noqa: F811
    """FINDING (low, phishing): a rerun delivery writes each cell verbatim into Markdown (prompts/schedules/
    rows.md), with no model between the data and the page; the inbox renders it with marked and DOMPurify
    (web/static/app.js), which keep <a href> and Markdown links to https. So whoever can write a value into
    a table a schedule reads (a customer's name, a ticket's subject) puts a disguised link into its owner's
    inbox, with our page's trust. Slack's delivery breaks the same syntax (bots/slack/blocks.py `no_pings`);
    the inbox does not. Rendered here with markdown-it (CommonMark, raw HTML passed, as marked does). A fix
    escapes Markdown and HTML in cells (the template) or renders cells as text."""
    from markdown_it import MarkdownIt

    w = world()
    sql = (
        "SELECT '[Reset your password](https://evil.example/login)' AS note, "
        "'<a href=\"https://evil.example/x\">open</a>' AS html"
    )
    hostile = (SavedQuery("Q1", sql, "Notes"),)
    await w.store.create(ANN, _draft(queries=hostile))
    assert await w.tick_at(utc(2026, 3, 28, 8)) == 1
    (item,) = await w.store.inbox(ANN)
    assert "evil.example" in item.text, "the values are delivered"
    shown = MarkdownIt("commonmark").render(item.text)
    # No link element (a value shown as the text it is may read "href": the escaped tag is text, not a link)
    assert "<a " not in shown and "evil.example" in shown, shown


# --- attacks that held ----------------------------------------------------------------------------


async def test_another_owners_ids_change_nothing_and_read_nothing_in_the_store(
    world: Callable[..., World],  # noqa: F811
) -> None:
    w = world()
    anns = await w.store.create(ANN, _draft())
    item = await w.store.deliver_to_inbox(anns, Delivery(text="Ann's rows"))
    assert await w.store.get(anns.id, owner=EVE) is None
    assert await w.store.edit(anns.id, owner=EVE, title="Eve's now") is None
    assert not await w.store.pause(anns.id, owner=EVE)
    assert not await w.store.resume(anns.id, owner=EVE)
    assert not await w.store.delete(anns.id, owner=EVE)
    assert not await w.store.mark_read(item.id, owner=EVE)
    assert not await w.store.delete_inbox_item(item.id, owner=EVE)
    assert await w.store.inbox(EVE) == [] and await w.store.unread(EVE) == 0
    kept = await w.store.get(anns.id, owner=ANN)
    assert kept is not None and kept.state == "active" and kept.title == "JFK departures"
    (still,) = await w.store.inbox(ANN)
    assert not still.read and still.text == "Ann's rows"


async def test_an_alerts_column_is_a_name_read_from_the_rows_never_sql(
    world: Callable[..., World],  # noqa: F811
    fake_anthropic: FakeAnthropic,
) -> None:
    w = world()
    column = "flights') OR 1=1; DROP TABLE nycflights13.flights; --"
    await w.store.create(ANN, _draft(kind="alert", alert=Alert("above", column=column, threshold=0)))
    assert await w.tick_at(utc(2026, 3, 28, 8)) == 1
    assert await w.store.inbox(ANN) == [], "no such column: the condition does not hold, nothing posts"
    assert fake_anthropic.requests == [], "an alert's check asks no model"
    rows = await w.app.rerun(JFK_SQL, label="Q1", policy=None)
    assert rows.error is None and rows.rows, "the table is still there"


@pytest.mark.parametrize(
    ("day", "fires_at"),
    [
        (utc(2026, 3, 29), utc(2026, 3, 29, 1, 30)),  # 02:30 does not exist in Berlin: 03:30 CEST
        (utc(2026, 10, 25), utc(2026, 10, 25, 0, 30)),  # 02:30 happens twice: the first (CEST)
    ],
)
async def test_a_time_in_the_hour_a_clock_change_skips_or_repeats_fires_once_that_day(
    world: Callable[..., World],  # noqa: F811
    day: datetime,
    fires_at: datetime,
) -> None:
    w = world()
    w.clock.to(day - timedelta(hours=3))
    await w.store.create(ANN, _draft(cadence=Cadence("cron", timezone="Europe/Berlin", cron="30 2 * * *")))
    fired = []
    at = day - timedelta(hours=2)
    while at < day + timedelta(hours=6):
        if await w.tick_at(at):
            fired.append(at)
        at += timedelta(minutes=15)
    assert fired == [fires_at]

"""web/withholding.py: stored rows go again only to a reader whose policy now covers the one they were read
under, through every door that serves them (a query, a conversation, a run's replayed events) and into the
history a follow-up hands the model; a policy the file no longer names, or none recorded, is covered by none."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from agent.app import AgentApp
from chats.conversations import WITHHELD_ANSWER
from tests.fakes.anthropic_api import FakeAnthropic, Reply
from tests.slack_helpers import sql_call
from tests.web.people_helpers import GROUPS_HEADER, PROXY_MODE, Served
from tests.web_helpers import chat

BY_ORIGIN = "SELECT origin, count() AS n FROM nycflights13.flights GROUP BY origin ORDER BY origin"
EWR_COUNT = "120835"  # Newark's flights: only a policy reading Newark's rows reads it
POLICY_FILE = """
contact: "#data-help"
policies:
  - name: newark
    members:
      - group: ewr-ops
    tables:
      nycflights13.flights: origin = 'EWR'
  - name: jfk
    members:
      - group: jfk-ops
    tables:
      nycflights13.flights: origin = 'JFK'
  - name: everything
    members:
      - group: all-ops
    tables:
      nycflights13.flights:
"""
CHART = {"query_id": "Q1", "kind": "bar", "x": "origin", "y": "n", "title": "Flights by origin"}


def charted() -> list[Reply]:
    return [
        Reply(tool_calls=[sql_call("Flights by origin", BY_ORIGIN)]),
        Reply(tool_calls=[("chart", CHART)]),
        Reply(text="Newark flew the most [Q1]."),
        Reply(text="[]"),
    ]


def carl(site: Served, group: str) -> Any:
    return site.client(email="carl@example.com", **{GROUPS_HEADER: group})


async def _asked(site: Served, fake: FakeAnthropic, group: str = "ewr-ops") -> tuple[str, str]:
    fake.script(*charted())
    first = (await chat(carl(site, group), "flights by origin?"))[0].data
    assert EWR_COUNT in json.dumps(fake.requests), "the answer read Newark's count"
    return first["run_id"], first["conversation_id"]


async def test_a_stored_runs_replay_withholds_rows_counts_and_charts_but_not_from_a_reader_still_covered(
    make_app: Callable[..., AgentApp], tmp_path: Path, fake_anthropic: FakeAnthropic
) -> None:
    """After a restart the replay comes from the store (no live run): the rows, their counts and the chart
    (drawn from them) go; the answer's events stay. A reader who still holds newark gets them all."""
    policies = tmp_path / "access.yaml"
    policies.write_text(POLICY_FILE, encoding="utf-8")
    async with Served(make_app, tmp_path, agent_access_file=str(policies), **PROXY_MODE) as site:
        run_id, _ = await _asked(site, fake_anthropic)
    async with Served(make_app, tmp_path, agent_access_file=str(policies), **PROXY_MODE) as site:
        kept = (await carl(site, "ewr-ops").get(f"/api/runs/{run_id}/events")).text
        moved = (await carl(site, "jfk-ops").get(f"/api/runs/{run_id}/events")).text
    assert EWR_COUNT in kept and "event: chart" in kept, "a reader still holding newark replays it whole"
    assert EWR_COUNT not in moved and "event: chart" not in moved
    assert '"row_count": null' in moved and "event: done" in moved, "the run is replayed, without its rows"


async def test_the_conversation_view_withholds_each_uncovered_turns_rows_counts_and_charts(
    make_app: Callable[..., AgentApp], tmp_path: Path, fake_anthropic: FakeAnthropic
) -> None:
    policies = tmp_path / "access.yaml"
    policies.write_text(POLICY_FILE, encoding="utf-8")
    async with Served(make_app, tmp_path, agent_access_file=str(policies), **PROXY_MODE) as site:
        _, conversation_id = await _asked(site, fake_anthropic)
        kept = (await carl(site, "all-ops").get(f"/api/conversations/{conversation_id}")).json()
        moved = (await carl(site, "jfk-ops").get(f"/api/conversations/{conversation_id}")).json()
    assert kept["turns"][0]["charts"] and kept["turns"][0]["queries"][0]["row_count"] == 1, "all-ops covers newark"
    turn = moved["turns"][0]
    assert turn["charts"] == [] and "rows_hidden" in turn and "policy" not in turn
    query = turn["queries"][0]
    assert (query["rows"], query["row_count"], query["has_more"]) == ([], None, None)
    assert query["sql"] == BY_ORIGIN and turn["answer"] == "Newark flew the most [Q1].", "only the rows go"


async def test_rows_asked_with_no_policy_recorded_are_withheld_once_a_policy_file_applies(
    make_app: Callable[..., AgentApp], tmp_path: Path, fake_anthropic: FakeAnthropic
) -> None:
    """Asked before there was a policy file: no policy is recorded, so none is known to cover it, not even
    one reading every row (the default it would once have resolved to reads nothing, which all cover)."""
    async with Served(make_app, tmp_path, **PROXY_MODE) as site:
        run_id, conversation_id = await _asked(site, fake_anthropic, group="")
    policies = tmp_path / "access.yaml"
    policies.write_text(POLICY_FILE, encoding="utf-8")
    async with Served(make_app, tmp_path, agent_access_file=str(policies), **PROXY_MODE) as site:
        reader = carl(site, "all-ops")
        query = (await reader.get(f"/api/queries/{run_id}-Q1")).json()
        conversation = (await reader.get(f"/api/conversations/{conversation_id}")).text
        replay = (await reader.get(f"/api/runs/{run_id}/events")).text
    assert query["rows"] == [] and query["row_count"] is None and "rows_hidden" in query
    assert EWR_COUNT not in conversation and EWR_COUNT not in replay


async def test_a_follow_up_hands_the_model_an_uncovered_turns_question_alone(
    make_app: Callable[..., AgentApp], tmp_path: Path, fake_anthropic: FakeAnthropic
) -> None:
    """The earlier answer's text can state the figures its rows held: it goes too, a note in its place."""
    policies = tmp_path / "access.yaml"
    policies.write_text(POLICY_FILE, encoding="utf-8")
    async with Served(make_app, tmp_path, agent_access_file=str(policies), **PROXY_MODE) as site:
        _, conversation_id = await _asked(site, fake_anthropic)
        fake_anthropic.reset()
        fake_anthropic.script(Reply(text="Still counted."), Reply(text="[]"))
        await chat(carl(site, "all-ops"), "and again?", conversation_id)
        covered = json.dumps(fake_anthropic.requests)
        fake_anthropic.reset()
        fake_anthropic.script(Reply(text="Nothing new."), Reply(text="[]"))
        await chat(carl(site, "jfk-ops"), "and what did it say?", conversation_id)
        moved = json.dumps(fake_anthropic.requests)
    assert EWR_COUNT in covered and "Newark flew the most" in covered, "a covering policy keeps the history whole"
    assert "flights by origin?" in moved, "the earlier question stays"
    assert EWR_COUNT not in moved and "Newark flew the most" not in moved
    assert json.dumps(WITHHELD_ANSWER)[1:-1] in moved, "the model is told the earlier answer was withheld"

"""Which policy a web person's questions run under, over HTTP: the policy file's first that names their
verified email or one of their groups (a proxy's groups header here), else its default. Asserted on the
rows the engine returned (the stored preview and the CSV run again), the tables the model was shown, the
policy `GET /api/me` names, and the example questions and knowledge an empty chat offers."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from agent.app import AgentApp
from tests.fakes.anthropic_api import FakeAnthropic, Reply
from tests.slack_helpers import sql_call
from tests.web.people_helpers import GROUPS_HEADER, PROXY_MODE, Served
from tests.web_helpers import chat

BY_ORIGIN = "SELECT origin, count() AS n FROM nycflights13.flights GROUP BY origin ORDER BY origin"
POLICY_FILE = """
contact: "#data-help"
policies:
  - name: jfk
    members:
      - email: ana@example.com
    tables:
      nycflights13.flights: origin = 'JFK'
      nycflights13.weather: origin = 'JFK'
  - name: newark
    members:
      - group: ewr-ops
    tables:
      nycflights13.flights: origin = 'EWR'
      nycflights13.airlines:
"""


def by_origin() -> list[Any]:
    return [Reply(tool_calls=[sql_call("Flights by origin", BY_ORIGIN)]), Reply(text="Counted [Q1]."), Reply(text="[]")]


async def test_each_person_asks_under_their_own_policy(
    make_app: Callable[..., AgentApp], tmp_path: Path, fake_anthropic: FakeAnthropic
) -> None:
    policies = tmp_path / "access.yaml"
    policies.write_text(POLICY_FILE, encoding="utf-8")
    async with Served(make_app, tmp_path, agent_access_file=str(policies), **PROXY_MODE) as site:
        ana = site.client(email="ana@example.com")
        ben = site.client(email="ben@example.com", **{GROUPS_HEADER: "staff, ewr-ops"})
        eve = site.client(email="eve@example.com")
        named = [(await who.get("/api/me")).json()["policy"] for who in (ana, ben, eve)]
        rows, csvs, shown = {}, {}, {}
        for name, who in (("ana", ana), ("ben", ben)):
            fake_anthropic.reset()
            fake_anthropic.script(*by_origin())
            run_id = (await chat(who, "flights by origin?"))[0].data["run_id"]
            shown[name] = " ".join(block["text"] for block in fake_anthropic.requests[0]["system"])
            rows[name] = [row[0] for row in (await who.get(f"/api/queries/{run_id}-Q1")).json()["rows"]]
            csvs[name] = (await who.get(f"/api/queries/{run_id}-Q1.csv")).text.splitlines()[1:]
        fake_anthropic.reset()
        told = await chat(eve, "flights by origin?")
        examples = (await eve.get("/api/examples")).json()
        known = {
            name: (await who.get("/api/knowledge")).json()["entries"] for name, who in (("ana", ana), ("eve", eve))
        }
    assert named == ["jfk", "newark", "no-data"]
    assert rows == {"ana": ["JFK"], "ben": ["EWR"]}, "the engine returned each policy's rows only"
    assert [line.split(",")[0] for line in csvs["ana"]] == ["JFK"] and [line.split(",")[0] for line in csvs["ben"]] == [
        "EWR"
    ], "a download runs again under the policy"
    assert "nycflights13.weather" in shown["ana"] and "nycflights13.airlines" not in shown["ana"]
    assert "nycflights13.airlines" in shown["ben"] and "nycflights13.weather" not in shown["ben"]
    assert fake_anthropic.requests == [], "a person no policy names gets the default, which reads nothing"
    assert "#data-help" in json.dumps([event.data for event in told]), "and is told who to ask"
    assert examples == {"questions": []}, "no example names data the default may not read"
    assert known["ana"] and "flights" in json.dumps(known["ana"]), "the demo's knowledge, as Ana's policy sees it"
    assert not any("flights" in json.dumps(entry) for entry in known["eve"]), "none naming a table Eve may not read"

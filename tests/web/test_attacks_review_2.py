"""Outside review 2: the seams around a policy that changes under a person. A stored query read again
withholds its rows once its audience no longer holds the policy it was asked under (web/views/queries.py);
these ask whether every other door to the same rows does the same: the conversation view, the run's event
replay, and the history a follow-up question hands the model. Each asserts the SAFE behaviour."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

from agent.app import AgentApp
from tests.fakes.anthropic_api import FakeAnthropic, Reply
from tests.slack_helpers import sql_call
from tests.web.people_helpers import GROUPS_HEADER, PROXY_MODE, Served
from tests.web_helpers import chat

BY_ORIGIN = "SELECT origin, count() AS n FROM nycflights13.flights GROUP BY origin ORDER BY origin"
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
"""


def by_origin() -> list[Reply]:
    return [Reply(tool_calls=[sql_call("Flights by origin", BY_ORIGIN)]), Reply(text="Counted [Q1]."), Reply(text="[]")]


async def _asked_under_newark(site: Served, fake: FakeAnthropic) -> tuple[str, str]:
    """Carl asks while in ewr-ops: his answer's rows are Newark's. The run and conversation ids."""
    carl = site.client(email="carl@example.com", **{GROUPS_HEADER: "ewr-ops"})
    fake.script(*by_origin())
    events = await chat(carl, "flights by origin?")
    assert "| EWR | 120835 |" in json.dumps(fake.requests), "the answer read Newark's count (120835)"
    first = events[0].data
    return first["run_id"], first["conversation_id"]


async def test_the_conversation_view_withholds_rows_the_query_view_withholds(
    make_app: Callable[..., AgentApp], tmp_path: Path, fake_anthropic: FakeAnthropic
) -> None:
    """Carl moves from ewr-ops to jfk-ops: /api/queries/{id} hides the Newark preview, but
    /api/conversations/{id} (and the run's event replay) still serve the same rows to him."""
    policies = tmp_path / "access.yaml"
    policies.write_text(POLICY_FILE, encoding="utf-8")
    async with Served(make_app, tmp_path, agent_access_file=str(policies), **PROXY_MODE) as site:
        run_id, conversation_id = await _asked_under_newark(site, fake_anthropic)
        moved = site.client(email="carl@example.com", **{GROUPS_HEADER: "jfk-ops"})
        assert (await moved.get("/api/me")).json()["policy"] == "jfk"
        query = (await moved.get(f"/api/queries/{run_id}-Q1")).json()
        conversation = (await moved.get(f"/api/conversations/{conversation_id}")).text
    assert query["rows"] == [] and "rows_hidden" in query, "the query view withholds the Newark rows (holds today)"
    assert "120835" not in conversation, "the conversation view serves the rows the query view withholds"


async def test_the_run_event_replay_withholds_rows_the_query_view_withholds(
    make_app: Callable[..., AgentApp], tmp_path: Path, fake_anthropic: FakeAnthropic
) -> None:
    """The same, through GET /api/runs/{run_id}/events (the stored event log replayed to its owner)."""
    policies = tmp_path / "access.yaml"
    policies.write_text(POLICY_FILE, encoding="utf-8")
    async with Served(make_app, tmp_path, agent_access_file=str(policies), **PROXY_MODE) as site:
        run_id, _ = await _asked_under_newark(site, fake_anthropic)
        moved = site.client(email="carl@example.com", **{GROUPS_HEADER: "jfk-ops"})
        replay = await moved.get(f"/api/runs/{run_id}/events")
    assert replay.status_code in (200, 404)
    assert "120835" not in replay.text, "the run's event replay serves the Newark count the query view withholds"


async def test_a_follow_up_under_a_narrower_policy_does_not_hand_the_model_the_old_rows(
    make_app: Callable[..., AgentApp], tmp_path: Path, fake_anthropic: FakeAnthropic
) -> None:
    """Carl continues his Newark conversation after moving to jfk-ops: the model (which writes the answer
    he reads, the follow-ups and the figure check) is given the earlier turn's Newark preview rows."""
    policies = tmp_path / "access.yaml"
    policies.write_text(POLICY_FILE, encoding="utf-8")
    async with Served(make_app, tmp_path, agent_access_file=str(policies), **PROXY_MODE) as site:
        _, conversation_id = await _asked_under_newark(site, fake_anthropic)
        fake_anthropic.reset()
        fake_anthropic.script(Reply(text="Nothing new."), Reply(text="[]"))
        moved = site.client(email="carl@example.com", **{GROUPS_HEADER: "jfk-ops"})
        await chat(moved, "and what did the earlier table say?", conversation_id)
        sent = json.dumps(fake_anthropic.requests)
    assert fake_anthropic.requests, "the follow-up reached the model"
    assert "120835" not in sent, "rows read under a policy Carl no longer holds are put in the model's context"


async def test_a_withheld_preview_withholds_its_row_count_too(
    make_app: Callable[..., AgentApp], tmp_path: Path, fake_anthropic: FakeAnthropic
) -> None:
    """/api/queries/{id} empties `rows` once the reader no longer holds the policy, but keeps `row_count`,
    a figure read under that policy: here how many destinations Newark flies to, told to a JFK reader."""
    policies = tmp_path / "access.yaml"
    policies.write_text(POLICY_FILE, encoding="utf-8")
    destinations = "SELECT DISTINCT dest FROM nycflights13.flights ORDER BY dest"
    async with Served(make_app, tmp_path, agent_access_file=str(policies), **PROXY_MODE) as site:
        carl = site.client(email="carl@example.com", **{GROUPS_HEADER: "ewr-ops"})
        fake_anthropic.script(
            Reply(tool_calls=[sql_call("Destinations", destinations)]), Reply(text="Listed [Q1]."), Reply(text="[]")
        )
        run_id = (await chat(carl, "where do we fly?"))[0].data["run_id"]
        before = (await carl.get(f"/api/queries/{run_id}-Q1")).json()
        moved = site.client(email="carl@example.com", **{GROUPS_HEADER: "jfk-ops"})
        after = (await moved.get(f"/api/queries/{run_id}-Q1")).json()
    assert before["row_count"] and before["row_count"] > 1, "the Newark answer counted its destinations"
    assert after["rows"] == [] and "rows_hidden" in after, "the preview is withheld (holds today)"
    assert after.get("row_count") in (None, 0), "the count read under the policy taken away is still told"


async def test_a_web_question_refused_as_too_long_leaves_its_audit_entry(
    make_app: Callable[..., AgentApp], tmp_path: Path, fake_anthropic: FakeAnthropic
) -> None:
    """chats/audit.py: every question leaves an entry, refusals included ("a question too long"); Slack's
    too-long refusal writes one, the web's 413 writes none, so a person can probe unseen by `agent audit`."""
    policies = tmp_path / "access.yaml"
    policies.write_text(POLICY_FILE, encoding="utf-8")
    async with Served(
        make_app, tmp_path, agent_access_file=str(policies), agent_web_max_message_chars=50, **PROXY_MODE
    ) as site:
        carl = site.client(email="carl@example.com", **{GROUPS_HEADER: "ewr-ops"})
        response = await carl.post("/api/chat", json={"message": "x" * 51, "conversation_id": None})
        entries = await site.state.audit.entries()
    assert response.status_code == 413, "the question is refused (holds today)"
    assert fake_anthropic.requests == []
    assert [entry.person for entry in entries] == ["person:email:carl@example.com"], "no audit entry is left"


async def test_a_preview_asked_under_a_policy_since_renamed_is_withheld_from_a_reader_who_no_longer_holds_it(
    make_app: Callable[..., AgentApp], tmp_path: Path, fake_anthropic: FakeAnthropic
) -> None:
    """The file is edited (and the server restarted): `newark` is now called `ewr`, and Carl moved to
    jfk-ops. The stored query's policy name resolves to the default, which reads nothing, so "jfk covers
    it" holds and the Newark preview is shown to a JFK reader; had the name stayed, it would be withheld."""
    policies = tmp_path / "access.yaml"
    policies.write_text(POLICY_FILE, encoding="utf-8")
    async with Served(make_app, tmp_path, agent_access_file=str(policies), **PROXY_MODE) as site:
        run_id, _ = await _asked_under_newark(site, fake_anthropic)
    policies.write_text(POLICY_FILE.replace("name: newark", "name: ewr"), encoding="utf-8")
    async with Served(make_app, tmp_path, agent_access_file=str(policies), **PROXY_MODE) as site:
        moved = site.client(email="carl@example.com", **{GROUPS_HEADER: "jfk-ops"})
        assert (await moved.get("/api/me")).json()["policy"] == "jfk"
        query = await moved.get(f"/api/queries/{run_id}-Q1")
    assert query.status_code == 200, "Carl still owns his query"
    assert "120835" not in query.text, "rows read under a policy no longer in the file are shown to a JFK reader"

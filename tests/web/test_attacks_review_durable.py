"""An outside review's attacks on durable runs at the web chat: a run live on another host (its own, or one
it took over when the first host died) followed through the shared log, by run id. Its owner only, and only
the rows the reader's policy covers, as for a run live on this host or stored."""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from agent.app import AgentApp
from agent.limits import Limits
from chats.audiences import Audiences
from chats.runs import RunRegistry
from chats.state import STATE_FILE, ChatState
from tests.fakes.anthropic_api import FakeAnthropic
from tests.web.people_helpers import GROUPS_HEADER, PROXY_MODE, Served
from tests.web.test_attacks_review_2 import POLICY_FILE, _asked_under_newark
from tests.web_helpers import LiveServer
from web.app import create_app

EWR_COUNT = "120835"


class SharedServed(Served):
    """A web worker of several over one state: runs of the others are followed through the shared log."""

    def __init__(self, make_app: Callable[..., AgentApp], folder: Path, **settings: Any) -> None:
        self.agent = make_app(**settings)
        self.state = ChatState(folder / STATE_FILE, limits=Limits.of(self.agent.settings), workers=2)
        runs = RunRegistry(self.agent.runner, self.state.conversations, shared=self.state.shared_runs)
        self.app = create_app(self.agent, self.state, runs=runs, reattach_grace_s=0.3, audiences=Audiences(None))
        self._server = LiveServer(self.app)
        self.url = self._server.url
        self._clients = []


async def _live_elsewhere(site: Served, run_id: str) -> str:
    """The run's log as another host (one that took it over) shares it while it runs: a new run id of the
    same conversation, its events the stored run's (its Newark rows among them)."""
    stored = await site.state.conversations.run_events(run_id)
    assert stored is not None and site.state.shared_runs is not None
    conversation_id, events = stored
    other = uuid.uuid4().hex
    policy = await site.state.conversations.run_policy(run_id)  # as its host opens it: under the run's policy
    assert policy
    await site.state.shared_runs.open(other, conversation_id, policy)
    rows = [(e["id"], e["event"], {**e["data"], "run_id": other}) for e in events]
    await site.state.shared_runs.add(other, rows, beat=True)
    assert EWR_COUNT in json.dumps(rows), "the run's events carry Newark's count"
    return other


async def test_a_run_live_on_another_host_withholds_rows_its_readers_policy_no_longer_covers(
    make_app: Callable[..., AgentApp], tmp_path: Path, fake_anthropic: FakeAnthropic
) -> None:
    """Finding: GET /api/runs/{id}/events withholds the rows of a run live here or stored from a reader whose
    policy no longer covers the run's (web/views/run_events.py `covered`), but a run live on another host (a
    takeover's, or any run after a takeover moved it) is served from the shared log unfiltered: the shared
    log does not even keep the run's policy. Carl, moved from ewr-ops to jfk-ops, reads Newark's count.
    Safe: the shared log keeps the run's policy and the elsewhere path withholds as the others do."""
    policies = tmp_path / "access.yaml"
    policies.write_text(POLICY_FILE, encoding="utf-8")
    async with SharedServed(make_app, tmp_path, agent_access_file=str(policies), **PROXY_MODE) as site:
        run_id, _ = await _asked_under_newark(site, fake_anthropic)
        other = await _live_elsewhere(site, run_id)
        moved = site.client(email="carl@example.com", **{GROUPS_HEADER: "jfk-ops"})
        followed = await moved.get(f"/api/runs/{other}/events")
    assert followed.status_code in (200, 404)
    assert "event: done" in followed.text or followed.status_code == 404
    assert EWR_COUNT not in followed.text, "a run live on another host serves rows the reader's policy withholds"


async def test_a_run_live_on_another_host_is_unknown_to_anyone_but_its_owner(
    make_app: Callable[..., AgentApp], tmp_path: Path, fake_anthropic: FakeAnthropic
) -> None:
    """Held: someone else following another host's run by its id gets 404, as for an unknown id."""
    policies = tmp_path / "access.yaml"
    policies.write_text(POLICY_FILE, encoding="utf-8")
    async with SharedServed(make_app, tmp_path, agent_access_file=str(policies), **PROXY_MODE) as site:
        run_id, _ = await _asked_under_newark(site, fake_anthropic)
        other = await _live_elsewhere(site, run_id)
        owner = await site.client(email="carl@example.com", **{GROUPS_HEADER: "ewr-ops"}).get(
            f"/api/runs/{other}/events"
        )
        stranger = site.client(email="dana@example.com", **{GROUPS_HEADER: "ewr-ops"})
        theirs = await stranger.get(f"/api/runs/{other}/events")
        unknown = await stranger.get(f"/api/runs/{uuid.uuid4().hex}/events")
    assert owner.status_code == 200 and EWR_COUNT in owner.text  # the owner, still covered, follows it
    assert theirs.status_code == unknown.status_code == 404 and theirs.json()["error"].startswith("No run")

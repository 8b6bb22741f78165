"""GET /api/runs/{run_id}/events: reattach to a web run, live, stored, or in another worker. Another
interface's run (a Slack answer, whose id its links carry) is not there for the web, nor another
person's: each answers as a run never seen."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response

from chats.shared_runs import LiveRun
from web.boundary import HttpError, read_last_event_id
from web.context import WEB, web_context
from web.identity import require_identity
from web.ownership import check_owned
from web.sse import Shown, event_stream, live, replayed, singly
from web.withholding import covered, reader_policy, withheld_events


async def run_events(request: Request) -> Response:
    web = web_context(request)
    run_id = request.path_params["run_id"]
    after = read_last_event_id(request)
    missing = HttpError(404, f"No run {run_id}.")
    handle = web.runs.get(run_id, interface=WEB)
    if handle is not None:
        owner = await web.store.owner_of(handle.conversation_id, interface=WEB)
        identity = await check_owned(request, owner, missing)
        # a reader whose policy no longer covers the run's gets its events without their rows
        reader = reader_policy(request, identity, owner or "")
        shown = None if covered(request, handle.policy, reader) else withheld_events
        return event_stream(live(web.runs.follow_batches(handle, after), shown), web.stream_grace_s)
    stored = await web.store.run_events(run_id, interface=WEB)
    if stored is not None:
        owner = await web.store.owner_of(stored[0], interface=WEB)
        identity = await check_owned(request, owner, missing)
        events = stored[1]
        if not covered(request, await web.store.run_policy(run_id), reader_policy(request, identity, owner or "")):
            events = withheld_events(events)  # read under a policy its owner no longer holds whole
        return event_stream(replayed(events, after), web.stream_grace_s)
    identity = await require_identity(request)
    showing: list[Shown | None] = []  # as for a run live here: rows withheld where the reader's policy falls short

    async def may_read(run: LiveRun) -> bool:
        owner = await web.store.owner_of(run.conversation_id, interface=WEB)
        if owner is None or not await web.audiences.includes(identity.person, owner):
            return False
        showing.append(
            None if covered(request, run.policy, reader_policy(request, identity, owner)) else withheld_events
        )
        return True

    elsewhere = await web.runs.follow_elsewhere(run_id, after, interface=WEB, may_read=may_read)  # another worker
    if elsewhere is None:
        raise missing
    return event_stream(live(singly(elsewhere), showing[-1]), web.stream_grace_s)

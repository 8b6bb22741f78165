"""The web's saved conversations: listed (one's own), read and deleted. Another interface's (a Slack
thread) is not there for the web, nor another person's: reading or deleting one answers as an id never
seen."""

from __future__ import annotations

from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from chats.reports import ReportStore
from web.boundary import HttpError
from web.context import WEB, web_context
from web.identity import require_identity
from web.ownership import check_owned
from web.withholding import readable_conversation, reader_policy


async def conversations(request: Request) -> Response:
    identity = await require_identity(request)
    listed = await web_context(request).store.list_conversations(owner=identity.person.owner)
    return JSONResponse({"conversations": listed})


async def conversation(request: Request) -> Response:
    store = web_context(request).store
    conversation_id = request.path_params["conversation_id"]
    missing = HttpError(404, f"No conversation {conversation_id}.")
    owner = await store.owner_of(conversation_id, interface=WEB)
    identity = await check_owned(request, owner, missing)
    if request.method == "DELETE":
        if not await store.delete_conversation(conversation_id, interface=WEB):
            raise missing
        return JSONResponse({"deleted": conversation_id})
    found = await store.get_conversation(conversation_id, interface=WEB)
    if found is None:
        raise missing
    await _with_reports(found, web_context(request).runs.reports)
    # each turn's rows only where the policy it was asked under is one its owner still holds whole
    return JSONResponse(readable_conversation(request, found, reader_policy(request, identity, owner or "")))


async def _with_reports(conversation: dict[str, Any], reports: ReportStore) -> None:
    """Each turn that wrote a report (its first run, or a Resume's) carries how the report stands, as `done`
    did when it ran: a reopened chat links it as the live one did."""
    by_run: dict[str, dict[str, Any]] = {}
    for stored in await reports.in_conversation(conversation["id"]):
        if stored.report is not None:
            for run_id in {*stored.report.runs, stored.run_id}:
                by_run[run_id] = stored.report.status().model_dump(mode="json")
    for turn in conversation["turns"]:
        if turn["run_id"] in by_run:
            turn["report"] = by_run[turn["run_id"]]

"""The web's saved conversations: listed (one's own), read and deleted. Another interface's (a Slack
thread) is not there for the web, nor another person's: reading or deleting one answers as an id never
seen."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

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
    # each turn's rows only where the policy it was asked under is one its owner still holds whole
    return JSONResponse(readable_conversation(request, found, reader_policy(request, identity, owner or "")))

"""The web's saved conversations: listed, read and deleted. Another interface's (a Slack thread) is not
there for the web: reading or deleting one answers as an id never seen."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from web.boundary import HttpError
from web.context import WEB, web_context


async def conversations(request: Request) -> Response:
    return JSONResponse({"conversations": await web_context(request).store.list_conversations()})


async def conversation(request: Request) -> Response:
    store = web_context(request).store
    conversation_id = request.path_params["conversation_id"]
    if request.method == "DELETE":
        if not await store.delete_conversation(conversation_id, interface=WEB):
            raise HttpError(404, f"No conversation {conversation_id}.")
        return JSONResponse({"deleted": conversation_id})
    found = await store.get_conversation(conversation_id, interface=WEB)
    if found is None:
        raise HttpError(404, f"No conversation {conversation_id}.")
    return JSONResponse(found)

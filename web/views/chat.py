"""POST /api/chat: a question starts a run; its events stream back as SSE."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response

from chats.runs import ShuttingDown
from web.boundary import HttpError, client_key, read_chat_request
from web.context import WEB, web_context
from web.sse import event_stream, live


async def chat(request: Request) -> Response:
    web = web_context(request)
    body = await read_chat_request(request, web.settings.agent_web_max_message_chars)
    if not web.runs.accepting:
        raise HttpError(503, ShuttingDown.message, {"Retry-After": "5"})
    client = client_key(request)
    if refusal := await web.budget.refusal(client):  # the day's budget is spent: politely, and until when
        web.agent.metrics.budget_refusals.labels("web").inc()
        raise HttpError(429, refusal.message, {"Retry-After": str(refusal.retry_after_s)})
    if body.conversation_id is None:
        conversation_id = await web.store.create_conversation(body.message)
    elif await web.store.exists(body.conversation_id, interface=WEB):
        conversation_id = body.conversation_id
    else:
        raise HttpError(404, f"No conversation {body.conversation_id}.")
    history = await web.store.history(conversation_id)
    try:
        handle = web.runs.start(
            conversation_id,
            body.message,
            history,
            platform="web",
            interface="web",
            abandon_after_s=web.reattach_grace_s,
            on_done=lambda result: web.budget.spend(client, result.receipt),
        )
    except ShuttingDown:
        raise HttpError(503, ShuttingDown.message, {"Retry-After": "5"}) from None
    return event_stream(live(web.runs.follow_batches(handle)), web.stream_grace_s)

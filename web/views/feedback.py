"""Thumbs on an answer: stored with the turn, and a proposal for `agent knowledge review` (a thumbs-up
proposes the answer's queries as verified queries, a thumbs-down an eval case, with its reason). The web
thumbs only the web's answers, and each person only their own; each client has a budget of thumbs
(web/app.py)."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from web.boundary import FeedbackRequest, HttpError, read_json_body
from web.context import WEB, web_context
from web.ownership import check_owned


async def feedback(request: Request) -> Response:
    web = web_context(request)
    run_id = request.path_params["run_id"]
    thumb = await read_json_body(request, FeedbackRequest, '{"value": "up" or "down", "reason": "..."}')
    missing = HttpError(404, f"No answer {run_id}.")
    await check_owned(request, await web.store.run_owner(run_id, interface=WEB), missing)
    if not await web.store.record_feedback(run_id, thumb.value, interface=WEB):
        raise missing
    if thumb.value == "down" and thumb.reason and thumb.reason.strip():
        await web.proposals.note_reason(run_id, thumb.reason)
    return JSONResponse({"run_id": run_id, "feedback": thumb.value})

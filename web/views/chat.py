"""POST /api/chat: a question starts a run; its events stream back as SSE. A new conversation belongs to
the person asking; one continued must be theirs (anyone else's answers as one never seen)."""

from __future__ import annotations

from dataclasses import asdict

from starlette.requests import Request
from starlette.responses import Response

from agent.reports.model import ReportRequest
from chats.audit import Origin, record_refusal
from chats.conversations import readable_under
from chats.daily_budgets import Refusal
from chats.report_runs import NotResumable, ReportRuns
from chats.runs import ShuttingDown
from web.boundary import HttpError, read_chat_request
from web.context import WEB, web_context
from web.identity import Identity, asker_key, policy_of, require_identity
from web.ownership import check_owned
from web.sse import event_stream, live


async def refused(request: Request, identity: Identity, reason: str, question: str = "") -> None:
    """A question refused before it ran still leaves its audit entry (`question` is "" when it was refused
    before its body was read)."""
    policy = policy_of(request, identity)
    origin = Origin(identity.person.owner, "web", "", policy.name if policy is not None else "")
    await record_refusal(web_context(request).runs.audit, origin, question, reason)


async def chat(request: Request) -> Response:
    web = web_context(request)
    identity = await require_identity(request)
    try:
        body = await read_chat_request(request, web.settings.agent_web_max_message_chars)
    except HttpError as exc:
        if exc.status == 413:  # a question too long (its text is not kept: it is what was too long)
            await refused(request, identity, "too_long")
        raise
    return await start_run(request, identity, body.message, body.conversation_id)


async def start_run(
    request: Request,
    identity: Identity,
    message: str,
    conversation_id: str | None,
    report: ReportRequest | None = None,
    resume: str | None = None,
    run_tokens: int | None = None,
) -> Response:
    """Start a run on `message` in the asker's conversation (a new one when None) and stream its events: an
    answer, or with `report` a report (web/views/reports.py), under the same budget, policy and ownership.
    `resume`: the id of a partial report (its owner checked by the caller) whose next run this is;
    `run_tokens`: what a resumed report may still spend in tokens (a new report's is its budget's)."""
    web = web_context(request)
    if not web.runs.accepting:
        await refused(request, identity, "restarting", message)
        raise HttpError(503, ShuttingDown.message, {"Retry-After": "5"})
    client = asker_key(request, identity)
    policy = policy_of(request, identity)  # its queries read only this policy's tables and rows
    if report is not None:
        run_tokens = report.budget.tokens
    # held from the start: questions asked at once share what is left; a report holds its own budget's worth
    booked = await web.budget.reserve(client, run_tokens=run_tokens)
    if isinstance(booked, Refusal):  # the day's budget is spent, or the running questions may spend the rest
        web.agent.metrics.budget_refusals.labels("web").inc()
        await refused(request, identity, "over_budget", message)
        raise HttpError(429, booked.message, {"Retry-After": str(booked.retry_after_s)})
    try:
        if resume is not None:
            handle = await ReportRuns(web.runs).resume(
                resume,
                policy=policy,
                on_done=lambda result: web.budget.settle(booked, result.receipt),
                delivery={"reservation": asdict(booked)},  # as for a new run: a host taking it over settles it
            )
            return event_stream(live(web.runs.follow_batches(handle)), web.stream_grace_s)
        if conversation_id is None:
            conversation_id = await web.store.create_conversation(message, owner=identity.person.owner)
        else:
            owner = await web.store.owner_of(conversation_id, interface=WEB)
            await check_owned(request, owner, HttpError(404, f"No conversation {conversation_id}."))
        # earlier turns asked under a policy this one does not cover reach the model as their question alone
        history = await web.store.history(conversation_id, may_read=readable_under(web.agent.policies, policy))
        handle = web.runs.start(
            conversation_id,
            message,
            history,
            platform="web",
            interface="web",
            abandon_after_s=web.reattach_grace_s,
            on_done=lambda result: web.budget.settle(booked, result.receipt),
            policy=policy,
            report=report,
            delivery={"reservation": asdict(booked)},  # settled by the host that takes the run over, if one does
        )
    except ShuttingDown:
        await web.budget.settle(booked, None)
        raise HttpError(503, ShuttingDown.message, {"Retry-After": "5"}) from None
    except NotResumable:
        await web.budget.settle(booked, None)
        why = "This report cannot be resumed: it is not partial, or has nothing to go on from."
        raise HttpError(409, why) from None
    except BaseException:
        await web.budget.settle(booked, None)  # no run started: nothing is held
        raise
    return event_stream(live(web.runs.follow_batches(handle)), web.stream_grace_s)

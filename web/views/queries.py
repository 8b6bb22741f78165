"""A stored query: GET /api/queries/{query_id} (its SQL, columns and preview, as the conversation view
shows it) and GET /api/queries/{query_id}.csv (its full result as CSV, run again).

These are the one door the web opens to another interface's answers: Slack's answers link each query
here. So they give that query alone (its question, SQL, columns, capped preview, and the question its
answer was to), never its conversation, the answer's other turns or the thread it came from; and only to
the query's audience (web/ownership.py): the person who asked, or a Slack channel's members, as an id
never seen to anyone else."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from agent import EngineError, QueryRefused, csv_chunks
from agent.access.policy import Policy
from chats.conversations import ConversationStore
from web.boundary import HttpError
from web.context import web_context
from web.downloads import DownloadResponse, attachment
from web.identity import asker_key
from web.ownership import check_owned
from web.withholding import covered, reader_policy, withheld_query

CSV = "text/csv; charset=utf-8"


async def query(request: Request) -> Response:
    store = web_context(request).store
    key = request.path_params["query_id"]
    missing = HttpError(404, f"No stored query {key} (a query is stored once its answer is done).")
    owner = await store.query_owner(key)
    identity = await check_owned(request, owner, missing, door=True)
    found = await store.get_query(key)
    if found is None:
        raise missing
    if not covered(request, await store.query_policy(key), reader_policy(request, identity, owner or "")):
        # Rows read under a policy its audience no longer holds whole: the SQL stays, the rows do not.
        found = withheld_query(found)
    return JSONResponse(found)


async def query_csv(request: Request) -> Response:
    web = web_context(request)
    settings = web.settings
    key = request.path_params["query_id"]
    missing = HttpError(404, f"No stored query {key} (queries can be downloaded once their answer is done).")
    owner = await web.store.query_owner(key)
    identity = await check_owned(request, owner, missing, door=True)
    sql = await web.store.query_sql(key)
    if sql is None:
        raise missing
    headers = {
        "Content-Disposition": attachment(await _question(web.store, key), fallback=key),
        "X-Row-Cap": str(settings.export_max_rows),
        "X-Byte-Cap": str(settings.export_max_bytes),
    }
    if request.method == "HEAD":  # what a GET would send, without running the query (Starlette routes HEAD here)
        return Response(media_type=CSV, headers=headers)
    client = asker_key(request, identity)
    if not web.downloading.take(client):
        message = f"{web.downloading.per_client} downloads of yours are still running; let one finish first."
        raise HttpError(429, message, {"Retry-After": "10"})
    try:
        # Under the policy it was asked under (a channel's, for its answer's link), as it stands in the file
        # now, narrowed by what its audience reads now: the CSV never holds rows its answer could not have
        # read, and a policy taken away since applies at once. The person opening it is in the query's
        # audience (check_owned above).
        # A policy name the file no longer has gets the default, which reads nothing.
        asked_under = web.agent.policy_named(await web.store.query_policy(key))
        now = reader_policy(request, identity, owner or "")
        export = await web.agent.export(sql, max_rows=settings.export_max_rows, policy=_narrowed(asked_under, now))
    except BaseException as exc:
        web.downloading.give_back(client)
        if isinstance(exc, (QueryRefused, EngineError)):
            raise HttpError(422, f"The query no longer runs: {exc}") from None
        raise
    return DownloadResponse(
        csv_chunks(export, max_bytes=settings.export_max_bytes),
        send_timeout_s=settings.export_send_timeout_s,
        deadline_s=settings.export_deadline_s,
        on_end=lambda: web.downloading.give_back(client),
        media_type=CSV,
        headers=headers,
    )


def _narrowed(asked_under: Policy | None, now: Policy | None) -> Policy | None:
    return asked_under.narrowed(now) if asked_under is not None and now is not None else asked_under


async def _question(store: ConversationStore, key: str) -> str:
    """The question the query answered, which names its CSV file."""
    found = await store.get_query(key)
    return str(found["question"]) if found else ""

"""Signing in and out of the web chat, and who one is.

`GET /auth/sign-in` sends the browser to the OpenID Connect provider (web/oidc.py), remembering where
to come back to; `GET /auth/callback` turns the provider's answer into a server-side session
(chats/sessions.py) whose id alone rides in the signed cookie; `POST /auth/sign-out` (JSON, from the
chat's own pages) ends it. `GET /api/me` says who the server takes the caller to be, and under which
policy their questions run."""

from __future__ import annotations

import re

from starlette.requests import Request
from starlette.responses import JSONResponse, RedirectResponse, Response

from web.boundary import HttpError, check_json_content_type, check_same_origin
from web.context import web_context
from web.identity import SESSION_KEY, policy_of, require_identity
from web.oidc import OidcSignIn, SignInFailed
from web.views.page import missing_page

NEXT = "next"  # the session's key for the page to return to after signing in
# Where a sign-in may return: a path of this site (`//host` or `/\host` would leave it).
LOCAL_PATH = re.compile(r"/(?![/\\])[^\s\\]{0,2000}")


async def sign_in(request: Request) -> Response:
    back = request.query_params.get(NEXT, "/")
    request.session[NEXT] = back if LOCAL_PATH.fullmatch(back) else "/"
    try:
        return await _oidc(request).redirect(request, _callback_url(request))
    except SignInFailed as exc:
        return _failed(request, 502, str(exc))


async def callback(request: Request) -> Response:
    web = web_context(request)
    try:
        person = await _oidc(request).person(request)
    except SignInFailed as exc:
        return _failed(request, 400, str(exc))
    back, earlier = request.session.get(NEXT), request.session.get(SESSION_KEY)
    if isinstance(earlier, str):  # signing in again ends the session it replaces
        await web.sessions.end(earlier)
    session_id = await web.sessions.start(person, web.settings.agent_session_hours * 3600)
    request.session.clear()  # what the sign-in kept (state, nonce, PKCE verifier) is spent; a new session
    request.session[SESSION_KEY] = session_id
    return RedirectResponse(back if isinstance(back, str) and LOCAL_PATH.fullmatch(back) else "/", status_code=303)


async def sign_out(request: Request) -> Response:
    """Ends the session server-side (every copy of the cookie stops working) and clears the cookie."""
    try:
        check_same_origin(request)
        check_json_content_type(request)
    except HttpError as exc:
        return exc.response()
    session_id = request.session.get(SESSION_KEY)
    if isinstance(session_id, str):
        await web_context(request).sessions.end(session_id)
    request.session.clear()
    return JSONResponse({"signed_out": True})


async def signed_out(request: Request) -> Response:
    """Where the chat goes after signing out: a page that starts no sign-in, since the provider's own session
    would sign the browser straight back in (the chat's address sends a browser without a session there)."""
    return web_context(request).templates.TemplateResponse(request, "signed_out.html", {})


async def me(request: Request) -> Response:
    identity = await require_identity(request)
    person = identity.person
    policy = policy_of(request, identity)
    return JSONResponse(
        {
            "id": person.id,
            "name": person.name,
            "email": person.email,
            "groups": sorted(person.groups),
            "signed_in_with": identity.via,  # session (OIDC), proxy, token or local
            "policy": policy.name if policy is not None else None,
        }
    )


def _oidc(request: Request) -> OidcSignIn:
    oidc: OidcSignIn = request.app.state.oidc
    return oidc


def _callback_url(request: Request) -> str:
    """The address the provider sends the browser back to: under AGENT_WEB_URL when it is set (behind a
    proxy the request's own address may be an inside one), else this request's."""
    public = web_context(request).settings.agent_web_url
    return f"{public.rstrip('/')}/auth/callback" if public else str(request.url_for("auth_callback"))


def _failed(request: Request, status: int, why: str) -> Response:
    message = f"Signing in did not work: {why}. Try again from the chat's page."
    return missing_page(request, status, message)

"""Everything the web serves belongs to someone (chats/people.py): a conversation, its runs and their
events, its queries, pages and CSVs, its charts and thumbs to the person who asked, or to the Slack
audience it was asked in. A request whose person is not in that audience (chats/audiences.py) is answered
exactly as for an id that does not exist: the caller passes the very error a missing id gets.

A server where nobody signs in (no OIDC, no identity proxy) serves one team as one person: the web's
conversations are all that person's, and the door Slack's answers link to (a query's page and CSV) stays
open to whoever passes the token, as before people were told apart."""

from __future__ import annotations

from starlette.requests import Request

from web.boundary import HttpError
from web.context import web_context
from web.identity import Identities, Identity, require_identity


async def check_owned(request: Request, owner: str | None, missing: HttpError, *, door: bool = False) -> Identity:
    """The caller's identity when `owner` (None: nothing found) is in their audience; else `missing`.
    `door`: the query a Slack answer links to, open to all where nobody signs in and no policy file is set."""
    identity = await require_identity(request)
    if owner is None:
        raise missing
    identities: Identities = request.app.state.identities
    if door and identities.sign_in is None and web_context(request).agent.policies is None:
        # One trusted team (no sign-in, no policy file): a Slack answer's query link opens for whoever passes.
        # With policies, what an answer read is its audience's alone, and nobody is known here: closed.
        return identity
    if not await web_context(request).audiences.includes(identity.person, owner):
        raise missing
    return identity

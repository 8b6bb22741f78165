"""Stored rows read again by someone whose policy has changed since they were read.

Every answer is stored with the name of the policy it was asked under (chats/conversations.py). Its rows
(previews, row counts, charts' data) were read under that policy; served again, they go only to a reader
whose policy as it stands now covers it (agent/access/policy.py `Policies.covers_asked`; a name the file no
longer has is covered by none). The one rule for each door that serves stored rows: a query's page
(views/queries.py), a conversation (views/conversations.py) and a run's replayed events (views/run_events.py).
What is withheld is the rows and what they count; the SQL, the columns and the answer's text stay."""

from __future__ import annotations

from typing import Any

from starlette.requests import Request

from agent.access.policy import Policy
from chats.conversations import readable_under
from chats.people import channel_of
from web.context import web_context
from web.identity import Identities, Identity, policy_of

WITHHELD = "Its rows are not shown: they were read under a policy you no longer hold whole."


def reader_policy(request: Request, identity: Identity, owner: str) -> Policy | None:
    """What the audience of an answer belonging to `owner` reads now: a Slack channel's answer the
    channel's policy, anyone else's the person's own. None without a policy file, or where nobody signs in
    (the reader is not known, and the door Slack's answers link to is open to all)."""
    policies = web_context(request).agent.policies
    if policies is None:
        return None
    if (channel := channel_of(owner)) is not None:
        return policies.for_channel(channel[1])
    identities: Identities = request.app.state.identities
    return policy_of(request, identity) if identities.sign_in is not None else None


def covered(request: Request, asked_under: str | None, reader: Policy | None) -> bool:
    """Whether rows asked under the policy named `asked_under` may be shown to `reader` (reader_policy)."""
    may_read = readable_under(web_context(request).agent.policies, reader)
    return may_read is None or may_read(asked_under or "")


def withheld_query(query: dict[str, Any]) -> dict[str, Any]:
    """A stored query (chats' query row) without its rows, nor how many there were."""
    return {**query, "rows": [], "row_count": None, "has_more": None, "rows_hidden": WITHHELD}


def withheld_turn(turn: dict[str, Any]) -> dict[str, Any]:
    """A conversation's stored turn without its queries' rows and its charts (drawn from those rows)."""
    return {**turn, "queries": [withheld_query(q) for q in turn["queries"]], "charts": [], "rows_hidden": WITHHELD}


def withheld_events(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """A run's stored event log without its results' rows and counts, nor its charts."""
    kept = []
    for event in events:
        if event["event"] == "chart":
            continue
        if event["event"] == "result":
            event = {**event, "data": {**event["data"], "rows": [], "row_count": None, "has_more": None}}
        kept.append(event)
    return kept


def readable_conversation(request: Request, conversation: dict[str, Any], reader: Policy | None) -> dict[str, Any]:
    """A stored conversation as `reader` may read it: each turn's rows withheld where not covered."""
    turns = []
    for turn in conversation["turns"]:
        asked_under = turn.pop("policy", None)
        turns.append(turn if covered(request, asked_under, reader) else withheld_turn(turn))
    return {**conversation, "turns": turns}

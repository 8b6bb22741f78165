"""Whether a web person is in a Slack channel now: what a channel's answer links open to (chats/audiences.py).

The web person is linked to Slack by their verified email (`users.lookupByEmail`, scope `users:read.email`;
the Slack person found must show that email confirmed and belong to this workspace's organisation), and the
channel's members are asked of Slack (`conversations.members`, a page at a time through the SDK's cursor
pagination; scope `channels:read`, `groups:read` or `mpim:read` by the conversation's kind). Both answers
are kept briefly (recent.py), so a page of links opened together asks Slack once, and someone who left the
channel loses access within the TTL. Whatever fails answers False: a link that cannot be checked stays shut.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

import aiohttp
from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_client import AsyncWebClient

from bots.slack import refusals
from bots.slack.people import verified_email
from bots.slack.recent import Recent
from chats.people import Person, email_key

log = logging.getLogger(__name__)
PAGE = 1000  # members per conversations.members call (Slack's documented maximum is 1,000)
NOBODY = ""  # an email no Slack person of the workspace has


class SlackChannelMembers:
    """`ChannelMembers` for the web, asking the bot's Slack workspace. `client` and `team` are the bot's once
    it has started (None before: nobody is in any channel yet)."""

    def __init__(
        self,
        client: Callable[[], AsyncWebClient | None],
        team: Callable[[], str | None],
        *,
        ttl_s: float = 60.0,
        max_entries: int = 10_000,
    ) -> None:
        self._client, self._team = client, team
        self._members: Recent[str, frozenset[str]] = Recent(ttl_s, max_entries)
        self._users: Recent[str, str] = Recent(ttl_s, max_entries)

    async def includes(self, team: str, channel: str, person: Person) -> bool:
        return team == self._team() and await self.member(channel, person) is not None

    async def member(self, channel: str, person: Person) -> tuple[str, str] | None:
        client, team = self._client(), self._team()
        if client is None or team is None or not person.email:
            return None
        try:
            user = await self._user(client, team, person.email)
            return (team, user) if user and user in await self._channel(client, channel) else None
        except SlackApiError as exc:
            refusals.log_refusal(log, f"say who is in {channel}", exc)
        except (aiohttp.ClientError, TimeoutError) as exc:
            log.warning("Slack did not say who is in %s (%s): the link stays shut", channel, type(exc).__name__)
        return None

    async def has_user(self, channel: str, user: str) -> bool:
        """Whether the Slack user `user` is in `channel` now (a schedule's owner, before it posts there);
        False when Slack does not say."""
        client = self._client()
        if client is None:
            return False
        try:
            return user in await self._channel(client, channel)
        except SlackApiError as exc:
            refusals.log_refusal(log, f"say who is in {channel}", exc)
        except (aiohttp.ClientError, TimeoutError) as exc:
            log.warning("Slack did not say who is in %s (%s)", channel, type(exc).__name__)
        return False

    async def _user(self, client: AsyncWebClient, team: str, email: str) -> str:
        """The Slack user id whose confirmed email this is, or NOBODY."""
        key = email_key(email)
        if (known := self._users.get(key)) is not None:
            return known
        try:
            found = (await client.users_lookupByEmail(email=email)).get("user") or {}
        except SlackApiError as exc:
            if refusals.code(exc) != "users_not_found":
                raise
            found = {}
        shown = verified_email(found, team)
        user = str(found["id"]) if shown and email_key(shown) == key else NOBODY
        self._users.put(key, user)
        return user

    async def _channel(self, client: AsyncWebClient, channel: str) -> frozenset[str]:
        if (known := self._members.get(channel)) is not None:
            return known
        members: set[str] = set()
        async for page in await client.conversations_members(channel=channel, limit=PAGE):
            members.update(str(m) for m in page.get("members") or [])
        found = frozenset(members)
        self._members.put(channel, found)
        return found

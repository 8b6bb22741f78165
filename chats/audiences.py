"""Whether a person is in the audience that owns something: the person themself, or, for what was asked
in a Slack channel, one of the channel's current members (asked of Slack when a link is opened, cached
briefly, by the Slack adapter's `ChannelMembers`). Everything else is answered 404 by the caller."""

from __future__ import annotations

from typing import Protocol

from chats.people import Person, channel_of


class ChannelMembers(Protocol):
    async def includes(self, team: str, channel: str, person: Person) -> bool:
        """Whether `person` (a web person, linked to Slack by verified email) is in the channel now."""
        ...

    async def member(self, channel: str, person: Person) -> tuple[str, str] | None:
        """(team, Slack user id) of `person` when they are in the channel now: where a schedule they make may
        post (None: not a member, or Slack does not say)."""
        ...


class Audiences:
    def __init__(self, channel_members: ChannelMembers | None = None) -> None:
        self._channel_members = channel_members

    async def slack_member(self, person: Person, channel: str) -> tuple[str, str] | None:
        """(team, Slack user id) of `person` in a Slack channel they are in now; None without Slack."""
        return await self._channel_members.member(channel, person) if self._channel_members is not None else None

    async def includes(self, person: Person, owner: str) -> bool:
        if owner == person.owner:
            return True
        channel = channel_of(owner)
        if channel is not None and self._channel_members is not None:
            return await self._channel_members.includes(*channel, person)
        return False

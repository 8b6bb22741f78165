"""Who is asking in Slack: a person known by team and user id, their verified email (so the web person with
the same verified email is the same person, chats/people.py) and their user groups, as a policy is chosen by.

Slack says it: `users.info` (scope `users:read`; its email field only with `users:read.email`, else the
field is absent and the call still ok, docs.slack.dev/reference/methods/users.info) and, only when a policy
names a user group, `usergroups.list` with `include_users` (scope `usergroups:read`), one call per team for
every group. Answers are kept briefly (recent.py). An email counts only when Slack shows it confirmed and
the person belongs to this workspace's own organisation: another organisation's person (Slack Connect)
writes their own profile.

Whatever goes wrong fails closed: `asker` is None and the question runs under the default policy; when it
is the app's setup (a scope not granted), `missing_scope` names what an admin adds.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any

import aiohttp
from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_client import AsyncWebClient

from agent.access.policy import Asker
from bots.slack import refusals
from bots.slack.recent import Recent
from chats.people import Person, person_id

log = logging.getLogger(__name__)
EMAIL_SCOPE = "users:read.email"


@dataclass(frozen=True)
class SlackPerson:
    person: Person
    asker: Asker | None  # None: Slack could not say who they are, so they get the default policy
    missing_scope: str | None = None  # why not, when an admin can fix it (a scope the app lacks)


class _Unknown(Exception):
    def __init__(self, missing_scope: str | None = None) -> None:
        self.missing_scope = missing_scope


class SlackPeople:
    """`wants_groups`: whether any policy names a user group (else usergroups.list is never called, and
    the app needs no `usergroups:read`)."""

    def __init__(
        self,
        client: Callable[[], AsyncWebClient | None],
        *,
        wants_groups: bool = False,
        ttl_s: float = 60.0,
        max_entries: int = 10_000,
        seen: Callable[[str, Asker], Awaitable[None]] | None = None,
    ) -> None:
        self._client, self._wants_groups = client, wants_groups
        # Told who each person looked up is now (the kit's schedules pick their owner's policy from it)
        self._seen = seen
        self._people: Recent[tuple[str, str], SlackPerson] = Recent(ttl_s, max_entries)
        self._groups: Recent[str, Mapping[str, frozenset[str]]] = Recent(ttl_s, 100)

    async def person(self, team: str, user: str, user_team: str | None = None) -> SlackPerson:
        """Who `user` is, asking in workspace `team`, from Slack or from a moment ago; never raises.
        `user_team`: their own team as the event says it (Slack Connect: another organisation's); a person
        without a verified email is named by their own team, as users.info says it, else this one."""
        if (known := self._people.get((team, user))) is not None:
            return known
        try:
            found, groups_until = await self._look_up(team, user, user_team)
        except _Unknown as unknown:
            return SlackPeople.unlooked(user_team or team, user, unknown.missing_scope)
        # Kept no longer than the groups read it was built from: a group left is lost within the TTL.
        self._people.put((team, user), found, until=groups_until)
        if self._seen is not None and found.asker is not None:
            try:
                await self._seen(found.person.owner, found.asker)
            except Exception:  # never raises: the question goes on; their schedules keep the last sighting
                log.warning("slack: could not note who a person is now for their schedules")
        return found

    @staticmethod
    def unlooked(team: str, user: str, missing_scope: str | None = None) -> SlackPerson:
        """A person Slack did not name: known by their own team and user id only, with no policy of theirs."""
        fallback = Person(person_id(email=None, fallback=f"slack:{team}:{user}"), slack=(team, user))
        return SlackPerson(fallback, None, missing_scope)

    async def _look_up(self, team: str, user: str, user_team: str | None) -> tuple[SlackPerson, float | None]:
        """The person, and when the group read their groups came from expires (None: no groups asked)."""
        info = await self._call("users.info", lambda client: client.users_info(user=user))
        shown: dict[str, Any] = info.get("user") or {}
        own = str(shown.get("team_id") or user_team or team)
        email = verified_email(shown, team)
        if email is None and not _granted(info, EMAIL_SCOPE) and shown.get("team_id") in (None, team):
            raise _Unknown(EMAIL_SCOPE)  # no email because the app may not read it: the setup, not the person
        groups, groups_until = frozenset[str](), None
        if self._wants_groups:
            groups_until, by_member = await self._groups_of(team)
            groups = by_member.get(user, frozenset())
        person = Person(
            person_id(email=email, fallback=f"slack:{own}:{user}"),
            name=str(shown.get("real_name") or shown.get("name") or ""),
            email=email,
            slack=(own, user),
        )
        return SlackPerson(person, Asker(email=email, slack_user=user, slack_usergroups=groups)), groups_until

    async def _groups_of(self, team: str) -> tuple[float, Mapping[str, frozenset[str]]]:
        """Each member's user groups (enabled ones), for the whole team at once, with when that read expires."""
        if (known := self._groups.get_until(team)) is not None:
            return known
        listed = await self._call("usergroups.list", lambda client: client.usergroups_list(include_users=True))
        members: dict[str, set[str]] = {}
        for group in listed.get("usergroups") or []:
            for member in group.get("users") or []:
                members.setdefault(str(member), set()).add(str(group["id"]))
        groups = {member: frozenset(ids) for member, ids in members.items()}
        return self._groups.put(team, groups), groups

    async def _call(self, method: str, call: Callable[[AsyncWebClient], Awaitable[Any]]) -> Any:
        """`call` (Slack's `method`) on the bot's client; a refusal or no answer raises _Unknown."""
        client = self._client()
        if client is None:  # not started yet
            raise _Unknown()
        try:
            return await call(client)
        except SlackApiError as exc:
            refusals.log_refusal(log, f"say who is asking ({method})", exc)
            raise _Unknown(missing_scope(exc)) from None
        except (aiohttp.ClientError, TimeoutError) as exc:
            log.warning("Slack did not answer %s (%s): the asker gets the default policy", method, type(exc).__name__)
            raise _Unknown() from None


def verified_email(user: Mapping[str, Any], team: str) -> str | None:
    """The profile's email when Slack vouches for it: shown, positively confirmed (`is_email_confirmed` is
    True), of a person Slack names as of this workspace (`team_id` equal to it). A field Slack leaves out
    proves nothing: the email is not believed (fail closed)."""
    email = (user.get("profile") or {}).get("email")
    if not email or user.get("is_email_confirmed") is not True or user.get("deleted") or user.get("is_bot"):
        return None
    if not team or user.get("team_id") != team:  # Slack Connect: another organisation writes their profile
        return None
    return str(email)


def missing_scope(exc: SlackApiError) -> str | None:
    """The scope Slack says the app lacks, when that is why it refused."""
    return (refusals.needed_scope(exc) or None) if refusals.code(exc) == "missing_scope" else None


def _granted(response: Any, scope: str) -> bool:
    """Whether the token holds `scope`, as Slack says on every answer (`x-oauth-scopes`, comma-separated)."""
    headers: Any = getattr(response, "headers", None) or {}
    for name, value in dict(headers).items():
        if name.lower() == "x-oauth-scopes":
            text = value[0] if isinstance(value, list | tuple) else value
            return scope in {s.strip() for s in str(text).split(",")}
    return True  # not said: assume granted, and the person simply has no email

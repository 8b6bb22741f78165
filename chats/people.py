"""Who made something, as the kit keeps it: a person, or the Slack audience a thing was asked in.

A person's id is their verified email when one is known, so the web person and the Slack person with
the same verified email are one person (Slack's `users.info` with `users:read.email`); otherwise the
identity's own stable id. Everything a person makes carries an owner string; anyone whose owners do not
include it is answered 404, as for what does not exist.
"""

from __future__ import annotations

from dataclasses import dataclass

from agent.access.policy import email_key

__all__ = [
    "LOCAL",
    "MACHINE",
    "Person",
    "channel_of",
    "channel_owner",
    "email_key",
    "person_id",
    "person_owner",
]

LOCAL = "local"  # the one person of a server with neither sign-in nor a token (local use)
MACHINE = "token"  # a machine client holding the shared bearer token


@dataclass(frozen=True)
class Person:
    id: str  # "email:<address>", "oidc:<issuer>#<sub>", "slack:<team>:<user>", LOCAL or MACHINE
    name: str = ""
    email: str | None = None  # verified
    groups: frozenset[str] = frozenset()
    slack: tuple[str, str] | None = None  # (team id, user id)

    @property
    def owner(self) -> str:
        return person_owner(self.id)


def person_id(*, email: str | None, fallback: str) -> str:
    return f"email:{email_key(email)}" if email else fallback


def person_owner(person: str) -> str:
    return f"person:{person}"


CHANNEL_PREFIX = "slack-channel:"


def channel_owner(team: str, channel: str) -> str:
    """What is asked in a Slack channel belongs to the channel: its members, checked with Slack."""
    return f"{CHANNEL_PREFIX}{team}:{channel}"


def channel_of(owner: str) -> tuple[str, str] | None:
    """(team, channel) of an owner string `channel_owner` made; None for anything else."""
    if not owner.startswith(CHANNEL_PREFIX):
        return None
    team, _, channel = owner.removeprefix(CHANNEL_PREFIX).partition(":")
    return (team, channel) if team and channel else None

"""A policy: the tables an audience may read and, per table, the rows (a ClickHouse boolean
expression the engine applies to every read of that table). `Policies` picks one for a person or a
Slack channel; whoever matches nothing gets the default, which ships as "no data".

This module is the shared vocabulary: the file's loader (`agent/access/files.py`) makes these, the
engine enforces them (`agent/db`), the schema shows only their tables, and the adapters pick them.
"""

from __future__ import annotations

import string
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Literal

MemberKind = Literal["group", "email", "slack_user", "slack_usergroup"]

NO_DATA = "no-data"
_ASCII_LOWER = str.maketrans(string.ascii_uppercase, string.ascii_lowercase)


def email_key(email: str) -> str:
    """An email as people and policies are compared by: ASCII letters in either case are one address
    (as mail servers treat them), and nothing else is folded: `casefold` would make the Kelvin sign a
    `k` and `ß` an `ss`, so another verified address could pass for someone's."""
    return email.translate(_ASCII_LOWER)  # the default's name when the file names none: it reads nothing


@dataclass(frozen=True)
class Member:
    kind: MemberKind
    value: str  # an OIDC group, an email (compared case-blind), a Slack user id or user-group id

    def matches(self, asker: Asker) -> bool:
        if self.kind == "group":
            return self.value in asker.groups
        if self.kind == "email":
            return asker.email is not None and email_key(asker.email) == email_key(self.value)
        if self.kind == "slack_user":
            return asker.slack_user == self.value
        return self.value in asker.slack_usergroups


@dataclass(frozen=True)
class Asker:
    """What a policy is chosen by: everything an adapter verified about who is asking."""

    email: str | None = None  # verified (OIDC `email_verified`, Slack's users.info, a trusted proxy)
    groups: frozenset[str] = frozenset()
    slack_user: str | None = None
    slack_usergroups: frozenset[str] = frozenset()


@dataclass(frozen=True)
class Policy:
    name: str
    # "database.table" -> row filter (ClickHouse SQL), or None for every row. Tables not listed are not
    # readable at all under this policy.
    tables: Mapping[str, str | None] = field(default_factory=lambda: MappingProxyType({}))
    contact: str = ""  # who to ask for access, named in the polite "no data" answer
    members: tuple[Member, ...] = ()

    @property
    def reads_nothing(self) -> bool:
        return not self.tables

    @property
    def filters_rows(self) -> bool:
        """Some table is read through a row filter: the engine's read counts then include hidden rows."""
        return any(row_filter is not None for row_filter in self.tables.values())

    def readable(self, database: str, table: str) -> bool:
        return f"{database}.{table}" in self.tables

    def covers(self, other: Policy) -> bool:
        """Whether this policy reads at least what `other` reads: each of its tables, with no filter or the
        same one (a different filter may read other rows, so it does not count)."""
        return all(table in self.tables and self.tables[table] in (None, rows) for table, rows in other.tables.items())

    def narrowed(self, other: Policy) -> Policy:
        """What both policies read: the tables both list, each table's rows passing both filters. An answer
        read again (a CSV) runs under the policy it was asked under narrowed by the reader's as it is now,
        so a policy taken away since applies at once."""
        tables: dict[str, str | None] = {}
        for table, mine in self.tables.items():
            if table in other.tables:
                filters = list(dict.fromkeys(f for f in (mine, other.tables[table]) if f))
                tables[table] = (
                    " AND ".join(f"({f})" for f in filters) if len(filters) > 1 else next(iter(filters), None)
                )
        if tables == dict(self.tables):
            return self
        return Policy(f"{self.name}&{other.name}", MappingProxyType(tables), contact=self.contact or other.contact)


@dataclass(frozen=True)
class Policies:
    """The file's policies, in its order: a person gets the first whose members include them."""

    policies: tuple[Policy, ...]
    default: Policy
    channels: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))  # Slack channel id -> name

    @classmethod
    def open_to_all(cls, tables: Iterable[str] = ()) -> Policies:
        """No policy file: one policy for everyone (what a single trusted team runs today)."""
        everyone = Policy("everyone", MappingProxyType({table: None for table in tables}))
        return cls((), everyone)

    def named(self, name: str) -> Policy | None:
        if name == self.default.name:
            return self.default
        return next((p for p in self.policies if p.name == name), None)

    def covers_asked(self, reader: Policy, asked_under: str | None) -> bool:
        """Whether `reader` reads all that a stored answer asked under the policy named `asked_under` read,
        so its rows may reach that reader (or a model answering them). A name the file no longer has
        (renamed, removed), or none recorded, is not known: never covered, whatever `reader` holds (the
        default it would fall back to reads nothing, which every policy would cover)."""
        asked = self.named(asked_under) if asked_under else None
        return asked is not None and reader.covers(asked)

    def for_asker(self, asker: Asker) -> Policy:
        """A web person or a Slack DM: the first policy that names them, else the default."""
        for policy in self.policies:
            if any(member.matches(asker) for member in policy.members):
                return policy
        return self.default

    def for_channel(self, channel: str) -> Policy:
        """A Slack channel: everyone in it reads the answer, so the channel's policy, never the asker's."""
        name = self.channels.get(channel)
        return (self.named(name) if name else None) or self.default

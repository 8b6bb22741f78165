"""Which policy a Slack question runs under, and whom its conversation belongs to.

In a channel (public, private or a group DM) everyone there reads the answer, so the question runs under
the channel's policy, never the asker's, and what it makes belongs to the channel (its members, checked
with Slack when a link is opened). In a DM the asker alone reads it: their policy, their ownership. An
asker Slack could not name gets the default policy (fail closed).
"""

from __future__ import annotations

from dataclasses import dataclass

from agent.access.policy import Policies, Policy
from bots.slack.people import SlackPerson
from bots.slack.receive import Question
from chats.people import channel_owner

NO_POLICY_FILE = Policies.open_to_all()  # no access file: owners are still chosen; no policy is passed


@dataclass(frozen=True)
class Access:
    policy: Policy
    owner: str  # whom the conversation belongs to: the channel, or the DM's asker
    asker: str  # who asked (their person's owner string), for the audit
    unknown_asker: bool = False  # a DM whose asker Slack could not name: the default policy, and why is told


def access_for(question: Question, asker: SlackPerson, policies: Policies) -> Access:
    who = asker.person.owner
    if not question.is_dm:
        return Access(policies.for_channel(question.channel), channel_owner(question.team, question.channel), who)
    if asker.asker is None:
        return Access(policies.default, who, who, unknown_asker=True)
    return Access(dm_policy(asker, policies), who, who)


def dm_policy(asker: SlackPerson, policies: Policies) -> Policy:
    """A DM's policy: the asker's, or the default when Slack could not say who they are."""
    return policies.for_asker(asker.asker) if asker.asker is not None else policies.default


def wants_groups(policies: Policies) -> bool:
    """Whether any policy names a Slack user group (only then are a person's groups asked of Slack)."""
    return any(member.kind == "slack_usergroup" for policy in policies.policies for member in policy.members)

"""Which Slack events are questions, and why the rest are not. Pure: reads a payload and decides.

Answered: a mention (top level or in a thread), a direct message, and a reply in a thread the bot is
already part of (the caller checks that one; `Question.addressed` is False for it). One that starts with
`report:` asks for a report (a deeper analysis, bots/slack/report.py), never guessed from anything else. Ignored, with a
reason: edits, deletions, other bots, the bot's own messages, empty text, places not allowed, and a
channel message's `message` event when it mentions the bot (its `app_mention` answers it).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from slack_bolt.request.payload_utils import is_user_message_event_in_assistant_thread

from agent import linear_re

KNOWN_EVENTS = (
    "app_mention",
    "message",
    "app_home_opened",
    "assistant_thread_started",
    "assistant_thread_context_changed",
)
ANSWERED_SUBTYPES = (None, "thread_broadcast", "file_share")
REPORT_PREFIX = "report:"  # what asks for a report, at the start of the question (any case)
_MENTION = linear_re.compile(r"<@([UW][A-Z0-9]+)(?:\|[^>]*)?>")  # over a message's text


class Ignore(StrEnum):
    EDIT = "edit"
    DELETION = "deletion"
    OWN_MESSAGE = "own_message"
    BOT = "bot"
    SUBTYPE = "subtype"  # joins, topic changes, ...: not a question
    EMPTY = "empty"
    TEAM_NOT_ALLOWED = "team_not_allowed"
    CHANNEL_NOT_ALLOWED = "channel_not_allowed"
    NOT_ADDRESSED = "not_addressed"  # a channel message neither mentioning the bot nor in a thread of its
    MENTION_IN_MESSAGE = "mention_in_message"  # the same message's app_mention answers it
    OTHER_EVENT = "other_event"


@dataclass(frozen=True)
class Identity:
    """Who the bot is in its workspace (from auth.test)."""

    team_id: str
    user_id: str
    bot_id: str


@dataclass(frozen=True)
class Allowed:
    teams: frozenset[str] = frozenset()
    channels: frozenset[str] = frozenset()

    def admits_teams(self, installed: str, asker: str | None) -> bool:
        """Both the installing team and the asker's own must be listed (when a list is set): in a Slack
        Connect channel, or an org-wide Enterprise Grid install, the asker may belong to another team."""
        return not self.teams or (installed in self.teams and (asker is None or asker in self.teams))


def asker_team(body: dict[str, Any]) -> str | None:
    """The team of the person who wrote the event: `user_team` on a message (Slack Connect's shared-channel
    samples carry it beside `source_team`), else the event's `team`, else the envelope's `team_id`."""
    event = body.get("event") or {}
    team = event.get("user_team") or event.get("team") or body.get("team_id")
    return str(team) if team else None


@dataclass(frozen=True)
class Question:
    team: str
    channel: str
    user: str
    text: str
    ts: str  # the message's own ts
    thread_ts: str  # the thread it is in (its own ts at top level: the answer starts a thread)
    event_id: str
    is_dm: bool
    channel_type: str  # Slack's: channel, group, im, mpim
    assistant_thread: bool  # typed in Slack's assistant container: status and title apply
    addressed: bool  # a mention or a DM; else answered only in a thread the bot is part of
    parent_user_id: str | None
    received_at: float  # time.perf_counter() when it arrived
    asker_team: str | None = None  # the asker's own team (Slack Connect: another organisation's); None: `team`
    report: bool = False  # asked for a report ("report: ...", or a Dig deeper button), not an answer
    resume: str | None = None  # a partial report's id, to continue (its Resume button)

    @property
    def conversation_key(self) -> str:
        return conversation_key(self.team, self.channel, self.thread_ts)

    @property
    def message_key(self) -> str:
        return f"slack:message:{self.team}:{self.channel}:{self.ts}"


@dataclass(frozen=True)
class Ignored:
    reason: Ignore
    # A mention in a channel not allowed: a question all the same, refused (audited). Not part of what the
    # reason is: two ignores compare by their reason.
    refused: Question | None = field(default=None, compare=False)


def conversation_key(team: str, channel: str, thread_ts: str) -> str:
    return f"slack:{team}:{channel}:{thread_ts}"


def event_type(body: dict[str, Any]) -> str:
    """The event's type when it is one this bot knows, else `other` (a bounded metric label)."""
    kind = (body.get("event") or {}).get("type")
    return kind if kind in KNOWN_EVENTS else "other"


def read_question(
    body: dict[str, Any], me: Identity, allowed: Allowed, received_at: float, *, installed_team: str | None = None
) -> Question | Ignored:
    """`installed_team`: the team that installed the app, as Bolt's context has it (`context.team_id`, from
    the envelope's `authorizations`). In a Slack Connect channel the envelope's `team_id` is the other
    organisation's; the allowlist, the conversation key and the stream's recipient team are the installer's."""
    event: dict[str, Any] = body.get("event") or {}
    kind = event.get("type")
    if kind not in ("app_mention", "message"):
        return Ignored(Ignore.OTHER_EVENT)
    team = str(installed_team or me.team_id)
    if not allowed.admits_teams(team, asker_team(body)):
        return Ignored(Ignore.TEAM_NOT_ALLOWED)
    if ignored := _not_a_person(event, me):
        return Ignored(ignored)
    channel = str(event.get("channel") or "")
    is_dm = is_direct_message(event.get("channel_type"), channel)
    raw = str(event.get("text") or "")
    report, text = asked_for_report(question_text(raw, me.user_id))
    if not is_dm and allowed.channels and channel not in allowed.channels:
        # A mention there is still a question asked, refused: it is audited (never answered).
        asked = kind == "app_mention" and text
        refused = _question(body, team, channel, text, is_dm, received_at, report) if asked else None
        return Ignored(Ignore.CHANNEL_NOT_ALLOWED, refused)
    mentioned = me.user_id in _MENTION.findall(raw)
    if kind == "message" and mentioned and not is_dm:
        return Ignored(Ignore.MENTION_IN_MESSAGE)
    if not text:
        return Ignored(Ignore.EMPTY)
    if kind == "message" and not is_dm and not event.get("thread_ts"):
        return Ignored(Ignore.NOT_ADDRESSED)
    return _question(body, team, channel, text, is_dm, received_at, report)


def asked_for_report(text: str) -> tuple[bool, str]:
    """Whether `text` asks for a report (it starts with `report:`), and the question without the prefix."""
    if text[: len(REPORT_PREFIX)].casefold() == REPORT_PREFIX:
        return True, text[len(REPORT_PREFIX) :].strip()
    return False, text


def _question(
    body: dict[str, Any], team: str, channel: str, text: str, is_dm: bool, received_at: float, report: bool = False
) -> Question:
    event: dict[str, Any] = body["event"]
    kind = event.get("type")
    return Question(
        team=team,
        channel=channel,
        user=str(event["user"]),
        text=text,
        ts=str(event["ts"]),
        thread_ts=str(event.get("thread_ts") or event["ts"]),
        event_id=str(body.get("event_id") or ""),
        is_dm=is_dm,
        channel_type=str(event.get("channel_type") or channel_type_of(channel)),
        # As Bolt classifies it (its Assistant middleware runs on the same test): an IM message with a
        # thread_ts and no bot_id. Slack's own samples carry no `assistant_thread` key.
        assistant_thread=is_user_message_event_in_assistant_thread(body),
        addressed=kind == "app_mention" or is_dm,
        parent_user_id=event.get("parent_user_id"),
        received_at=received_at,
        asker_team=asker_team(body),
        report=report,
    )


def is_direct_message(channel_type: Any, channel: str) -> bool:
    """A DM only when the event's `channel_type` and the channel's id both say so. When they disagree the
    stricter reading wins (fail closed): a channel, under the channel's policy and its allowlist. An event
    without a channel_type (an app_mention) is not a DM either: Slack sends a DM as `message.im`."""
    return channel_type == "im" and channel.startswith("D")


def channel_type_of(channel: str) -> str:
    """An app_mention carries no channel_type: the ID's first letter says it (D: a DM, G: private)."""
    return {"D": "im", "G": "group"}.get(channel[:1], "channel")


def _not_a_person(event: dict[str, Any], me: Identity) -> Ignore | None:
    subtype = event.get("subtype")
    if subtype == "message_changed" or event.get("edited"):
        return Ignore.EDIT
    if subtype == "message_deleted":
        return Ignore.DELETION
    if event.get("user") == me.user_id or (event.get("bot_id") and event.get("bot_id") == me.bot_id):
        return Ignore.OWN_MESSAGE
    if event.get("bot_id") or subtype == "bot_message" or event.get("bot_profile"):
        return Ignore.BOT
    if subtype not in ANSWERED_SUBTYPES or not event.get("user") or not event.get("ts"):
        return Ignore.SUBTYPE
    return None


def question_text(raw: str, bot_user_id: str) -> str:
    """The text without the bot's mention, with Slack's three escapes undone and spaces collapsed
    (line breaks kept)."""
    text = _MENTION.sub(lambda m: "" if m.group(1) == bot_user_id else m.group(0), raw)
    text = text.replace("&lt;", "<").replace("&gt;", ">").replace("&amp;", "&")
    lines = (" ".join(line.split()) for line in text.splitlines())
    return "\n".join(line for line in lines if line)

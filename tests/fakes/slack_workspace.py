"""The in-memory workspace behind the fake Slack Web API: users, channels, messages, threads and files.

Messages are kept in Slack's wire shape (dicts), keyed by channel and `ts`. Thread fields on a parent
(`reply_count`, `latest_reply`, ...) are computed when a message is read, as Slack reports them.
"""

from __future__ import annotations

import base64
import itertools
import re
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from tests.fakes.slack_rules import SlackError

BOT_USER_ID = "U0BOT000001"
BOT_ID = "B0BOT000001"
APP_ID = "A0APP000001"
TEAM_ID = "T0TEAM00001"
HUMAN_ID = "U0ALICE0001"
HUMAN_EMAIL = "alice@example.com"
GENERAL_ID = "C0GENERAL01"
DM_ID = "D0ALICEDM01"
_MENTION = re.compile(r"(<@[UW][A-Z0-9]+>)")


@dataclass
class User:
    id: str
    name: str
    real_name: str = ""
    is_bot: bool = False
    bot_id: str | None = None
    deleted: bool = False
    tz: str = "Europe/London"
    tz_offset: int = 0
    email: str | None = None  # the profile's email, shown only to a token with users:read.email
    is_email_confirmed: bool = True
    team_id: str | None = None  # another organisation's person (Slack Connect); None: the workspace's own

    def to_api(self, team_id: str, *, with_email: bool = False) -> dict[str, Any]:
        """Slack's user object. "The users:read.email OAuth scope is now required to access the email field in
        user objects returned by the users.list and users.info web API methods. users:read is no longer a
        sufficient scope for this data field" (docs.slack.dev/reference/methods/users.info): without it the
        field is simply absent, the call still ok. `is_email_confirmed` as Slack's user objects carry it."""
        team_id = self.team_id or team_id
        profile: dict[str, Any] = {"real_name": self.real_name or self.name, "display_name": self.name, "team": team_id}
        if self.bot_id:
            profile["bot_id"] = self.bot_id
        if with_email and self.email:
            profile["email"] = self.email
        return {
            "id": self.id,
            "team_id": team_id,
            "name": self.name,
            "deleted": self.deleted,
            "real_name": self.real_name or self.name,
            "tz": self.tz,
            "tz_offset": self.tz_offset,
            "is_bot": self.is_bot,
            "is_app_user": False,
            "is_email_confirmed": self.is_email_confirmed,
            "updated": 1700000000,
            "profile": profile,
        }


@dataclass
class UserGroup:
    """A user group (`@data-team`), as usergroups.list shows it (docs.slack.dev/reference/methods/usergroups.list)."""

    id: str
    handle: str
    users: list[str] = field(default_factory=list)
    disabled: bool = False

    def to_api(self, team_id: str, *, with_users: bool) -> dict[str, Any]:
        group: dict[str, Any] = {
            "id": self.id,
            "team_id": team_id,
            "is_usergroup": True,
            "name": self.handle,
            "handle": self.handle,
            "date_delete": 1700000001 if self.disabled else 0,
            "user_count": len(self.users),
        }
        if with_users:
            group["users"] = list(self.users)
        return group


@dataclass
class Channel:
    id: str
    name: str = ""
    is_im: bool = False
    is_private: bool = False
    is_mpim: bool = False  # a group DM: private, with its own history scope (mpim:history)
    is_archived: bool = False
    is_member: bool = True
    user: str | None = None  # the other party of a DM
    members: set[str] = field(default_factory=set)
    created: int = 1700000000

    def to_api(self) -> dict[str, Any]:
        if self.is_im:
            return {"id": self.id, "created": self.created, "is_im": True, "is_org_shared": False, "user": self.user}
        return {
            "id": self.id,
            "name": self.name,
            "is_channel": not self.is_private,
            "is_group": self.is_private,
            "is_im": False,
            "is_mpim": self.is_mpim,
            "is_private": self.is_private,
            "is_archived": self.is_archived,
            "is_general": self.name == "general",
            "is_member": self.is_member,
            "created": self.created,
            "name_normalized": self.name,
        }


@dataclass
class UploadedFile:
    """One files_upload_v2 file: declared by files.getUploadURLExternal, bytes POSTed to the upload URL,
    shared by files.completeUploadExternal."""

    id: str
    ticket: str
    filename: str
    length: int
    alt_txt: str | None = None
    snippet_type: str | None = None
    data: bytes | None = None
    title: str | None = None
    channel: str | None = None
    thread_ts: str | None = None
    initial_comment: str | None = None
    completed: bool = False


@dataclass
class Stream:
    channel: str
    ts: str
    open: bool = True
    chunks: list[dict[str, Any]] = field(default_factory=list)
    stopped_by_user: bool = False
    mode: str | None = None  # how its content came: markdown_text or chunks (slack_chunks.check_same_mode)
    display: str = "timeline"  # task_display_mode
    plan_title: str = ""
    tasks: dict[str, dict[str, Any]] = field(default_factory=dict)  # each task's latest task_update, by id


class Workspace:
    def __init__(self, *, bot_name: str = "analyst", team: str = "Test Workspace") -> None:
        self.team_id, self.team, self.domain = TEAM_ID, team, "test-workspace"
        self.bot_user_id, self.bot_id, self.app_id, self.bot_name = BOT_USER_ID, BOT_ID, APP_ID, bot_name
        self.users: dict[str, User] = {}
        self.usergroups: dict[str, UserGroup] = {}
        self.channels: dict[str, Channel] = {}
        self.messages: dict[str, dict[str, dict[str, Any]]] = {}
        self.files: dict[str, UploadedFile] = {}
        self.ephemeral: list[dict[str, Any]] = []
        self.assistant_threads: dict[tuple[str, str], dict[str, Any]] = {}
        self.streams: dict[tuple[str, str], Stream] = {}
        self.markdown_sent: dict[tuple[str, str], str] = {}  # the markdown blocks' text a message was sent with
        self.pinned_prompts: dict[str, dict[str, Any]] = {}  # agent_view: prompts pinned on a DM, no thread
        self.views: dict[str, dict[str, Any]] = {}  # modals views.open opened, by view id
        self.exchanged_triggers: set[str] = set()  # a trigger_id opens one view (views.open)
        self.clock: Callable[[], float] = time.monotonic  # when a status was set; tests move it on
        # The team's file upload preference: "all", "images" (only images) or "none" (uploads disabled).
        self.file_uploads = "all"
        self.experience = "agent_view"  # the app's AI messaging experience: agent_view, or the legacy assistant_view
        self._last_micros = 0
        self._ids = itertools.count(1)
        self.add_user(BOT_USER_ID, bot_name, is_bot=True, bot_id=BOT_ID)
        self.add_user(HUMAN_ID, "alice", real_name="Alice Analyst", email=HUMAN_EMAIL)
        self.add_channel(GENERAL_ID, "general", members={HUMAN_ID})
        self.add_channel(DM_ID, is_im=True, user=HUMAN_ID)

    # --- seeding ---

    def add_user(self, id: str, name: str, **fields: Any) -> User:
        self.users[id] = User(id, name, **fields)
        return self.users[id]

    def add_usergroup(self, id: str, handle: str, users: list[str], **fields: Any) -> UserGroup:
        self.usergroups[id] = UserGroup(id, handle, list(users), **fields)
        return self.usergroups[id]

    def add_channel(self, id: str, name: str = "", *, members: set[str] | None = None, **fields: Any) -> Channel:
        channel = Channel(id, name, **fields)
        channel.members = {*(members or set()), *([channel.user] if channel.user else [])}
        if channel.is_member:
            channel.members.add(self.bot_user_id)
        self.channels[id] = channel
        self.messages.setdefault(id, {})
        return channel

    def add_message(self, channel: str, message: dict[str, Any], thread_ts: str | None = None) -> dict[str, Any]:
        """Store a message (a human's, another bot's or ours) and return it with its `ts`."""
        message = {"type": "message", **message}
        if message.get("text") and message.get("user") and "blocks" not in message and not message.get("subtype"):
            message["blocks"] = rich_text_blocks(message["text"])  # Slack renders text as rich_text blocks
        message.setdefault("ts", self.next_ts())
        message.setdefault("team", self.team_id)
        if thread_ts is not None:
            root = self.find_message(channel, thread_ts)
            root_ts = (root or {}).get("thread_ts", thread_ts)
            message["thread_ts"] = root_ts
            parent = self.find_message(channel, root_ts)
            if parent is not None and parent.get("user"):
                message["parent_user_id"] = parent["user"]
        self.messages.setdefault(channel, {})[message["ts"]] = message
        self.translate_markdown(channel, message)
        if message.get("bot_id") == self.bot_id and "thread_ts" in message:
            self._clear_status(channel, message["thread_ts"])
        return message

    def _clear_status(self, channel: str, thread_ts: str) -> None:
        """ "The status will be automatically cleared when the app sends a reply"
        (docs.slack.dev/reference/methods/assistant.threads.setStatus, Usage info)."""
        thread = self.assistant_threads.get((channel, thread_ts))
        if thread is not None and thread.get("status"):
            thread["status"] = ""
            thread.setdefault("cleared_by_reply", 0)
            thread["cleared_by_reply"] += 1

    def translate_markdown(self, channel: str, message: dict[str, Any]) -> None:
        """Slack does not keep a `markdown` block: "Providing it in a markdown block leaves the translating
        to Slack ... Note that passing a single block may result in multiple blocks after translation"
        (docs.slack.dev/reference/block-kit/blocks/markdown-block, and the MarkdownBlock type of
        docs.slack.dev/tools/node-slack-sdk). Reading the message back gives the translation (here:
        rich_text blocks, a paragraph each, Markdown's markers gone), never the Markdown that was sent;
        `markdown_sent` keeps that for tests that ask what the app sent."""
        blocks = message.get("blocks") or []
        markdown = [b["text"] for b in blocks if b.get("type") == "markdown"]
        if not markdown:
            self.markdown_sent.pop((channel, message["ts"]), None)
            return
        self.markdown_sent[(channel, message["ts"])] = "".join(markdown)
        translated: list[dict[str, Any]] = []
        for block in blocks:
            translated += markdown_translation(block["text"]) if block.get("type") == "markdown" else [block]
        message["blocks"] = translated

    def bot_message(self, text: str, **fields: Any) -> dict[str, Any]:
        return {
            "user": self.bot_user_id,
            "bot_id": self.bot_id,
            "app_id": self.app_id,
            "text": text,
            "bot_profile": {"id": self.bot_id, "app_id": self.app_id, "name": self.bot_name, "team_id": self.team_id},
            **{k: v for k, v in fields.items() if v is not None},
        }

    def next_ts(self) -> str:
        """A fresh, strictly increasing message timestamp in Slack's `seconds.micros` format."""
        self._last_micros = max(int(time.time() * 1_000_000), self._last_micros + 1)
        return f"{self._last_micros // 1_000_000}.{self._last_micros % 1_000_000:06d}"

    def new_id(self, prefix: str) -> str:
        return f"{prefix}0{next(self._ids):09d}"

    # --- lookups ---

    def channel(self, value: Any) -> Channel:
        """A channel by ID or name (`general`, `#general`), as chat.postMessage accepts them."""
        if isinstance(value, str):
            if value in self.channels:
                return self.channels[value]
            for channel in self.channels.values():
                if channel.name and channel.name == value.removeprefix("#"):
                    return channel
        raise SlackError("channel_not_found")

    def visible_channel(self, value: Any) -> Channel:
        channel = self.channel(value)
        if channel.is_private and not channel.is_member:
            raise SlackError("channel_not_found")
        return channel

    def find_message(self, channel: str, ts: Any) -> dict[str, Any] | None:
        return self.messages.get(channel, {}).get(ts) if isinstance(ts, str) else None

    def replies(self, channel: str, thread_ts: str) -> list[dict[str, Any]]:
        return sorted(
            (
                m
                for m in self.messages.get(channel, {}).values()
                if m.get("thread_ts") == thread_ts and m["ts"] != thread_ts
            ),
            key=lambda m: ts_key(m["ts"]),
        )

    def thread(self, channel: str, thread_ts: str) -> list[dict[str, Any]]:
        parent = self.find_message(channel, thread_ts)
        return ([parent] if parent else []) + self.replies(channel, thread_ts)

    def view(self, channel: str, message: dict[str, Any], *, metadata: bool = True) -> dict[str, Any]:
        """A message as conversations.history/replies report it: thread counters on a parent, metadata
        only when asked for (`include_all_metadata`)."""
        shown = {k: v for k, v in message.items() if metadata or k != "metadata"}
        replies = (
            self.replies(channel, message["ts"]) if message.get("thread_ts", message["ts"]) == message["ts"] else []
        )
        if replies:
            users = list(dict.fromkeys(r.get("user") or r.get("bot_id") for r in replies))
            shown.update(
                thread_ts=message["ts"],
                reply_count=len(replies),
                reply_users_count=len(users),
                reply_users=users,
                latest_reply=replies[-1]["ts"],
                is_locked=False,
                subscribed=False,
            )
        return shown


def rich_text_blocks(text: str) -> list[dict[str, Any]]:
    """The `rich_text` block Slack derives from a message's text (mentions become user elements)."""
    elements = [
        {"type": "user", "user_id": piece[2:-1]} if _MENTION.fullmatch(piece) else {"type": "text", "text": piece}
        for piece in _MENTION.split(text)
        if piece
    ]
    section = {"type": "rich_text_section", "elements": elements}
    return [{"type": "rich_text", "block_id": uuid.uuid4().hex[:5], "elements": [section]}]


_MARKERS = re.compile(r"\*\*|__|~~|`")


def markdown_translation(markdown: str) -> list[dict[str, Any]]:
    """What Slack stores for one markdown block: rich_text blocks, one per paragraph; a fenced code block
    becomes preformatted text; emphasis and code markers become styles (dropped here)."""
    blocks = []
    for paragraph in re.split(r"\n{2,}", markdown.strip()):
        if paragraph.startswith("```"):
            code = paragraph.strip("`").removeprefix("\n")
            element = {"type": "rich_text_preformatted", "elements": [{"type": "text", "text": code}]}
        else:
            plain = _MARKERS.sub("", paragraph)
            element = {"type": "rich_text_section", "elements": [{"type": "text", "text": plain}]}
        blocks.append({"type": "rich_text", "block_id": uuid.uuid4().hex[:5], "elements": [element]})
    return blocks


def ts_key(ts: str) -> tuple[int, int]:
    seconds, _, micros = ts.partition(".")
    return int(seconds), int(micros.ljust(6, "0")[:6] or 0)


def cursor_for(ts: str) -> str:
    return base64.b64encode(f"next_ts:{ts}".encode()).decode()


def ts_from_cursor(cursor: str) -> str:
    try:
        decoded = base64.b64decode(cursor.encode(), validate=True).decode()
    except ValueError:
        raise SlackError("invalid_cursor") from None
    if not decoded.startswith("next_ts:"):
        raise SlackError("invalid_cursor")
    return decoded.removeprefix("next_ts:")


def upload_ticket() -> str:
    return uuid.uuid4().hex

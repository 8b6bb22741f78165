"""The Web API methods of the fake Slack, each reading and changing a `Workspace` the way Slack does.

A method takes the parsed arguments and returns the `ok: true` body, or raises `SlackError`. Argument
names, required arguments and error codes follow the method reference pages on docs.slack.dev (as
mirrored in smstoslack/slack_kit priv/docs/methods/*.json) and slack_sdk's WebClient signatures.
"""

from __future__ import annotations

import base64
import json
import mimetypes
import re
import time
import uuid
from collections.abc import Callable
from typing import Any

from tests.fakes import slack_chunks
from tests.fakes import slack_rules as rules
from tests.fakes.slack_rules import SlackError, flag, integer, json_arg, required
from tests.fakes.slack_scopes import EMAIL_SCOPE
from tests.fakes.slack_workspace import (
    Channel,
    Stream,
    UploadedFile,
    Workspace,
    cursor_for,
    rich_text_blocks,
    ts_from_cursor,
    ts_key,
    upload_ticket,
)

_EMOJI_NAME = re.compile(r"^[a-z0-9_+'-]+(::skin-tone-[2-6])?$")
_TRIGGER = re.compile(r"^\d+\.\d+\.[0-9a-f]+$")  # "132456.7890123.abcdef" (views.open's reference)
TRIGGER_LIFE_S = 3
TRUNCATED = "[WARN] Your message was truncated but still posted. The `text` field accepts up to 40,000 characters."

Method = Callable[[dict[str, Any]], dict[str, Any]]


class WebApi:
    def __init__(
        self,
        workspace: Workspace,
        *,
        upload_url: Callable[[str], str],
        socket_url: Callable[[], str | None],
        granted: Callable[[], frozenset[str]] = frozenset,
    ):
        self.ws = workspace
        self.upload_url = upload_url
        self.socket_url = socket_url
        self.granted = granted  # the bot token's scopes now: what a method shows can depend on them
        self.methods: dict[str, Method] = {
            "auth.test": self.auth_test,
            "chat.postMessage": self.chat_post_message,
            "chat.postEphemeral": self.chat_post_ephemeral,
            "chat.update": self.chat_update,
            "chat.delete": self.chat_delete,
            "chat.startStream": self.chat_start_stream,
            "chat.appendStream": self.chat_append_stream,
            "chat.stopStream": self.chat_stop_stream,
            "conversations.replies": self.conversations_replies,
            "conversations.history": self.conversations_history,
            "conversations.info": self.conversations_info,
            "conversations.members": self.conversations_members,
            "users.info": self.users_info,
            "users.lookupByEmail": self.users_lookup_by_email,
            "usergroups.list": self.usergroups_list,
            "usergroups.users.list": self.usergroups_users_list,
            "reactions.add": self.reactions_add,
            "assistant.threads.setStatus": self.assistant_set_status,
            "assistant.threads.setSuggestedPrompts": self.assistant_set_suggested_prompts,
            "assistant.threads.setTitle": self.assistant_set_title,
            "files.getUploadURLExternal": self.files_get_upload_url,
            "files.completeUploadExternal": self.files_complete_upload,
            "apps.connections.open": self.apps_connections_open,
            "views.open": self.views_open,
        }

    # --- auth / socket mode ---

    def auth_test(self, args: dict[str, Any]) -> dict[str, Any]:
        ws = self.ws
        return {
            "ok": True,
            "url": f"https://{ws.domain}.slack.com/",
            "team": ws.team,
            "user": ws.bot_name,
            "team_id": ws.team_id,
            "user_id": ws.bot_user_id,
            "bot_id": ws.bot_id,
            "is_enterprise_install": False,
        }

    def apps_connections_open(self, args: dict[str, Any]) -> dict[str, Any]:
        url = self.socket_url()
        if url is None:
            raise SlackError("internal_error", "fake: no FakeSocketMode is attached to this FakeSlack")
        return {"ok": True, "url": url}

    # --- chat ---

    def chat_post_message(self, args: dict[str, Any]) -> dict[str, Any]:
        channel = self._writable(required(args, "channel"))
        content, warned = _content(args, truncate=True)
        thread_ts = _thread_ts(args)
        metadata = rules.check_metadata(json_arg(args, "metadata", "invalid_metadata_format"))
        fields = {**content, "metadata": metadata}
        if thread_ts and flag(args, "reply_broadcast"):
            fields["subtype"] = "thread_broadcast"
        message = self.ws.add_message(channel.id, self.ws.bot_message(**fields), thread_ts)
        body = {"ok": True, "channel": channel.id, "ts": message["ts"], "message": dict(message)}
        if warned:
            body.update(
                warning="message_truncated",
                response_metadata={"messages": [TRUNCATED], "warnings": ["message_truncated"]},
            )
        return body

    def chat_post_ephemeral(self, args: dict[str, Any]) -> dict[str, Any]:
        channel = self._writable(required(args, "channel"))
        user = required(args, "user")
        content, _ = _content(args, truncate=True)
        if user not in channel.members:
            raise SlackError("user_not_in_channel")
        ts = self.ws.next_ts()
        self.ws.ephemeral.append(
            {"channel": channel.id, "user": user, "message_ts": ts, "thread_ts": _thread_ts(args), **content}
        )
        return {"ok": True, "message_ts": ts}

    def chat_update(self, args: dict[str, Any]) -> dict[str, Any]:
        channel = self.ws.visible_channel(required(args, "channel"))
        message = self._own_message(channel, required(args, "ts"), not_owned="cant_update_message")
        stream = self.ws.streams.get((channel.id, message["ts"]))
        if stream is not None and stream.open:
            raise SlackError("streaming_state_conflict")
        content, _ = _content(args, truncate=False)
        metadata = rules.check_metadata(json_arg(args, "metadata", "invalid_metadata_format"), allow_empty=True)
        if "text" in content and "blocks" not in content:
            # "previous blocks will only be retained if the text argument is not provided"; Slack renders the new text.
            content["blocks"] = rich_text_blocks(content["text"]) if content["text"] else []
        message.update(content)
        self.ws.translate_markdown(channel.id, message)
        if metadata == {}:
            message.pop("metadata", None)
        elif metadata is not None:
            message["metadata"] = metadata
        message["edited"] = {"user": self.ws.bot_user_id, "ts": self.ws.next_ts()}
        return {
            "ok": True,
            "channel": channel.id,
            "ts": message["ts"],
            "text": message.get("text", ""),
            "message": dict(message),
        }

    def chat_delete(self, args: dict[str, Any]) -> dict[str, Any]:
        channel = self.ws.visible_channel(required(args, "channel"))
        message = self._own_message(channel, required(args, "ts"), not_owned="cant_delete_message")
        messages = self.ws.messages[channel.id]
        if self.ws.replies(channel.id, message["ts"]):
            # A parent with replies leaves a tombstone so the thread survives, as in Slack.
            messages[message["ts"]] = {
                "type": "message",
                "subtype": "tombstone",
                "text": "This message was deleted.",
                "user": "USLACKBOT",
                "hidden": True,
                "ts": message["ts"],
                "thread_ts": message["ts"],
            }
        else:
            del messages[message["ts"]]
        return {"ok": True, "channel": channel.id, "ts": message["ts"]}

    # --- streaming (chat.startStream / appendStream / stopStream) ---

    def chat_start_stream(self, args: dict[str, Any]) -> dict[str, Any]:
        channel = self._writable(required(args, "channel"))
        thread_ts = rules.check_ts(required(args, "thread_ts"), "invalid_thread_ts", "thread_ts")
        if not channel.is_im:
            # "Required when streaming to channels" (recipient_team_id / recipient_user_id).
            if not args.get("recipient_team_id"):
                raise SlackError("missing_recipient_team_id")
            if not args.get("recipient_user_id"):
                raise SlackError("missing_recipient_user_id")
        markdown = rules.check_markdown_text(args.get("markdown_text"))
        chunks = slack_chunks.check_chunks(json_arg(args, "chunks", "invalid_chunks")) or []
        display = slack_chunks.check_display_mode(args.get("task_display_mode"))
        message = self.ws.add_message(channel.id, self.ws.bot_message(""), thread_ts)
        stream = Stream(channel.id, message["ts"], mode=slack_chunks.streaming_mode(markdown, chunks), display=display)
        self.ws.streams[(channel.id, message["ts"])] = stream
        _stream_into(message, stream, markdown, chunks)
        return {"ok": True, "channel": channel.id, "ts": message["ts"]}

    def chat_append_stream(self, args: dict[str, Any]) -> dict[str, Any]:
        channel, message, stream = self._open_stream(args)
        markdown = rules.check_markdown_text(args.get("markdown_text"))
        chunks = slack_chunks.check_chunks(json_arg(args, "chunks", "invalid_chunks"))
        if not markdown and not chunks:
            raise SlackError("no_text")
        _same_mode(stream, markdown, chunks)
        _stream_into(message, stream, markdown, chunks or [])
        return {"ok": True, "channel": channel.id, "ts": message["ts"]}

    def chat_stop_stream(self, args: dict[str, Any]) -> dict[str, Any]:
        channel, message, stream = self._open_stream(args)
        markdown = rules.check_markdown_text(args.get("markdown_text"))
        chunks = slack_chunks.check_chunks(json_arg(args, "chunks", "invalid_chunks")) or []
        _same_mode(stream, markdown, chunks)
        blocks = json_arg(args, "blocks", "invalid_blocks_format")
        if blocks is not None:
            # stopStream's own `blocks` has its own limit of 50, separate from blocks sent in chunks.
            rules.check_blocks(blocks, too_many="msg_blocks_too_many")
        metadata = rules.check_metadata(json_arg(args, "metadata", "invalid_metadata_format"))
        if metadata is not None:
            message["metadata"] = metadata
        # "any blocks in the blocks array will be rendered after anything passed via chunks or markdown_text"
        _stream_into(message, stream, markdown, chunks, trailing_blocks=blocks or [])
        stream.open = False
        return {"ok": True, "channel": channel.id, "ts": message["ts"], "message": dict(message)}

    def _open_stream(self, args: dict[str, Any]) -> tuple[Channel, dict[str, Any], Stream]:
        channel = self.ws.visible_channel(required(args, "channel"))
        message = self._own_message(channel, required(args, "ts"), not_owned="message_not_owned_by_app")
        stream = self.ws.streams.get((channel.id, message["ts"]))
        if stream is not None and stream.stopped_by_user:
            # A stream its reader stopped (the Stop button under a streaming answer) is refused with
            # `stopped_by_user`, unlike an expired one. Not yet among the errors on
            # docs.slack.dev/reference/methods/chat.appendStream; the code Slack sends, as issue 17 reports it.
            raise SlackError("stopped_by_user")
        if stream is None or not stream.open:
            raise SlackError("message_not_in_streaming_state")
        return channel, message, stream

    # --- conversations / users / reactions ---

    def conversations_replies(self, args: dict[str, Any]) -> dict[str, Any]:
        channel = self.ws.visible_channel(required(args, "channel"))
        target = self.ws.find_message(channel.id, required(args, "ts"))
        if target is None:
            raise SlackError("thread_not_found")
        root_ts = target.get("thread_ts", target["ts"])
        thread = self.ws.thread(channel.id, root_ts) or [target]
        return self._page(channel, thread, args, default_limit=1000)

    def conversations_history(self, args: dict[str, Any]) -> dict[str, Any]:
        channel = self.ws.visible_channel(required(args, "channel"))
        if not channel.is_member and not channel.is_im:
            raise SlackError("not_in_channel")
        top_level = [
            m
            for m in self.ws.messages[channel.id].values()
            if m.get("thread_ts", m["ts"]) == m["ts"] or m.get("subtype") == "thread_broadcast"
        ]
        top_level.sort(key=lambda m: ts_key(m["ts"]), reverse=True)
        return {**self._page(channel, top_level, args, default_limit=100), "pin_count": 0}

    def _page(
        self, channel: Channel, messages: list[dict[str, Any]], args: dict[str, Any], default_limit: int
    ) -> dict[str, Any]:
        inclusive = flag(args, "inclusive")
        oldest, latest = args.get("oldest"), args.get("latest")
        for bound, error in ((oldest, "invalid_ts_oldest"), (latest, "invalid_ts_latest")):
            if bound is not None and not re.match(r"^\d+(\.\d+)?$", str(bound)):
                raise SlackError(error)
        if oldest is not None:
            messages = [
                m for m in messages if ts_key(m["ts"]) > ts_key(str(oldest)) or (inclusive and m["ts"] == str(oldest))
            ]
        if latest is not None:
            messages = [
                m for m in messages if ts_key(m["ts"]) < ts_key(str(latest)) or (inclusive and m["ts"] == str(latest))
            ]
        if args.get("cursor"):
            start = ts_from_cursor(str(args["cursor"]))
            messages = messages[next((i for i, m in enumerate(messages) if m["ts"] == start), len(messages)) :]
        limit = max(1, min(integer(args, "limit", default_limit), 1000))
        page, rest = messages[:limit], messages[limit:]
        metadata = flag(args, "include_all_metadata")
        return {
            "ok": True,
            "messages": [self.ws.view(channel.id, m, metadata=metadata) for m in page],
            "has_more": bool(rest),
            "response_metadata": {"next_cursor": cursor_for(rest[0]["ts"]) if rest else ""},
        }

    def conversations_info(self, args: dict[str, Any]) -> dict[str, Any]:
        return {"ok": True, "channel": self.ws.visible_channel(required(args, "channel")).to_api()}

    def conversations_members(self, args: dict[str, Any]) -> dict[str, Any]:
        """Member ids a page at a time (docs.slack.dev/reference/methods/conversations.members: `limit` default
        100, "Fewer than the requested number of items may be returned"; `response_metadata.next_cursor`
        empty on the last page; errors channel_not_found, invalid_cursor, invalid_limit)."""
        channel = self.ws.visible_channel(required(args, "channel"))
        members = sorted(channel.members)
        limit = integer(args, "limit", 100)
        if not 1 <= limit <= 1000:
            raise SlackError("invalid_limit")
        start = 0
        if args.get("cursor"):
            start = _member_index(str(args["cursor"]), members)
        page, rest = members[start : start + limit], members[start + limit :]
        next_cursor = _member_cursor(rest[0]) if rest else ""
        return {"ok": True, "members": page, "response_metadata": {"next_cursor": next_cursor}}

    def users_info(self, args: dict[str, Any]) -> dict[str, Any]:
        user = self.ws.users.get(required(args, "user"))
        if user is None:
            raise SlackError("user_not_found")
        return {"ok": True, "user": user.to_api(self.ws.team_id, with_email=EMAIL_SCOPE in self.granted())}

    def users_lookup_by_email(self, args: dict[str, Any]) -> dict[str, Any]:
        """docs.slack.dev/reference/methods/users.lookupByEmail: "Retrieve a single user by looking them up by
        their registered email address"; an address nobody has is `users_not_found`."""
        email = str(required(args, "email")).casefold()
        for user in self.ws.users.values():
            if user.email and user.email.casefold() == email and not user.is_bot:
                return {"ok": True, "user": user.to_api(self.ws.team_id, with_email=True)}
        raise SlackError("users_not_found")

    def usergroups_list(self, args: dict[str, Any]) -> dict[str, Any]:
        """docs.slack.dev/reference/methods/usergroups.list: every group of the team, disabled ones only with
        `include_disabled`, each group's member ids only with `include_users`."""
        with_users, disabled = flag(args, "include_users"), flag(args, "include_disabled")
        groups = [g for g in self.ws.usergroups.values() if disabled or not g.disabled]
        return {"ok": True, "usergroups": [g.to_api(self.ws.team_id, with_users=with_users) for g in groups]}

    def usergroups_users_list(self, args: dict[str, Any]) -> dict[str, Any]:
        group = self.ws.usergroups.get(str(required(args, "usergroup")))
        if group is None:
            raise SlackError("no_such_subteam")
        return {"ok": True, "users": list(group.users)}

    def reactions_add(self, args: dict[str, Any]) -> dict[str, Any]:
        channel = self.ws.visible_channel(required(args, "channel"))
        name, timestamp = required(args, "name"), required(args, "timestamp")
        rules.check_ts(timestamp, "bad_timestamp", "timestamp")
        message = self.ws.find_message(channel.id, timestamp)
        if message is None:
            raise SlackError("message_not_found")
        if not isinstance(name, str) or not _EMOJI_NAME.match(name):
            raise SlackError("invalid_name")
        reactions = message.setdefault("reactions", [])
        reaction = next((r for r in reactions if r["name"] == name), None)
        if reaction is None:
            reaction = {"name": name, "users": [], "count": 0}
            reactions.append(reaction)
        if self.ws.bot_user_id in reaction["users"]:
            raise SlackError("already_reacted")
        reaction["users"].append(self.ws.bot_user_id)
        reaction["count"] += 1
        return {"ok": True}

    # --- assistant threads ---

    def assistant_set_status(self, args: dict[str, Any]) -> dict[str, Any]:
        thread = self._assistant_thread(args)
        status = required(args, "status")
        loading = json_arg(args, "loading_messages", "invalid_arguments")
        if loading is not None and (not isinstance(loading, list) or len(loading) > rules.MAX_LOADING_MESSAGES):
            raise SlackError(
                "invalid_arguments",
                f"no more than {rules.MAX_LOADING_MESSAGES} items allowed [json-pointer:/loading_messages]",
            )
        # "A two minute timeout applies, which will cause the status to be removed if no message has been
        # sent" (docs.slack.dev/reference/methods/assistant.threads.setStatus): FakeSlack.shown_status.
        thread.update(status=status, loading_messages=loading, status_set_at=self.ws.clock())
        thread.setdefault("status_history", []).append(status)
        return {"ok": True}

    def assistant_set_suggested_prompts(self, args: dict[str, Any]) -> dict[str, Any]:
        """docs.slack.dev/reference/methods/assistant.threads.setSuggestedPrompts: thread_ts is optional; "If
        not provided, the prompts will be set for the latest message in the channel." And: "The thread_ts
        parameter should only be used in the legacy assistant messaging experience. Including it in a call
        for an agent app will cause the call to silently fail" (an agent_view app's prompts are pinned on
        the DM itself, docs.slack.dev/ai/migrating-to-agent-messaging)."""
        prompts = json_arg({"prompts": required(args, "prompts")}, "prompts", "invalid_arguments")
        valid = (
            isinstance(prompts, list)
            and 0 < len(prompts) <= rules.MAX_SUGGESTED_PROMPTS
            and all(
                isinstance(p, dict) and isinstance(p.get("title"), str) and isinstance(p.get("message"), str)
                for p in prompts
            )
        )
        if not valid:
            raise SlackError(
                "invalid_arguments", "prompts must be 1 to 4 objects with title and message [json-pointer:/prompts]"
            )
        shown = {"prompts": prompts, "prompts_title": args.get("title")}
        if self.ws.experience == "agent_view":
            channel = self.ws.visible_channel(required(args, "channel_id"))
            if args.get("thread_ts"):
                return {"ok": True}  # silently fails: ok, and nothing shown
            if channel.is_im:
                self.ws.pinned_prompts[channel.id] = shown
                return {"ok": True}
            # Prompts pinned anywhere but the app's DM are not documented: the fake takes the general rule
            # ("the latest message in the channel"), so a call the docs do not promise can fail here.
        if not args.get("thread_ts"):
            channel = self.ws.visible_channel(required(args, "channel_id"))
            latest = max(self.ws.messages.get(channel.id, {}), key=ts_key, default=None)
            if latest is None:
                raise SlackError("message_not_found")
            args = {**args, "thread_ts": latest}
        self._assistant_thread(args).update(shown)
        return {"ok": True}

    def assistant_set_title(self, args: dict[str, Any]) -> dict[str, Any]:
        thread = self._assistant_thread(args)
        thread["title"] = required(args, "title")
        root = self.ws.find_message(str(args["channel_id"]), args["thread_ts"])
        if root is not None and "assistant_app_thread" in root:
            root["assistant_app_thread"] = {**root["assistant_app_thread"], "title": thread["title"]}
        return {"ok": True}

    def _assistant_thread(self, args: dict[str, Any]) -> dict[str, Any]:
        channel = self.ws.visible_channel(required(args, "channel_id"))
        thread_ts = rules.check_ts(required(args, "thread_ts"), "invalid_thread_ts", "thread_ts")
        if self.ws.find_message(channel.id, thread_ts) is None:
            raise SlackError("invalid_thread_ts")
        return self.ws.assistant_threads.setdefault((channel.id, thread_ts), {})

    # --- files (files_upload_v2) ---

    def files_get_upload_url(self, args: dict[str, Any]) -> dict[str, Any]:
        """docs.slack.dev/reference/methods/files.getUploadURLExternal (its errors as slack_kit's
        priv/docs/methods/files.getUploadURLExternal.json mirrors them): `filename` and `length` required,
        "missing_argument: ... Typically only occurs when the `length` provided is 0", `alt_txt_too_large` past
        1,000 characters, "snippet_too_large: ... snippets, which are limited to 1MB", and the team's upload
        preference (`file_uploads_disabled`, `file_uploads_except_images_disabled`)."""
        filename = str(required(args, "filename"))
        length = integer({"length": required(args, "length")}, "length", 0)
        if length <= 0:
            raise SlackError("missing_argument")
        alt_txt = args.get("alt_txt")
        if alt_txt is not None and len(str(alt_txt)) > rules.MAX_ALT_TXT:
            raise SlackError("alt_txt_too_large")
        if args.get("snippet_type") and length > rules.MAX_SNIPPET_BYTES:
            raise SlackError("snippet_too_large")
        self._uploads_allowed(filename)
        file = UploadedFile(self.ws.new_id("F"), upload_ticket(), filename, length, alt_txt, args.get("snippet_type"))
        self.ws.files[file.id] = file
        return {"ok": True, "upload_url": self.upload_url(file.ticket), "file_id": file.id}

    def files_complete_upload(self, args: dict[str, Any]) -> dict[str, Any]:
        """docs.slack.dev/reference/methods/files.completeUploadExternal: `files` (ids and optional titles)
        required; shared in `channel_id` and/or `channels` ("channels_limit_exceeded: ... A maximum of 100
        channels is allowed per request"), in `thread_ts`'s thread ("make sure to provide only one channel when
        using 'thread_ts'": more is refused here with invalid_arguments, a code the page does not name), with
        `initial_comment` as the share's text, else `blocks` ("If the `initial_comment` field is provided, the
        `blocks` field is ignored"). No channel: the file stays private, and no message is posted."""
        entries = json_arg({"files": required(args, "files")}, "files", "invalid_arguments")
        if not isinstance(entries, list) or not entries or not all(isinstance(e, dict) and "id" in e for e in entries):
            raise SlackError("invalid_arguments", "files must be an array of objects with id [json-pointer:/files]")
        files = [self.ws.files.get(e["id"]) for e in entries]
        if any(f is None or f.data is None or f.completed for f in files):
            raise SlackError("file_not_found")
        channel_ids = [c for c in str(args.get("channels") or "").split(",") if c]
        if args.get("channel_id"):
            channel_ids.insert(0, str(args["channel_id"]))
        if len(channel_ids) > rules.MAX_SHARE_CHANNELS:
            raise SlackError("channels_limit_exceeded")
        thread_ts = _thread_ts(args)
        if thread_ts and len(channel_ids) > 1:
            raise SlackError("invalid_arguments", "provide only one channel when using thread_ts")
        channels = [self._writable(c) for c in channel_ids]
        for file in files:
            assert file is not None
            self._uploads_allowed(file.filename)
        comment = args.get("initial_comment") or ""
        blocks = json_arg(args, "blocks", "invalid_blocks")
        if blocks is not None:
            rules.check_blocks(blocks)
        shared: list[UploadedFile] = []
        for entry, file in zip(entries, files, strict=True):
            assert file is not None
            file.title = entry.get("title") or file.filename
            file.channel = channels[0].id if channels else None
            file.thread_ts, file.initial_comment, file.completed = thread_ts, comment or None, True
            shared.append(file)
        for channel in channels:
            views = [self._file_view(f, [channel.id]) for f in shared]
            message = self.ws.bot_message(comment, files=views, upload=True)
            if blocks and not comment:
                message["blocks"] = blocks
            self.ws.add_message(channel.id, message, thread_ts)
        return {"ok": True, "files": [self._file_view(f, [c.id for c in channels]) for f in shared]}

    def _uploads_allowed(self, filename: str) -> None:
        """The team's file upload preference (Workspace.file_uploads): all, images only, or none."""
        if self.ws.file_uploads == "none":
            raise SlackError("file_uploads_disabled")
        is_image = (mimetypes.guess_type(filename)[0] or "").startswith("image/")
        if self.ws.file_uploads == "images" and not is_image:
            raise SlackError("file_uploads_except_images_disabled")

    def _file_view(self, file: UploadedFile, channels: list[str]) -> dict[str, Any]:
        mimetype = mimetypes.guess_type(file.filename)[0] or "application/octet-stream"
        view = {
            "id": file.id,
            "name": file.filename,
            "title": file.title,
            "mimetype": mimetype,
            "filetype": file.filename.rsplit(".", 1)[-1] if "." in file.filename else "binary",
            "user": self.ws.bot_user_id,
            "size": len(file.data or b""),
            "mode": "hosted",
            "is_external": False,
            "url_private": f"https://files.slack.com/files-pri/{self.ws.team_id}-{file.id}/{file.filename}",
            "channels": channels,
        }
        return {**view, "alt_txt": file.alt_txt} if file.alt_txt else view

    # --- views ---

    def views_open(self, args: dict[str, Any]) -> dict[str, Any]:
        """docs.slack.dev/reference/methods/views.open: `view` (required, JSON) opened for the user whose
        interaction gave `trigger_id`. Errors as its reference lists them: `invalid_trigger_id` ("The expected
        format for the trigger_id argument is "132456.7890123.abcdef""), `exchanged_trigger_id` ("already
        exchanged in a previous call"), `expired_trigger_id` (a trigger "expires in three seconds":
        docs.slack.dev/interactivity/handling-user-interaction), `view_too_large` (over 250 kB). The view's
        own limits (docs.slack.dev/reference/views/modal-views: title, submit and close up to 24 characters,
        100 blocks, private_metadata up to 3,000 characters, callback_id up to 255) answer
        `invalid_arguments`."""
        trigger = args.get("trigger_id")
        view = json_arg(args, "view", "invalid_arguments")
        if not isinstance(view, dict):
            raise SlackError("invalid_arguments", "missing required field: view")
        if not isinstance(trigger, str) or not _TRIGGER.fullmatch(trigger):
            raise SlackError("invalid_trigger_id")
        if trigger in self.ws.exchanged_triggers:
            raise SlackError("exchanged_trigger_id")
        if time.time() - int(trigger.split(".")[0]) > TRIGGER_LIFE_S:
            raise SlackError("expired_trigger_id")
        if len(json.dumps(view)) > 250_000:
            raise SlackError("view_too_large")
        _check_modal(view)
        self.ws.exchanged_triggers.add(trigger)
        opened = {
            **view,
            "id": self.ws.new_id("V"),
            "team_id": self.ws.team_id,
            "state": {"values": {}},
            "hash": f"{int(time.time())}.{uuid.uuid4().hex[:8]}",
            "app_id": self.ws.app_id,
            "bot_id": self.ws.bot_id,
            "root_view_id": None,
            "previous_view_id": None,
        }
        opened["root_view_id"] = opened["id"]
        self.ws.views[opened["id"]] = opened
        # docs.slack.dev/reference/methods/views.open, "Response": {"ok": true, "view": {...}}
        return {"ok": True, "view": opened}

    # --- shared checks ---

    def _writable(self, value: Any) -> Channel:
        channel = self.ws.visible_channel(value)
        if channel.is_archived:
            raise SlackError("is_archived")
        if not channel.is_member and not channel.is_im:
            raise SlackError("not_in_channel")
        return channel

    def _own_message(self, channel: Channel, ts: Any, *, not_owned: str) -> dict[str, Any]:
        message = self.ws.find_message(channel.id, ts)
        if message is None:
            raise SlackError("message_not_found")
        if message.get("bot_id") != self.ws.bot_id:
            raise SlackError(not_owned)
        return message


def _check_modal(view: dict[str, Any]) -> None:
    if view.get("type") != "modal":
        raise SlackError("invalid_arguments", "view.type must be modal")
    for name in ("title", "submit", "close"):
        text = (view.get(name) or {}).get("text", "")
        if (name == "title" and not text) or len(text) > 24:
            raise SlackError("invalid_arguments", f"view.{name}.text must be 1 to 24 characters")
    blocks = view.get("blocks")
    if not isinstance(blocks, list) or not 0 < len(blocks) <= 100:
        raise SlackError("invalid_arguments", "view.blocks must hold 1 to 100 blocks")
    if len(view.get("private_metadata") or "") > 3_000 or len(view.get("callback_id") or "") > 255:
        raise SlackError("invalid_arguments", "view.private_metadata or view.callback_id is too long")
    for block in blocks:
        if block.get("type") == "input" and len((block.get("label") or {}).get("text", "")) > 2_000:
            raise SlackError("invalid_arguments", "an input's label is over 2,000 characters")


def _member_cursor(user: str) -> str:
    return base64.b64encode(f"user:{user}".encode()).decode()  # opaque, like Slack's ("dXNlcjpVMDYxTkZUVDI=")


def _member_index(cursor: str, members: list[str]) -> int:
    try:
        user = base64.b64decode(cursor.encode(), validate=True).decode().removeprefix("user:")
        return members.index(user)
    except ValueError:
        raise SlackError("invalid_cursor") from None


def _same_mode(stream: Stream, markdown: str | None, chunks: list[dict[str, Any]] | None) -> None:
    mode = slack_chunks.streaming_mode(markdown, chunks)
    slack_chunks.check_same_mode(stream.mode, mode)
    stream.mode = stream.mode or mode


def _stream_into(
    message: dict[str, Any],
    stream: Stream,
    markdown: str | None,
    chunks: list[dict[str, Any]],
    trailing_blocks: list[dict[str, Any]] | None = None,
) -> None:
    """The streamed message as the fake stores it: in `plan` display mode, the tasks so far as one plan
    block first (task_display_mode: "plan task updates render together in a plan block",
    docs.slack.dev/reference/methods/chat.startStream), then the text, then stopStream's own blocks.
    In `timeline` mode the tasks stay in `stream.chunks` only."""
    message["text"] += (markdown or "") + slack_chunks.chunk_text(chunks)
    for chunk in chunks:
        if chunk["type"] == "plan_update":
            stream.plan_title = chunk["title"]
        elif chunk["type"] == "task_update":
            stream.tasks[chunk["id"]] = {k: v for k, v in chunk.items() if k != "type"}
    stream.chunks += chunks
    plan = (
        [slack_chunks.plan_block(stream.plan_title, stream.tasks)]
        if stream.display == "plan" and (stream.tasks or stream.plan_title)
        else []
    )
    text = rich_text_blocks(message["text"]) if message["text"] else []
    message["blocks"] = plan + text + (trailing_blocks or [])


def _thread_ts(args: dict[str, Any]) -> str | None:
    value = args.get("thread_ts")
    return None if value in (None, "") else rules.check_ts(str(value), "invalid_thread_ts", "thread_ts")


def _content(args: dict[str, Any], *, truncate: bool) -> tuple[dict[str, Any], bool]:
    """text / blocks / attachments / markdown_text of a chat.postMessage-like call, checked as Slack does:
    one of them is required (`no_text`), `markdown_text` excludes `text` and `blocks`
    (`markdown_text_conflict`), and text beyond the limit is truncated (post) or refused (update)."""
    text = args.get("text")
    text = None if text is None else str(text)
    markdown = rules.check_markdown_text(args.get("markdown_text"))
    blocks = json_arg(args, "blocks", "invalid_blocks_format")
    attachments = rules.check_attachments(json_arg(args, "attachments", "invalid_attachments"))
    if markdown is not None and (text or blocks is not None):
        raise SlackError("markdown_text_conflict")
    if blocks is not None:
        rules.check_blocks(blocks)
    if not (text or blocks or attachments or markdown):
        raise SlackError("no_text")
    truncated = False
    if text is not None and truncate and len(text) > rules.MAX_TEXT_CHARS:
        text, truncated = text[: rules.MAX_TEXT_CHARS], True
    if text is not None and not truncate and len(text) > rules.MAX_UPDATE_TEXT_CHARS:
        raise SlackError("msg_too_long")
    content = {"text": markdown if markdown is not None else text, "blocks": blocks, "attachments": attachments}
    return {k: v for k, v in content.items() if v is not None}, truncated

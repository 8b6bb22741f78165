"""The OAuth scope each Web API method needs, as its reference page on docs.slack.dev lists it under
"Scopes → Bot token", and the scope each subscribed event needs (docs.slack.dev/reference/events/*).

A bot token without the scope gets `{"ok": false, "error": "missing_scope", "needed": ..., "provided": ...}`
("missing_scope: The token used is not granted the specific scope permissions required to complete this
request", on every method page; `needed` and `provided` as slack_sdk's responses type them, e.g. the
Node SDK's AssistantThreadsSetStatusResponse).
"""

from __future__ import annotations

from typing import Any

# Method -> the scopes that each allow it (any one will do; the first is the one Slack names as `needed`).
METHOD_SCOPES: dict[str, tuple[str, ...]] = {
    "auth.test": (),  # docs.slack.dev/reference/methods/auth.test: no scope
    "chat.postMessage": ("chat:write",),  # docs.slack.dev/reference/methods/chat.postMessage
    "chat.postEphemeral": ("chat:write",),  # .../methods/chat.postEphemeral
    "chat.update": ("chat:write",),  # .../methods/chat.update
    "chat.delete": ("chat:write",),  # .../methods/chat.delete
    "chat.startStream": ("chat:write",),  # .../methods/chat.startStream
    "chat.appendStream": ("chat:write",),  # .../methods/chat.appendStream
    "chat.stopStream": ("chat:write",),  # .../methods/chat.stopStream
    "users.info": ("users:read",),  # .../methods/users.info (its email field also needs users:read.email)
    "users.lookupByEmail": ("users:read.email",),  # .../methods/users.lookupByEmail
    "usergroups.list": ("usergroups:read",),  # .../methods/usergroups.list
    "usergroups.users.list": ("usergroups:read",),  # .../methods/usergroups.users.list
    "reactions.add": ("reactions:write",),  # .../methods/reactions.add
    # "now accepts either the assistant:write or chat:write scope ... will eventually no longer accept
    # assistant:write" (docs.slack.dev/changelog/2026/03/05/set-status-scope-update).
    "assistant.threads.setStatus": ("chat:write", "assistant:write"),
    "assistant.threads.setSuggestedPrompts": ("assistant:write",),  # .../methods/assistant.threads.setSuggestedPrompts
    "assistant.threads.setTitle": ("assistant:write",),  # .../methods/assistant.threads.setTitle
    "files.getUploadURLExternal": ("files:write",),  # .../methods/files.getUploadURLExternal
    "files.completeUploadExternal": ("files:write",),  # .../methods/files.completeUploadExternal
    "views.open": (),  # .../methods/views.open: "Scopes: No scopes required"
}
# conversations.history / conversations.replies need the history scope of the conversation's type, and
# conversations.info and conversations.members its read scope (.../methods/conversations.replies,
# .../conversations.info, .../conversations.members: "channels:read, groups:read, im:read, mpim:read").
HISTORY_SCOPES = {"public": "channels:history", "private": "groups:history", "im": "im:history", "mpim": "mpim:history"}
READ_SCOPES = {"public": "channels:read", "private": "groups:read", "im": "im:read", "mpim": "mpim:read"}
BY_CONVERSATION = {
    "conversations.history": HISTORY_SCOPES,
    "conversations.replies": HISTORY_SCOPES,
    "conversations.info": READ_SCOPES,
    "conversations.members": READ_SCOPES,
}
EMAIL_SCOPE = "users:read.email"  # what shows a user object's profile.email (.../scopes/users.read.email)
# Event -> the scope its subscription needs (docs.slack.dev/reference/events/<event>, "Required scopes"); None:
# the page lists none (app_home_opened: "Your Slack app must have a bot user configured and installed").
EVENT_SCOPES: dict[str, str | None] = {
    "app_home_opened": None,
    "app_mention": "app_mentions:read",
    "assistant_thread_started": "assistant:write",
    "assistant_thread_context_changed": "assistant:write",
    "message.channels": "channels:history",
    "message.groups": "groups:history",
    "message.im": "im:history",
    "message.mpim": "mpim:history",
}
EVERY_BOT_SCOPE = frozenset(
    {s for scopes in METHOD_SCOPES.values() for s in scopes}
    | {s for scopes in BY_CONVERSATION.values() for s in scopes.values()}
    | {s for s in EVENT_SCOPES.values() if s}
    | {EMAIL_SCOPE}
)


def needed(method: str, conversation_type: str | None) -> tuple[str, ...]:
    """The scopes that each allow `method` (empty: none needed, or the conversation is unknown, which
    the method itself answers with channel_not_found)."""
    if method in BY_CONVERSATION:
        scope = BY_CONVERSATION[method].get(conversation_type or "")
        return (scope,) if scope else ()
    if method not in METHOD_SCOPES:  # as strict as Slack: a method the fake serves states its scope
        raise LookupError(f"{method}: add its bot-token scope from its reference page to METHOD_SCOPES")
    return METHOD_SCOPES[method]


def conversation_type(channel: Any) -> str | None:
    """`public`, `private`, `im` or `mpim` for a workspace Channel (None when there is none)."""
    if channel is None:
        return None
    if channel.is_im:
        return "im"
    if channel.is_mpim:
        return "mpim"
    return "private" if channel.is_private else "public"

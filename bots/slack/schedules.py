"""Schedules in Slack: "Repeat…" under an answer opens a modal (views.open) asking when, where and how;
its submission (view_submission) makes the schedule, owned by the person who clicked. A DM saying
`schedules` lists that person's schedules, each with Pause/Resume and Delete buttons; and `SlackOutlet`
posts each delivery into the channel or DM it was made for.

Why a DM keyword rather than a slash command: the list is the person's own (anyone else's schedules are as
if they did not exist), and a DM has one reader; a slash command would need the `commands` scope, a manifest
entry and a reinstall of every existing install. The keyword is the whole message (`schedules`, or
`my schedules`), which no data question is.

Where a schedule may post: the conversation its answer was in (a channel the owner is in, where the
channel's policy must cover the rows, since everyone there reads them; or their DM with the bot), or the
owner's web inbox. The same checks run at every fire (process/scheduler.py): an owner who left the channel
or lost access stops the schedule, and is told.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Callable
from typing import Any

from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_client import AsyncWebClient

from agent.access.policy import Policies
from agent.config import Settings
from agent.runner import FinalAnswer, Interface
from bots.slack import blocks, refusals
from bots.slack.channel_members import SlackChannelMembers
from bots.slack.people import SlackPeople
from bots.slack.receipt import receipt_blocks
from chats.conversations import ConversationStore
from chats.people import channel_owner
from chats.schedule_deliveries import Delivered, OutletName
from chats.schedule_runs import AccessLost, fire_policy, is_direct_message
from chats.schedules import (
    INBOX,
    WEEKDAYS,
    Alert,
    Cadence,
    CadenceError,
    Schedule,
    ScheduleError,
    ScheduleStore,
    slack_destination,
    slack_of,
)

log = logging.getLogger(__name__)
REPEAT = blocks.REPEAT  # the button under an answer
MANAGE = blocks.SCHEDULE  # the list's buttons: analyst_schedule_pause / _resume / _delete
MODAL = "analyst_schedule_modal"  # the modal's callback_id
KEYWORD = re.compile(r"^\s*(?:my\s+)?schedules\s*[.!?]?\s*$", re.IGNORECASE)
MAX_LISTED = 20  # two blocks each, within a message's 50 blocks
HERE, INBOX_CHOICE = "here", "inbox"


def repeat_block(run_id: str) -> dict[str, Any]:
    """The "Repeat…" button under an answer."""
    button = {
        "type": "button",
        "text": {"type": "plain_text", "text": "Repeat…", "emoji": True},
        "action_id": REPEAT,
        "value": run_id,
    }
    return {"type": "actions", "block_id": REPEAT, "elements": [button]}


def is_keyword(text: str) -> bool:
    return KEYWORD.match(text) is not None


class SlackSchedules:
    """The modal, the list and its buttons; `client` is the bot's once started."""

    def __init__(
        self,
        client: Callable[[], AsyncWebClient | None],
        store: ScheduleStore,
        conversations: ConversationStore,
        people: SlackPeople,
        policies: Policies | None,
    ) -> None:
        self._client, self._store, self._conversations = client, store, conversations
        self._people, self._policies = people, policies

    # --- Repeat… and its modal ---

    async def open_modal(self, body: dict[str, Any], *, team: str, channel: str, user: str, run_id: str) -> None:
        """The modal, at once: Slack's trigger is good for 3 s and one view. It shows no data; whether the
        clicker may repeat that answer (its asker in a DM, a member of its channel) is checked when it is
        submitted."""
        client = self._client()
        if client is None:
            return
        meta = json.dumps({"run": run_id, "team": team, "channel": channel})
        try:
            await client.views_open(trigger_id=str(body.get("trigger_id") or ""), view=modal_view(meta))
        except SlackApiError as exc:
            refusals.log_refusal(log, "open the schedule modal", exc)

    async def submitted(self, body: dict[str, Any]) -> dict[str, str]:
        """A submitted modal: the schedule made (and the person told), or what to fix, by block id, for Slack
        to show beside each field (`response_action: errors`)."""
        view = body.get("view") or {}
        meta = json.loads(view.get("private_metadata") or "{}")
        team, channel, run_id = str(meta.get("team", "")), str(meta.get("channel", "")), str(meta.get("run", ""))
        user = str((body.get("user") or {}).get("id") or "")
        values = _values(view)
        try:
            cadence = Cadence.of(
                {
                    "kind": values.get("kind") or "daily",
                    "at": values.get("at") or "09:00",
                    "weekday": int(values.get("weekday") or 0),
                    "cron": values.get("cron") or "",
                    "timezone": values.get("timezone") or "UTC",
                }
            )
        except CadenceError as exc:
            return {_field_of(str(exc)): str(exc)}
        person = await self._people.person(team, user)
        if await self._conversations.run_owner(run_id, interface="slack") not in (
            person.person.owner,
            channel_owner(team, channel),
        ):
            return {"where": "That answer is not one you can repeat."}
        if self._policies is not None and person.asker is None:
            return {"where": "Slack could not say who you are, so no schedule can run under your access."}
        where = slack_destination(team, channel) if values.get("where") != INBOX_CHOICE else INBOX
        try:
            alert = alert_of(values)
        except ScheduleError as exc:
            return {"column" if "column" in str(exc) else "threshold": str(exc)}
        draft = await self._store.draft_from_answer(
            run_id,
            cadence=cadence,
            destination=where,
            how="ask" if values.get("how") == "ask" and alert is None else "rerun",
            asker=person.asker,
            alert=alert,
        )
        if draft is None:
            return {"where": "That answer is no longer stored."}
        try:
            fire_policy(self._policies, draft)
            made = await self._store.create(person.person.owner, draft)
        except (AccessLost, ScheduleError) as exc:
            return {_field_of(str(exc)) if "cadence" in str(exc).lower() else "where": str(exc)}
        await self._say(
            channel,
            user,
            f"Scheduled: {made.title} — {cadence.describe()}. Say `schedules` to me in a DM to manage it.",
        )
        return {}

    # --- the list ---

    async def post_list(self, team: str, channel: str, user: str, *, update_ts: str | None = None) -> None:
        """The person's schedules, in their DM with the bot (replacing the list a button was clicked on)."""
        client = self._client()
        if client is None:
            return
        person = await self._people.person(team, user)
        listed = await self._store.list_for(person.person.owner)
        shown = list_blocks(listed)
        text = f"{len(listed)} schedule(s)" if listed else "You have no schedules."
        try:
            if update_ts:
                await client.chat_update(channel=channel, ts=update_ts, text=text, blocks=shown)
            else:
                await client.chat_postMessage(channel=channel, text=text, blocks=shown, **blocks.NO_PREVIEWS)
        except SlackApiError as exc:
            refusals.log_refusal(log, f"list schedules in {channel}", exc)

    async def manage(self, action: str, schedule_id: str, *, team: str, channel: str, user: str, ts: str) -> None:
        """Pause, resume or delete one of the clicker's own schedules; another's id changes nothing."""
        owner = (await self._people.person(team, user)).person.owner
        verb = action.removeprefix(f"{MANAGE}_")
        if verb == "pause":
            await self._store.pause(schedule_id, owner=owner)
        elif verb == "resume":
            await self._store.resume(schedule_id, owner=owner)
        elif verb == "delete":
            await self._store.delete(schedule_id, owner=owner)
        await self.post_list(team, channel, user, update_ts=ts)

    async def _say(self, channel: str, user: str, text: str) -> None:
        client = self._client()
        if client is None:
            return
        try:
            await client.chat_postEphemeral(channel=channel, user=user, text=blocks.escape(text))
        except SlackApiError as exc:
            refusals.log_refusal(log, f"confirm a schedule in {channel}", exc)


def modal_view(private_metadata: str) -> dict[str, Any]:
    """The modal (docs.slack.dev/surfaces/modals): title and buttons up to 24 characters, input blocks whose
    values come back in the view_submission's `view.state.values[block_id][action_id]`."""

    def option(text: str, value: str) -> dict[str, Any]:
        return {"text": {"type": "plain_text", "text": text}, "value": value}

    def field(block: str, label: str, element: dict[str, Any], *, optional: bool = False) -> dict[str, Any]:
        element = {**element, "action_id": block}
        return {
            "type": "input",
            "block_id": block,
            "optional": optional,
            "label": {"type": "plain_text", "text": label},
            "element": element,
        }

    def select(options: list[dict[str, Any]]) -> dict[str, Any]:
        return {"type": "static_select", "options": options, "initial_option": options[0]}

    kinds = [option("Every day", "daily"), option("Every week", "weekly"), option("Cron expression", "cron")]
    days = [option(day.capitalize(), str(i)) for i, day in enumerate(WEEKDAYS)]
    where = [option("Here (this conversation)", HERE), option("My web inbox", INBOX_CHOICE)]
    how = [option("Run its SQL again (no model)", "rerun"), option("Ask the question afresh", "ask")]
    alert = [
        option("Always post", "none"),
        option("Only when a column is above…", "above"),
        option("Only when a column is below…", "below"),
        option("Only when a column changes by more than a share", "change"),
        option("Only when it returns any rows", "rows"),
    ]
    return {
        "type": "modal",
        "callback_id": MODAL,
        "private_metadata": private_metadata,
        "title": {"type": "plain_text", "text": "Repeat this answer"},
        "submit": {"type": "plain_text", "text": "Schedule"},
        "close": {"type": "plain_text", "text": "Cancel"},
        "blocks": [
            field("kind", "When", select(kinds)),
            field("at", "At (HH:MM)", {"type": "plain_text_input", "initial_value": "09:00"}),
            field("weekday", "On (weekly)", select(days), optional=True),
            field(
                "cron", "Cron expression (minute hour day month weekday)", {"type": "plain_text_input"}, optional=True
            ),
            field("timezone", "Time zone", {"type": "plain_text_input", "initial_value": "UTC"}),
            field("where", "Where", select(where)),
            field("how", "How", {"type": "radio_buttons", "options": how, "initial_option": how[0]}),
            field("alert", "Alert (checks with SQL only; posts once until it clears)", select(alert)),
            field("column", "Column it watches (alerts)", {"type": "plain_text_input"}, optional=True),
            field("threshold", "Threshold, or share such as 0.1 (alerts)", {"type": "plain_text_input"}, optional=True),
        ],
    }


def _values(view: dict[str, Any]) -> dict[str, str]:
    """Each input's value, by block id: a text input's `value`, a select's or radio's `selected_option`."""
    found: dict[str, str] = {}
    for block, actions in ((view.get("state") or {}).get("values") or {}).items():
        for state in actions.values():
            chosen = state.get("selected_option") or {}
            found[block] = str(state.get("value") or chosen.get("value") or "")
    return found


def alert_of(values: dict[str, str]) -> Alert | None:
    """The modal's alert, if one was asked for: its watched column, and the threshold (above, below) or
    the share (change) typed in one field."""
    kind = values.get("alert") or "none"
    if kind == "none":
        return None
    number = values.get("threshold") or None
    return Alert.of(
        {
            "kind": kind,
            "column": values.get("column") or "",
            "threshold": number if kind in ("above", "below") else None,
            "share": number if kind == "change" else None,
        }
    )


def _field_of(message: str) -> str:
    lowered = message.lower()
    if "time zone" in lowered:
        return "timezone"
    if "cron" in lowered:
        return "cron"
    if "weekday" in lowered:
        return "weekday"
    return "at"


def list_blocks(listed: list[Schedule]) -> list[dict[str, Any]]:
    if not listed:
        return [{"type": "section", "text": {"type": "mrkdwn", "text": "You have no schedules."}}]
    shown: list[dict[str, Any]] = []
    for schedule in listed[:MAX_LISTED]:
        where = "your web inbox" if schedule.draft.destination == INBOX else "Slack"
        state = {"active": "", "paused": " (paused)", "stopped": f" (stopped: {schedule.stopped_reason})"}
        line = f"*{blocks.escape(schedule.title)}* — {schedule.draft.cadence.describe()}, to {where}"
        shown.append(
            {"type": "section", "text": {"type": "mrkdwn", "text": line + blocks.escape(state[schedule.state])}}
        )
        toggle = ("resume", "Resume") if schedule.state != "active" else ("pause", "Pause")
        buttons = [
            _button(toggle[1], f"{MANAGE}_{toggle[0]}", schedule.id),
            _button("Delete", f"{MANAGE}_delete", schedule.id),
        ]
        shown.append({"type": "actions", "block_id": f"{MANAGE}_{schedule.id}", "elements": buttons})
    return shown


def _button(text: str, action_id: str, value: str) -> dict[str, Any]:
    return {"type": "button", "text": {"type": "plain_text", "text": text}, "action_id": action_id, "value": value}


class SlackOutlet:
    """Delivers into the Slack channel or DM a schedule was made for (chats/schedule_deliveries.py's Outlet)."""

    name: OutletName = "slack"
    interface: Interface = "slack"

    def __init__(
        self, client: Callable[[], AsyncWebClient | None], members: SlackChannelMembers, settings: Settings
    ) -> None:
        self._client, self._members, self._settings = client, members, settings

    async def refusal(self, schedule: Schedule) -> str | None:
        where = slack_of(schedule.draft.destination)
        if where is None or is_direct_message(where[1]):
            return None
        user = schedule.draft.asker.slack_user
        if not user or not await self._members.has_user(where[1], user):
            return "You are no longer in the channel it posts to, so this schedule has stopped."
        return None

    async def reads(self, schedule: Schedule, team: str, channel: str) -> bool:
        """Whether the schedule's owner is in `channel` now (the one its answer was asked in)."""
        user = schedule.draft.asker.slack_user
        return user is not None and await self._members.has_user(channel, user)

    async def deliver(self, delivered: Delivered) -> None:
        client, where = self._client(), slack_of(delivered.schedule.draft.destination)
        if client is None or where is None:
            raise ConnectionError("the Slack bot is not running")
        await client.chat_postMessage(
            channel=where[1], text=blocks.preview(delivered.text), blocks=delivery_blocks(delivered, self._settings),
            **blocks.NO_PREVIEWS,
        )  # fmt: skip

    async def tell(self, schedule: Schedule, text: str) -> bool:
        """In the DM it delivers to, or to the owner alone in its channel; False when neither is possible."""
        client, where, user = self._client(), slack_of(schedule.draft.destination), schedule.draft.asker.slack_user
        if client is None or where is None:
            return False
        try:
            if is_direct_message(where[1]):
                await client.chat_postMessage(channel=where[1], text=blocks.escape(text), **blocks.NO_PREVIEWS)
            elif user:
                await client.chat_postEphemeral(channel=where[1], user=user, text=blocks.escape(text))
            else:
                return False
        except SlackApiError as exc:
            refusals.log_refusal(log, f"tell a schedule's owner in {where[1]}", exc)
            return False
        return True


def delivery_blocks(delivered: Delivered, settings: Settings) -> list[dict[str, Any]]:
    """The answer as any answer shows (its receipt, figures' warnings, Show SQL and the queries' pages),
    under the schedule's title, with the lines on lateness and on what changed."""
    schedule = delivered.schedule
    title = f"**{schedule.title}** ({schedule.draft.cadence.describe()})\n\n" if schedule.kind != "alert" else ""
    shown: list[dict[str, Any]] = [blocks.markdown_block(blocks.slack_markdown(f"{title}{delivered.text}", final=True))]
    notes = [line for line in (delivered.late, delivered.changed) if line]
    if notes:
        elements = [{"type": "mrkdwn", "text": blocks.escape(line)} for line in notes]
        shown.append({"type": "context", "block_id": "analyst_schedule_notes", "elements": elements})
    if delivered.result is not None:
        result = delivered.result
        labels = [q.id for q in result.queries]
        shown += receipt_blocks(FinalAnswer.of(result)) + blocks.answer_blocks(
            delivered.run_id, labels, [], settings.agent_web_url
        )
    return shown

"""Slack's documented argument rules, as the fake Web API enforces them.

Each limit names its source. Where Slack documents an error code but not its message, the message
follows the shape Slack uses for Block Kit errors: `[ERROR] <problem> [json-pointer:<path>]`.
"""

from __future__ import annotations

import json
import re
from typing import Any

# chat.postMessage / chat.postEphemeral truncate longer text and warn `message_truncated`
# (api.slack.com/changelog/2018-04-truncating-really-long-messages).
MAX_TEXT_CHARS = 40_000
# chat.update: "msg_too_long: The `text` field cannot exceed 4,000 characters"
# (docs.slack.dev/reference/methods/chat.update).
MAX_UPDATE_TEXT_CHARS = 4_000
# `markdown_text`: "Limit this field to 12,000 characters" (chat.postMessage, chat.*Stream reference pages).
MAX_MARKDOWN_TEXT_CHARS = 12_000
# "blocks are limited to 50 per message" (msg_blocks_too_many; docs.slack.dev/reference/block-kit/blocks).
MAX_BLOCKS = 50
# markdown block: "Limit 12,000 characters max"; "The cumulative limit for all markdown blocks in a single
# payload is 12,000 characters" (docs.slack.dev/reference/block-kit/blocks/markdown-block).
MAX_MARKDOWN_BLOCK_CHARS = 12_000
# section text 3,000, fields 10 x 2,000; header 150; block_id 255; actions 25 elements; context 10 elements;
# button text 75, value 2,000, url 3,000 (docs.slack.dev/reference/block-kit/blocks/*, block-elements/button-element).
MAX_SECTION_TEXT = 3_000
MAX_SECTION_FIELDS = 10
MAX_SECTION_FIELD_TEXT = 2_000
MAX_HEADER_TEXT = 150
MAX_BLOCK_ID = 255
MAX_ACTIONS_ELEMENTS = 25
MAX_CONTEXT_ELEMENTS = 10
MAX_BUTTON_TEXT = 75
MAX_BUTTON_VALUE = 2_000
MAX_URL = 3_000
MAX_ALT_TEXT = 2_000
# "A maximum of 100 attachments are allowed on a message" (too_many_attachments, chat.postMessage).
MAX_ATTACHMENTS = 100
# assistant.threads.setStatus loading_messages: "Maximum of 10 messages".
MAX_LOADING_MESSAGES = 10
# assistant.threads.setSuggestedPrompts: up to four prompts (docs.slack.dev/ai/developing-ai-apps).
MAX_SUGGESTED_PROMPTS = 4
# files.getUploadURLExternal alt_txt_too_large: "longer than the limit of 1000 character".
MAX_ALT_TXT = 1_000
# files.getUploadURLExternal snippet_too_large: "snippets, which are limited to 1MB".
MAX_SNIPPET_BYTES = 1 << 20
# files.completeUploadExternal channels_limit_exceeded: "A maximum of 100 channels is allowed per request".
MAX_SHARE_CHANNELS = 100

TS = re.compile(r"^\d+\.\d+$")
TEXT_TYPES = ("plain_text", "mrkdwn")
# Block types accepted without checking their fields.
UNCHECKED_BLOCKS = {"divider", "input", "file", "video", "table"}
# task_card status: "Can be "pending", "in_progress", "complete", or "error""
# (https://docs.slack.dev/reference/block-kit/blocks/task-card-block); task_update chunks take the same.
TASK_STATUSES = ("pending", "in_progress", "complete", "error")
# context_actions: "An array of feedback buttons elements and icon button elements. Maximum number of items
# is 5" (https://docs.slack.dev/reference/block-kit/blocks/context-actions-block).
MAX_CONTEXT_ACTIONS = 5
# feedback_buttons' button objects: text plain_text up to 75 characters, value up to 2,000 (required),
# accessibility_label up to 75 (https://docs.slack.dev/reference/block-kit/block-elements/feedback-buttons-element).
MAX_FEEDBACK_TEXT = 75
MAX_FEEDBACK_LABEL = 75


class SlackError(Exception):
    """An `ok: false` answer. `messages` become `response_metadata.messages` as Slack sends them."""

    def __init__(
        self,
        error: str,
        *messages: str,
        status: int = 200,
        headers: dict[str, str] | None = None,
        extra: dict[str, Any] | None = None,
    ) -> None:
        super().__init__(error, *messages)
        self.error = error
        self.messages = list(messages)
        self.status = status
        self.headers = headers or {}
        self.extra = extra or {}

    def body(self) -> dict[str, Any]:
        body: dict[str, Any] = {"ok": False, "error": self.error, **self.extra}
        if self.messages:
            body["response_metadata"] = {"messages": [f"[ERROR] {m}" for m in self.messages]}
        return body


# --- arguments as they arrive (form strings or JSON values) ---


def required(args: dict[str, Any], name: str) -> Any:
    """An absent required argument is `invalid_arguments`; a present but empty or unknown one is the
    method's own resolution error (channel_not_found, thread_not_found, ...), as Slack answers."""
    if name not in args or args[name] is None:
        raise SlackError("invalid_arguments", f"missing required field: {name}")
    return args[name]


def flag(args: dict[str, Any], name: str) -> bool:
    value = args.get(name)
    if isinstance(value, str):
        return value.lower() in ("1", "true")
    return bool(value)


def integer(args: dict[str, Any], name: str, default: int) -> int:
    value = args.get(name, default)
    try:
        return int(value)
    except (TypeError, ValueError):
        raise SlackError("invalid_arguments", f"{name} must be an integer") from None


def json_arg(args: dict[str, Any], name: str, error: str) -> Any:
    """Form bodies carry blocks, attachments and metadata as JSON strings; JSON bodies as values."""
    value = args.get(name)
    if isinstance(value, str):
        try:
            return json.loads(value)
        except ValueError:
            raise SlackError(error, f"{name} is not valid JSON") from None
    return value


def check_ts(value: Any, error: str, name: str) -> str:
    if not isinstance(value, str) or not TS.match(value):
        raise SlackError(error, f"{value} is not a valid {name}")
    return value


def check_markdown_text(value: Any) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str):
        raise SlackError("invalid_arguments", "markdown_text must be a string [json-pointer:/markdown_text]")
    if len(value) > MAX_MARKDOWN_TEXT_CHARS:
        raise SlackError(
            "invalid_arguments",
            f"must be less than {MAX_MARKDOWN_TEXT_CHARS + 1} characters [json-pointer:/markdown_text]",
        )
    return value


# --- metadata ---


def check_metadata(value: Any, *, allow_empty: bool = False) -> dict[str, Any] | None:
    """`metadata` is {"event_type": str, "event_payload": object} (docs.slack.dev/messaging/message-metadata),
    or Work Object `entities`, as `json_arg` decoded it. chat.update takes {} to remove the previous metadata."""
    if value is None:
        return None
    if not isinstance(value, dict):
        raise SlackError("invalid_metadata_format")
    if allow_empty and value == {}:
        return value
    if isinstance(value.get("entities"), list):
        return value
    if not isinstance(value.get("event_type"), str) or not value["event_type"]:
        raise SlackError("invalid_metadata_format", "missing required field: event_type [json-pointer:/metadata]")
    if not isinstance(value.get("event_payload"), dict):
        raise SlackError("invalid_metadata_format", "missing required field: event_payload [json-pointer:/metadata]")
    return value


# --- attachments ---


def check_attachments(value: Any) -> list[dict[str, Any]] | None:
    if value is None:
        return None
    if not isinstance(value, list) or not all(isinstance(a, dict) for a in value):
        raise SlackError("invalid_attachments", "attachments must be an array of objects")
    if len(value) > MAX_ATTACHMENTS:
        raise SlackError("too_many_attachments")
    return value


# --- Block Kit ---


def check_blocks(blocks: Any, *, where: str = "/blocks", too_many: str = "invalid_blocks") -> list[dict[str, Any]]:
    """Validate a message's blocks; `too_many` is `msg_blocks_too_many` for the streaming methods."""
    if not isinstance(blocks, list):
        raise SlackError("invalid_blocks_format", f"expected an array [json-pointer:{where}]")
    if len(blocks) > MAX_BLOCKS:
        if too_many == "msg_blocks_too_many":
            raise SlackError(too_many)
        _invalid([f"no more than {MAX_BLOCKS} items allowed [json-pointer:{where}]"])
    problems: list[str] = []
    block_ids: set[str] = set()
    for index, block in enumerate(blocks):
        path = f"{where}/{index}"
        problems += _block_problems(block, path)
        block_id = block.get("block_id") if isinstance(block, dict) else None
        if isinstance(block_id, str):
            if block_id in block_ids:
                problems.append(f"duplicate block_id: {block_id} [json-pointer:{path}/block_id]")
            block_ids.add(block_id)
    if problems:
        _invalid(problems)
    markdown = sum(len(b.get("text", "")) for b in blocks if b.get("type") == "markdown")
    if markdown > MAX_MARKDOWN_BLOCK_CHARS:
        raise SlackError("msg_blocks_too_long")
    return blocks


def _invalid(problems: list[str]) -> None:
    raise SlackError("invalid_blocks", *problems, extra={"errors": problems})


def _block_problems(block: Any, path: str) -> list[str]:
    if not isinstance(block, dict):
        return [f"expected object [json-pointer:{path}]"]
    kind = block.get("type")
    problems = _length(block.get("block_id"), f"{path}/block_id", MAX_BLOCK_ID, minimum=0)
    if kind == "section":
        problems += _section_problems(block, path)
    elif kind == "header":
        problems += _text_problems(block.get("text"), f"{path}/text", MAX_HEADER_TEXT, kinds=("plain_text",))
    elif kind == "markdown":
        problems += _length(block.get("text"), f"{path}/text", MAX_MARKDOWN_BLOCK_CHARS, required=True)
    elif kind == "context":
        problems += _elements(block, path, MAX_CONTEXT_ELEMENTS, _context_element)
    elif kind == "actions":
        problems += _elements(block, path, MAX_ACTIONS_ELEMENTS, _action_element)
    elif kind == "image":
        problems += _image_problems(block, path)
    elif kind == "rich_text" and not isinstance(block.get("elements"), list):
        problems.append(f"missing required field: elements [json-pointer:{path}]")
    elif kind == "plan":
        problems += _plan_problems(block, path)
    elif kind == "task_card":
        problems += task_card_problems(block, path)
    elif kind == "context_actions":
        problems += _elements(block, path, MAX_CONTEXT_ACTIONS, _context_action_element)
    elif kind not in UNCHECKED_BLOCKS | {"rich_text"}:
        problems.append(f"failed to match all allowed schemas [json-pointer:{path}]")
    return problems


def _section_problems(block: dict[str, Any], path: str) -> list[str]:
    if block.get("text") is None and block.get("fields") is None:
        return [f"failed to match all allowed schemas [json-pointer:{path}]"]
    problems: list[str] = []
    if block.get("text") is not None:
        problems += _text_problems(block["text"], f"{path}/text", MAX_SECTION_TEXT)
    fields = block.get("fields")
    if fields is not None:
        if not isinstance(fields, list) or len(fields) > MAX_SECTION_FIELDS:
            problems.append(f"no more than {MAX_SECTION_FIELDS} items allowed [json-pointer:{path}/fields]")
        else:
            for index, item in enumerate(fields):
                problems += _text_problems(item, f"{path}/fields/{index}", MAX_SECTION_FIELD_TEXT)
    return problems


def _text_problems(text: Any, path: str, limit: int, kinds: tuple[str, ...] = TEXT_TYPES) -> list[str]:
    if not isinstance(text, dict) or text.get("type") not in kinds:
        return [f"failed to match all allowed schemas [json-pointer:{path}]"]
    inner = _length(text.get("text"), f"{path}/text", limit, required=True)
    return [f"failed to match all allowed schemas [json-pointer:{path}]", *inner] if inner else []


def _length(value: Any, path: str, limit: int, *, minimum: int = 1, required: bool = False) -> list[str]:
    if value is None:
        return [f"missing required field: {path.rsplit('/', 1)[-1]} [json-pointer:{path}]"] if required else []
    if not isinstance(value, str):
        return [f"expected string [json-pointer:{path}]"]
    if len(value) < minimum:
        return [f"must be more than {minimum - 1} characters [json-pointer:{path}]"]
    if len(value) > limit:
        return [f"must be less than {limit + 1} characters [json-pointer:{path}]"]
    return []


def _elements(block: dict[str, Any], path: str, limit: int, check: Any) -> list[str]:
    elements = block.get("elements")
    if not isinstance(elements, list) or not elements:
        return [f"missing required field: elements [json-pointer:{path}]"]
    if len(elements) > limit:
        return [f"no more than {limit} items allowed [json-pointer:{path}/elements]"]
    problems: list[str] = []
    for index, element in enumerate(elements):
        problems += check(element, f"{path}/elements/{index}")
    return problems


def _context_element(element: Any, path: str) -> list[str]:
    if isinstance(element, dict) and element.get("type") == "image":
        return _image_problems(element, path)
    return _text_problems(element, path, MAX_SECTION_TEXT)


def _action_element(element: Any, path: str) -> list[str]:
    if not isinstance(element, dict) or not isinstance(element.get("type"), str):
        return [f"failed to match all allowed schemas [json-pointer:{path}]"]
    problems = _length(element.get("action_id"), f"{path}/action_id", MAX_BLOCK_ID, minimum=0)
    if element["type"] == "button":
        problems += _text_problems(element.get("text"), f"{path}/text", MAX_BUTTON_TEXT, kinds=("plain_text",))
        problems += _length(element.get("value"), f"{path}/value", MAX_BUTTON_VALUE, minimum=0)
        problems += _length(element.get("url"), f"{path}/url", MAX_URL)
        if element.get("style") not in (None, "primary", "danger"):
            problems.append(f"must be one of primary, danger [json-pointer:{path}/style]")
    return problems


def _image_problems(element: dict[str, Any], path: str) -> list[str]:
    problems = _length(element.get("alt_text"), f"{path}/alt_text", MAX_ALT_TEXT, required=True)
    if element.get("image_url") is None and element.get("slack_file") is None:
        problems.append(f"missing required field: image_url [json-pointer:{path}]")
    return problems + _length(element.get("image_url"), f"{path}/image_url", MAX_URL)


# --- the AI app blocks: plan, task_card, context_actions ---


def _plan_problems(block: dict[str, Any], path: str) -> list[str]:
    """plan: `title` (plain text) required, `tasks` an optional array of task_card blocks
    (https://docs.slack.dev/reference/block-kit/blocks/plan-block)."""
    problems = _length(block.get("title"), f"{path}/title", MAX_SECTION_TEXT, required=True)
    tasks = block.get("tasks")
    if tasks is None:
        return problems
    if not isinstance(tasks, list):
        return [*problems, f"expected an array [json-pointer:{path}/tasks]"]
    for index, task in enumerate(tasks):
        if not isinstance(task, dict) or task.get("type") != "task_card":
            problems.append(f"failed to match all allowed schemas [json-pointer:{path}/tasks/{index}]")
        else:
            problems += task_card_problems(task, f"{path}/tasks/{index}")
    return problems


def task_card_problems(block: dict[str, Any], path: str) -> list[str]:
    """task_card: `task_id` and `title` required; `status` one of TASK_STATUSES; `details` and `output` each
    "a single rich_text entity"; `sources` an array of URL source elements
    (https://docs.slack.dev/reference/block-kit/blocks/task-card-block)."""
    problems = _length(block.get("task_id"), f"{path}/task_id", MAX_BLOCK_ID, required=True)
    problems += _length(block.get("title"), f"{path}/title", MAX_SECTION_TEXT, required=True)
    if block.get("status") is not None and block["status"] not in TASK_STATUSES:
        problems.append(f"must be one of {', '.join(TASK_STATUSES)} [json-pointer:{path}/status]")
    for name in ("details", "output"):
        value = block.get(name)
        if value is not None and (
            not isinstance(value, dict)
            or value.get("type") != "rich_text"
            or not isinstance(value.get("elements"), list)
        ):
            problems.append(f"must be a rich_text block [json-pointer:{path}/{name}]")
    return problems + sources_problems(block.get("sources"), f"{path}/sources")


def sources_problems(sources: Any, path: str) -> list[str]:
    """URL source elements: `{"type": "url", "url": ..., "text": ...}`, both required
    (https://docs.slack.dev/reference/block-kit/block-elements/url-source-element)."""
    if sources is None:
        return []
    if not isinstance(sources, list):
        return [f"expected an array [json-pointer:{path}]"]
    problems: list[str] = []
    for index, source in enumerate(sources):
        where = f"{path}/{index}"
        if not isinstance(source, dict) or source.get("type") != "url":
            problems.append(f"failed to match all allowed schemas [json-pointer:{where}]")
            continue
        problems += _length(source.get("url"), f"{where}/url", MAX_URL, required=True)
        problems += _length(source.get("text"), f"{where}/text", MAX_SECTION_TEXT, required=True)
    return problems


def _context_action_element(element: Any, path: str) -> list[str]:
    if not isinstance(element, dict) or element.get("type") not in ("feedback_buttons", "icon_button"):
        return [f"failed to match all allowed schemas [json-pointer:{path}]"]
    problems = _length(element.get("action_id"), f"{path}/action_id", MAX_BLOCK_ID, minimum=0)
    if element["type"] == "icon_button":
        return problems + _text_problems(element.get("text"), f"{path}/text", MAX_BUTTON_TEXT, kinds=("plain_text",))
    for name in ("positive_button", "negative_button"):
        button, where = element.get(name), f"{path}/{name}"
        if not isinstance(button, dict):
            problems.append(f"missing required field: {name} [json-pointer:{where}]")
            continue
        problems += _text_problems(button.get("text"), f"{where}/text", MAX_FEEDBACK_TEXT, kinds=("plain_text",))
        problems += _length(button.get("value"), f"{where}/value", MAX_BUTTON_VALUE, required=True)
        problems += _length(button.get("accessibility_label"), f"{where}/accessibility_label", MAX_FEEDBACK_LABEL)
    return problems

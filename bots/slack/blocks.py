"""What an answer looks like in Slack: its Markdown, where a long one is split, and its buttons.

Slack renders standard Markdown in `markdown` blocks and `markdown_text`, up to 12,000 characters
per message, but not tables (the docs disagree between pages; the streaming text certainly shows
raw pipes). So a Markdown table becomes an aligned monospaced block. While an answer is still being
written, a table that has not ended is held back, so text already sent never changes.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any
from urllib.parse import quote

from agent import linear_re

MAX_MARKDOWN = 12_000  # markdown_text of one call, and all markdown blocks of one message
MAX_BUTTON_TEXT = 75
MAX_BUTTON_VALUE = 2_000
MAX_ACTIONS = 25
# A context block holds 10 elements of at most 3,000 characters each (Block Kit reference, context block;
# mrkdwn text object). Cut before escaping, each piece may grow 5x (`&` -> `&amp;`): 5 x (120 + 300 + 120)
# plus the markup stays under 3,000.
MAX_CITED, MAX_CITED_CHARS, MAX_TAG_CHARS = 10, 300, 120
PREVIEW_CHARS = 300  # the plain `text` beside blocks: what notifications and screen readers show
# chat.postMessage's unfurl_links / unfurl_media (docs.slack.dev/reference/methods/chat.postMessage), off: a
# link in an answer (say, one planted in the data) is never fetched by Slack nor expanded under the message.
# chat.postEphemeral, chat.update and chat.startStream take neither argument.
NO_PREVIEWS: dict[str, Any] = {"unfurl_links": False, "unfurl_media": False}

SHOW_SQL = "analyst_show_sql"
OPEN_QUERY = "analyst_open_query"
FOLLOWUP = "analyst_followup"
FEEDBACK = "analyst_feedback"
FEEDBACK_BLOCK = "analyst_feedback"
REASON = "analyst_reason"  # what was wrong, typed after a thumbs-down (the block id carries the run)
REPEAT = "analyst_repeat"  # "Repeat…": make a schedule of the answer (bots/slack/schedules.py)
SCHEDULE = "analyst_schedule"  # a listed schedule's Pause / Resume / Delete
DIG_DEEPER = "analyst_dig_deeper"  # under an answer: a report on the same question (the value is its run)
RESUME_REPORT = "analyst_resume_report"  # under a partial report: go on from where it stopped (its id)

# Over an answer's table cells, with fullmatch (Python's `re` took quadratic time on a long run of digits).
_NUMBER = linear_re.compile(r"[-+]?[$€£]?[\d,]*\.?\d+%?")
# Aligning pads every cell to its column's width: a table whose aligned form would be this many times
# its Markdown (one long cell over many short rows, a row of thousands of cells) stays as it is.
MAX_TABLE_GROWTH = 16


# --- Markdown ---


def slack_markdown(text: str, *, final: bool) -> str:
    """The answer as Slack should show it, with no mention that pings and no disguised link (`no_pings`).
    Not `final`: the part that will not change as more text arrives (a table still being written is held
    back, and a last `<` or `]`, which a mention or a link's target may follow)."""
    shown = no_pings(_markdown(text, final=final))
    return shown if final or not shown.endswith(("<", "]")) else shown[:-1]


def no_pings(text: str) -> str:
    """Markdown in which Slack's `<…>` syntax (`<!channel>`, `<!here>`, `<@U…>`, `<!subteam^…>`, `<#C…>`,
    `<http://…|label>`) and Markdown links (`[label](url)`), say from the data an answer quotes, neither
    notify anyone nor hide a link's target: an invisible space after each `<` and between `]` and `(`
    breaks their syntax (docs.slack.dev/messaging/formatting-message-text), and the text reads the same.
    Depends only on each `<` and `](` pair, so text already streamed never changes."""
    return text.replace("<", "<\u200b").replace("](", "]\u200b(")


def _markdown(text: str, *, final: bool) -> str:
    *complete, tail = text.split("\n")
    out: list[str] = []
    table: list[str] = []
    in_fence = False
    for line in complete + ([tail] if final else []):
        if not in_fence and _is_row(line):
            table.append(line)
            continue
        if table:
            out += _table(table)
            table = []
        if line.lstrip().startswith("```"):
            in_fence = not in_fence
        out.append(line)
    if final:
        out += _table(table)
        return "\n".join(out)
    undecided = not tail.strip() or tail.lstrip().startswith("|")
    if table and undecided:
        return "".join(f"{line}\n" for line in out)  # the table may go on: hold it, and the line after
    if table:
        out += _table(table)
    if not in_fence and tail.lstrip().startswith("|"):
        return "".join(f"{line}\n" for line in out)  # may be a table's first row
    return "".join(f"{line}\n" for line in out) + tail


def _is_row(line: str) -> bool:
    stripped = line.strip()
    return stripped.startswith("|") and stripped.count("|") >= 2


def _cells(line: str) -> list[str]:
    inner = line.strip().removeprefix("|").removesuffix("|")
    if "\\|" not in inner:
        return [cell.strip() for cell in inner.split("|")]
    return [cell.strip().replace("\\|", "|") for cell in _split_unescaped_pipes(inner)]


def _split_unescaped_pipes(text: str) -> list[str]:
    """`text` split at each `|` that no backslash escapes."""
    cells: list[list[str]] = []
    for piece in text.split("|"):
        if cells and cells[-1][-1].endswith("\\"):
            cells[-1].append(piece)
        else:
            cells.append([piece])
    return ["|".join(pieces) for pieces in cells]


def _table(lines: list[str]) -> list[str]:
    """A Markdown table as a monospaced block with aligned columns (numbers right-aligned); lines that
    are not a table (no separator row) are kept as they are."""
    if len(lines) < 2 or not all(_is_separator_cell(c) for c in _cells(lines[1]) if c):
        return lines
    rows = [_cells(line) for i, line in enumerate(lines) if i != 1]
    width = max(len(r) for r in rows)
    widths = [0] * width
    for row in rows:
        for column, cell in enumerate(row):
            widths[column] = max(widths[column], len(cell))
    if len(rows) * (sum(widths) + 2 * width) > MAX_TABLE_GROWTH * sum(len(line) for line in lines):
        return lines
    rows = [r + [""] * (width - len(r)) for r in rows]
    numeric = [all(_NUMBER.fullmatch(r[c]) or not r[c] for r in rows[1:]) and len(rows) > 1 for c in range(width)]

    def line(row: list[str]) -> str:
        cells = [cell.rjust(w) if num else cell.ljust(w) for cell, w, num in zip(row, widths, numeric, strict=True)]
        return "  ".join(cells).rstrip()

    rule = "  ".join("-" * w for w in widths)
    return ["```", line(rows[0]), rule, *(line(r) for r in rows[1:]), "```"]


def _is_separator_cell(cell: str) -> bool:
    """`---`, `:--`, `--:` or `:-:`."""
    dashes = cell.removeprefix(":").removesuffix(":")
    return bool(dashes) and not dashes.strip("-")


def cut_point(text: str, start: int, limit: int) -> int:
    """Where a message holding `text` should end: at most `limit` characters, after `start` (what was
    already sent). The last paragraph break, else line break, else space in the second half of the
    room (breaks inside code blocks do not count); else the latest of them; else a hard cut."""
    if len(text) <= limit:
        return len(text)
    if start >= limit:
        return start
    paragraph = line_end = space = -1
    in_fence = False
    offset = 0
    lines = text[:limit].split("\n")
    for index, line in enumerate(lines):
        inside = in_fence
        if line.lstrip().startswith("```"):
            in_fence, inside = not in_fence, True
        if not inside and " " in line and offset + line.rindex(" ") + 1 > start:
            space = offset + line.rindex(" ") + 1
        offset += len(line) + 1
        if index < len(lines) - 1 and not in_fence and offset > start:  # this line's break is within the limit
            line_end = offset
            if not line.strip():
                paragraph = offset
    half = start + (limit - start) // 2
    for candidate in (paragraph, line_end, space):
        if candidate > half:
            return candidate
    best = max(paragraph, line_end, space)
    return best if best > start else limit


def split_markdown(text: str, limit: int = MAX_MARKDOWN) -> list[str]:
    pieces = []
    while len(text) > limit:
        cut = cut_point(text, 0, limit)
        pieces.append(text[:cut])
        text = text[cut:]
    return [*pieces, text] if text else pieces


def markdown_block(text: str) -> dict[str, Any]:
    return {"type": "markdown", "text": text}


def preview(text: str) -> str:
    """The plain-text stand-in of a message's blocks (mrkdwn, escaped: nothing in it pings or links)."""
    flat = " ".join(text.replace("```", "").replace("\u200b", "").split())
    return escape(flat if len(flat) <= PREVIEW_CHARS else flat[: PREVIEW_CHARS - 1] + "…")


def escape(text: str) -> str:
    """Text for a mrkdwn `text` field (or a title, a status): Slack's three control characters escaped
    (docs.slack.dev/messaging/formatting-message-text#escaping), so `<!channel>` or `<http://x|y>` from
    data is shown, not acted on."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def query_page_url(web_url: str, run_id: str, label: str) -> str:
    """A query's own page in the web UI (web/app.py's /queries/{run}-{Q}): its SQL, its preview and its
    CSV, read with the browser's access token (a direct API link would answer 401 where a token is set)."""
    return f"{web_url.rstrip('/')}/queries/{quote(f'{run_id}-{label}', safe='')}"


# --- buttons ---


def answer_blocks(
    run_id: str,
    query_ids: list[str],
    followups: list[str],
    web_url: str | None = None,
    knowledge: Sequence[dict[str, str]] = (),
    *,
    feedback_buttons: bool = False,
    dig_deeper: bool = False,
) -> list[dict[str, Any]]:
    """Under an answer: the team's knowledge it cites (each entry's text and where it is kept), Show SQL
    per query (and its page in the web UI), follow-ups, Dig deeper (a report on the same question, asked
    only by that click), thumbs: Slack's own feedback buttons where the answer streams (`feedback_buttons`),
    else two buttons."""
    blocks: list[dict[str, Any]] = []
    if knowledge:
        cited = [
            f"*{escape(_cut(e['tag'], MAX_TAG_CHARS))}* {escape(_cut(e['text'], MAX_CITED_CHARS))} "
            f"(`{escape(_cut(e['source'], MAX_TAG_CHARS))}`)"
            for e in knowledge[:MAX_CITED]
        ]
        elements = [{"type": "mrkdwn", "text": text} for text in cited]
        blocks.append({"type": "context", "block_id": "analyst_knowledge", "elements": elements})
    sql: list[dict[str, Any]] = []
    for index, label in enumerate(query_ids):
        sql.append(_button(f"Show SQL {label}", f"{SHOW_SQL}_{index}", f"{run_id}-{label}"))
        if web_url:
            url = query_page_url(web_url, run_id, label)
            sql.append({**_button(f"Open {label}", f"{OPEN_QUERY}_{index}", label), "url": url})
    for number, start in enumerate(range(0, len(sql), MAX_ACTIONS)):
        blocks.append(
            {"type": "actions", "block_id": f"analyst_sql_{number}", "elements": sql[start : start + MAX_ACTIONS]}
        )
    if followups:
        elements = [_button(button_label(q), f"{FOLLOWUP}_{i}", q[:MAX_BUTTON_VALUE]) for i, q in enumerate(followups)]
        blocks.append({"type": "actions", "block_id": "analyst_followups", "elements": elements})
    if dig_deeper:
        button = _button("Dig deeper: a report", DIG_DEEPER, run_id)
        blocks.append({"type": "actions", "block_id": DIG_DEEPER, "elements": [button]})
    blocks.append(_feedback_buttons(run_id) if feedback_buttons else _thumbs(run_id))
    return blocks


def _thumbs(run_id: str) -> dict[str, Any]:
    thumbs = [_button("👍", f"{FEEDBACK}_up", f"up:{run_id}"), _button("👎", f"{FEEDBACK}_down", f"down:{run_id}")]
    return {"type": "actions", "block_id": FEEDBACK_BLOCK, "elements": thumbs}


def _feedback_buttons(run_id: str) -> dict[str, Any]:
    """Slack's thumbs for AI answers, in a context_actions block
    (docs.slack.dev/reference/block-kit/block-elements/feedback-buttons-element). A click reports the
    action id and the pressed button's value, the same `analyst_feedback…` / `up:<run>` as the classic
    buttons, so actions.py handles both."""

    def button(text: str, value: str, label: str) -> dict[str, Any]:
        return {"text": {"type": "plain_text", "text": text}, "value": value, "accessibility_label": label}

    element = {
        "type": "feedback_buttons",
        "action_id": FEEDBACK,
        "positive_button": button("👍", f"up:{run_id}", "Good answer"),
        "negative_button": button("👎", f"down:{run_id}", "Bad answer"),
    }
    return {"type": "context_actions", "block_id": FEEDBACK_BLOCK, "elements": [element]}


def classic_feedback(blocks: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """`blocks` with Slack's feedback buttons turned into two plain buttons (where Slack refuses them)."""
    out = []
    for block in blocks:
        if block.get("type") == "context_actions" and block.get("block_id") == FEEDBACK_BLOCK:
            run_id = block["elements"][0]["positive_button"]["value"].removeprefix("up:")
            block = _thumbs(run_id)
        out.append(block)
    return out


def reason_blocks(run_id: str) -> list[dict[str, Any]]:
    """After a thumbs-down (only the person who clicked sees it): thanks, and a box for what was wrong,
    sent with Enter. The reason goes into the eval case the thumbs-down proposes."""
    return [
        {"type": "section", "text": {"type": "mrkdwn", "text": "Thanks, noted. What was wrong? (optional)"}},
        {
            "type": "input",
            "block_id": f"{REASON}_{run_id}"[:255],
            "dispatch_action": True,
            "optional": True,
            "label": {"type": "plain_text", "text": "What was wrong?"},
            "element": {
                "type": "plain_text_input",
                "action_id": REASON,
                "max_length": 1_000,
                "dispatch_action_config": {"trigger_actions_on": ["on_enter_pressed"]},
            },
        },
    ]


def _cut(text: str, limit: int) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


def _button(text: str, action_id: str, value: str) -> dict[str, Any]:
    return {
        "type": "button",
        "text": {"type": "plain_text", "text": text[:MAX_BUTTON_TEXT], "emoji": True},
        "action_id": action_id,
        "value": value,
    }


def button_label(question: str) -> str:
    return question if len(question) <= MAX_BUTTON_TEXT else question[: MAX_BUTTON_TEXT - 1] + "…"


def action_kind(action_id: str) -> str:
    """`analyst_show_sql_2` -> `analyst_show_sql`."""
    for kind in (SHOW_SQL, OPEN_QUERY, FOLLOWUP, FEEDBACK, REASON, REPEAT, SCHEDULE, DIG_DEEPER, RESUME_REPORT):
        if action_id.startswith(kind):
            return kind
    return ""

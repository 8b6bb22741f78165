"""An answer's text as a reader sees it once its Markdown is rendered, with the way back to the offsets
of the text the model wrote.

`&#49;20,835` shows `120,835`, and so do `1\u200b20,835` and `1<!-- -->20,835`: a number split by an
HTML entity, a comment, a tag or an invisible (Unicode format, Cf) character must be read whole, or the
check sees a rank and a different, perhaps verified, number. Entities are decoded, comments, tags and
format characters dropped, numerals that are no decimal digit (`⁹⁹⁹`, `Ⅸ`, `½`) read as digits; nothing
else changes.
"""

from __future__ import annotations

import html
import unicodedata
from dataclasses import dataclass

from agent import linear_re
from agent.figures.deadline import Deadline, no_deadline

# CommonMark's raw HTML: a comment that starts a line opens an HTML block (hidden to its `-->`, or to the
# end); mid-line only a whole comment is one (an unclosed `<!--` shows as written), and a tag only in
# its own grammar (`<999,999>`, `< 15 ... >`, `<b 999 >` show as written). Neither is read past the next
# `<` (a comment or a quoted value holding one is read as text: checked, not hidden), so a candidate that
# never closes ends there, and the scan stays linear (an unclosed one per `<` would make it quadratic).
_MARKUP = linear_re.compile(
    r"^[ \t]{0,3}<!--.*?(?:-->|\z)|<!--(?:[^\n<]|\n[ \t]*[^\s<])*?-->"
    r"|<[A-Za-z][A-Za-z0-9-]*(?:\s+[A-Za-z_:][A-Za-z0-9_.:-]*(?:\s*=\s*(?:[^\s\"'=<>`]+|'[^'<]*'|\"[^\"<]*\"))?)*\s*/?>"
    r"|</[A-Za-z][A-Za-z0-9-]*\s*>"
    r"|&(?:#[0-9]{1,7}|#[xX][0-9a-fA-F]{1,6}|[A-Za-z][A-Za-z0-9]{1,31});",
    dot_all=True,
    multiline=True,
)


@dataclass(frozen=True)
class Rendered:
    text: str
    starts: list[int]  # for each character of `text`, where what shows it starts in the written text
    ends: list[int]  # and where it ends (an entity's characters span the whole entity)

    def span(self, start: int, end: int) -> tuple[int, int]:
        """The written text's offsets of `text[start:end]` (a non-empty span)."""
        return self.starts[start], self.ends[end - 1]


def render(written: str, deadline: Deadline | None = None) -> Rendered:
    deadline = deadline or no_deadline()
    rendered = Rendered("", [], [])
    parts: list[str] = []
    at = 0
    for match in _MARKUP.finditer(written):
        deadline.check()
        _plain(written, at, match.start(), parts, rendered)
        token = written[match.start() : match.end()]
        if token.startswith("&"):
            decoded = _visible(html.unescape(token))
            parts.append(decoded)
            rendered.starts.extend([match.start()] * len(decoded))
            rendered.ends.extend([match.end()] * len(decoded))
        at = match.end()
    _plain(written, at, len(written), parts, rendered)
    return Rendered("".join(parts), rendered.starts, rendered.ends)


def _plain(written: str, start: int, end: int, parts: list[str], rendered: Rendered) -> None:
    if written[start:end].isascii():  # no format character is ASCII: the text shows as written
        parts.append(written[start:end])
        rendered.starts.extend(range(start, end))
        rendered.ends.extend(range(start + 1, end + 1))
        return
    for index in range(start, end):
        shown = _read_as(written[index], written[index - 1] if index else " ")
        parts.append(shown)
        rendered.starts.extend([index] * len(shown))
        rendered.ends.extend([index + 1] * len(shown))


def _read_as(char: str, before: str) -> str:
    """What a reader reads a character as: nothing for a format character, and a number's digits for
    a numeral that is not a decimal digit (`⁹` 9, `⑨` 9, `Ⅸ` 9, `½` 0.5), so its figure is checked; set
    apart from a decimal digit before it (`120,835¹` is 120,835 and a footnote, not `120,8351`)."""
    category = unicodedata.category(char)
    if category == "Cf":
        return ""
    if category in ("No", "Nl"):
        value = unicodedata.numeric(char, None)
        if value is not None:
            digits = str(int(value)) if value == int(value) else str(value)
            return f" {digits}" if before.isdecimal() else digits
    return char


def _visible(text: str) -> str:
    return "".join(c for c in text if unicodedata.category(c) != "Cf")

"""The team's knowledge in the prompt: within a budget inside the cached prefix (in file order, so the
bytes only change when the files do), and past it, the entries whose words match the question,
retrieved beside the question."""

from __future__ import annotations

import re
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from pathlib import Path

from agent.config import Settings
from agent.knowledge.files import Entry, load_directory
from agent.lexical import LexicalIndex, terms
from agent.schema.redaction import mentions

SECTIONS = {
    "glossary": "Glossary",
    "metrics": "Metrics",
    "notes": "Table and column notes",
    "verified_queries": "Verified queries",
}
RETRIEVED_ENTRIES = 5


@dataclass(frozen=True)
class Prefixed:
    text: str
    left_out: int  # entries past the budget (retrieved by question instead)


class KnowledgeBase:
    def __init__(self, entries: Sequence[Entry], max_chars: int) -> None:
        self._max_chars = max_chars
        self._build(list(entries))

    def _build(self, entries: list[Entry]) -> None:
        self.entries = entries
        chosen: list[Entry] = []
        used = 0
        for entry in sorted(self.entries, key=lambda e: list(SECTIONS).index(e.kind)):
            size = len(render_entry(entry)) + 1
            if used + size <= self._max_chars:
                chosen.append(entry)
                used += size
        self._in_prefix = {id(e) for e in chosen}
        self.prefix = Prefixed(render(chosen), len(self.entries) - len(chosen))
        self._index = LexicalIndex((str(i), _fields(e)) for i, e in enumerate(self.entries))

    def join(self, published: Sequence[Entry]) -> int:
        """Add entries published outside the files (the warehouse's Agents Schema,
        agent/knowledge/agents_schema.py) after the files' own, leaving out what the files already say
        (the same kind and name: the team's own word wins). Returns how many joined."""
        known = {(entry.kind, entry.name) for entry in self.entries}
        joined = [entry for entry in published if (entry.kind, entry.name) not in known]
        if joined:
            self._build([*self.entries, *joined])
        return len(joined)

    @classmethod
    def load(cls, directory: Path, max_chars: int) -> KnowledgeBase:
        return cls(load_directory(directory), max_chars)

    @classmethod
    def of(cls, settings: Settings) -> KnowledgeBase | None:
        """The knowledge the settings name (AGENT_KNOWLEDGE_DIR, or the demo's), or None."""
        directory = settings.knowledge_dir
        return cls.load(directory, settings.agent_knowledge_max_chars) if directory else None

    def without_tables(self, hidden: Collection[str]) -> KnowledgeBase:
        """The knowledge a policy's people see: no entry that names a table they may not read (`db.table`),
        by its full name or its own, anywhere in the entry (its SQL, its table, its prose). A word that
        happens to be such a table's name leaves the entry out too: better one note fewer than one
        table named to people who may not read it."""
        if (mention := mentions(hidden, ())) is None:
            return self
        return KnowledgeBase([e for e in self.entries if not mention.search(_all_text(e))], self._max_chars)

    def described(self) -> list[dict[str, str]]:
        """Each entry as a person opens it from a citation: its tag, its text and where it is kept
        (the file relative to the knowledge folder, and the line)."""
        return [
            {
                "tag": entry.tag,
                "kind": entry.kind,
                "name": entry.name,
                "text": describe_entry(entry),
                "source": f"{entry.path.name}:{entry.line}",
            }
            for entry in self.entries
        ]

    def expansion(self, question: str) -> str:
        """The team's words for what the question names: for each glossary term, metric or note whose
        name or synonym the question uses (every word of it), the entry's names and the tables it
        reads. Searching the schema with these finds the tables a team's own vocabulary points at."""
        asked = set(terms(question))
        words: list[str] = []
        for entry in self.entries:
            names = [entry.name, *(str(s) for s in entry.fields.get("synonyms") or [])]
            if not any(set(terms(name)) and set(terms(name)) <= asked for name in names):
                continue
            tables = [entry.text("table"), *(str(t) for t in entry.fields.get("tables") or [])]
            words += [*names, *(t for t in tables if t)]
        return " ".join(dict.fromkeys(words))

    def cited(self, answer: str) -> list[dict[str, str]]:
        """The entries an answer cites by tag, in the order it first cites them."""
        found = [(answer.find(entry["tag"]), entry) for entry in self.described() if entry["tag"] in answer]
        return [entry for _, entry in sorted(found, key=lambda pair: pair[0])]

    def search(self, question: str, limit: int = RETRIEVED_ENTRIES) -> list[Entry]:
        """The entries that best match the question, best first."""
        return [self.entries[int(hit.key)] for hit in self._index.search(question, limit)]

    def retrieve(self, question: str, limit: int = RETRIEVED_ENTRIES) -> str:
        """The matching entries the prefix left out, rendered; empty when there are none."""
        if not self.prefix.left_out:
            return ""
        found = [e for e in self.search(question, limit + len(self.entries)) if id(e) not in self._in_prefix]
        return render(found[:limit])


def _all_text(entry: Entry) -> str:
    return " ".join([entry.name, *(str(value) for value in entry.fields.values())])


def _fields(entry: Entry) -> list[tuple[str, float]]:
    names = [entry.name, *(str(s) for s in entry.fields.get("synonyms") or [])]
    return [
        *((name, 3.0) for name in names),
        (entry.text("definition") + " " + entry.text("description") + " " + entry.text("note"), 1.0),
        (entry.text("question"), 3.0),
        (entry.text("sql") + " " + " ".join(map(str, entry.fields.get("tables") or [])), 0.5),
    ]


def render(entries: Sequence[Entry]) -> str:
    """Markdown, one section per kind, entries in the order given."""
    parts = []
    for kind, title in SECTIONS.items():
        lines = [render_entry(e) for e in entries if e.kind == kind]
        if lines:
            parts.append(f"## {title}\n" + "\n".join(lines))
    return "\n\n".join(parts)


def render_entry(entry: Entry) -> str:
    """One entry as a Markdown list item. The prompt is cached and shared by every question of every
    person, and the files are written by whoever a review trusted: prose is kept to the item's one
    line (so it cannot start a heading, a fence or another item), and SQL is inline code without a
    backtick or a fence that nothing inside it can close."""
    if entry.kind == "glossary":
        synonyms = entry.fields.get("synonyms") or []
        also = f" (also: {_one_line(', '.join(map(str, synonyms)))})" if synonyms else ""
        # the table comes before the SQL: a closing fence may be followed only by spaces
        table = f" On {_one_line(entry.text('table'))}." if entry.text("table") else ""
        sql = f" SQL: {_sql(entry.text('sql'))}" if entry.text("sql") else ""
        return f"- **{entry.name}**{also} {entry.tag}: {_one_line(entry.text('definition'))}{table}{sql}"
    if entry.kind == "metrics":
        source = entry.text("from") or ", ".join(map(str, entry.fields["tables"]))
        return (
            f"- **{entry.name}** {entry.tag}: {_one_line(entry.text('description'))} "
            f"SQL from {_one_line(source)}: {_sql(entry.text('sql'))}"
        )
    if entry.kind == "notes":
        sql = f" Example: {_sql(entry.text('sql'))}" if entry.text("sql") else ""
        return f"- **{entry.name}** {entry.tag}: {_one_line(entry.text('note'))}{sql}"
    who = _one_line(f"verified by {entry.text('verified_by')}, {entry.text('verified_at')}")
    question = f" {_one_line(entry.text('question'))}" if entry.text("id") else ""
    return f"- {entry.tag}{question} ({who}){fenced(entry.text('sql'))}"


def describe_entry(entry: Entry) -> str:
    """Plain text for a person who opened a citation: what it says, and its SQL (its lines kept)."""
    said = {
        "glossary": entry.text("definition"),
        "metrics": entry.text("description"),
        "notes": entry.text("note"),
        "verified_queries": entry.text("question")
        + (f" Verified by {entry.text('verified_by')}, {entry.text('verified_at')}."),
    }[entry.kind]
    sql = f"\nSQL:\n{entry.text('sql').strip()}" if entry.text("sql") else ""
    return f"{entry.name}: {_one_line(said)}{sql}"


def _one_line(text: str) -> str:
    return " ".join(text.split())


def _sql(text: str) -> str:
    """SQL as the model should copy it: inline when it is one line, else fenced with its lines kept (joined
    into one line, a `--` comment would swallow the rest of the statement)."""
    text = text.strip()
    one_line = len(text.splitlines()) <= 1  # any line break Python knows (\r, \u2028 ...), not only \n
    return f"`{text}`" if one_line and "`" not in text else fenced(text)


def fenced(text: str) -> str:
    """`text` in a fenced block, indented under its list item, its fence longer than any run of backticks
    inside it: no line of it can close the block (CommonMark closes a fence only with one at least as
    long), so it cannot end early and turn the rest into headings or instructions."""
    # only Markdown's own line endings: str.splitlines would also break a literal at \u2028 or \x0b,
    # which ClickHouse's canonical text keeps raw, and the prompt would show another query
    body = "\n".join(f"  {line}" for line in _MARKDOWN_LINE_END.split(text.strip()))
    fence = "`" * max(3, _longest_backtick_run(text) + 1)
    return f"\n  {fence}sql\n{body}\n  {fence}"


_MARKDOWN_LINE_END = re.compile(r"\r\n|\r|\n")  # CommonMark 2.1's line endings


def _longest_backtick_run(text: str) -> int:
    return max((len(run) for run in re.findall(r"`+", text)), default=0)

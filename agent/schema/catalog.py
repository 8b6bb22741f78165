"""A warehouse too large for the prompt: a compact catalogue, and a lookup over the introspected schema.

When the whole schema (agent/schema.py) does not fit its budget, the prompt carries one line per
table (name, row count, comment) instead, itself within a budget, and the model reads the rest on
demand with the `lookup_schema` tool: a table's columns, types, comments, sampled values and keys,
or a search over names, comments and sampled values.

Everything here reads the `Table`s that introspection returned, which are exactly the tables in the
configured scope (`Scope.allows`); nothing here runs SQL. So the tool can tell the model nothing about
a table the model could not read anyway, and a name outside the scope is answered exactly like a name
that does not exist.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from agent.lexical import terms
from agent.schema.details import fair_shares, table_details
from agent.schema.engines import engine_hint
from agent.schema.families import Families
from agent.schema.search import TableSearch
from agent.schema.tables import Table, render_table, round_count

MAX_TABLES_PER_LOOKUP = 10
SEARCH_RESULTS = 10
MATCHING_COLUMNS_SHOWN = 6
DETAILS_CHARS = 10_000  # the lookup tool's answer (the loop cuts a tool's answer at max_result_chars)


@dataclass(frozen=True)
class CatalogueText:
    text: str
    listed: frozenset[str]  # the tables the catalogue names
    complete: bool  # every table in scope is listed


class Catalog:
    def __init__(self, tables: Sequence[Table], current_database: str = "default") -> None:
        self._tables = {t.qualified: t for t in tables}
        self._current = current_database
        self._search = TableSearch(tables)

    def __len__(self) -> int:
        return len(self._tables)

    def tables(self) -> list[Table]:
        return list(self._tables.values())

    # --- the prompt ---

    def render(self, max_chars: int) -> CatalogueText:
        """One line per table (a family of split tables: one line for its newest), grouped by database,
        in name order; within the budget, the tables with a comment and the most rows first.
        Deterministic: it goes into the cached prefix."""
        families = self._search.families
        shown = [t for t in self._tables.values() if not families.hidden(t.qualified)]
        priority = sorted(shown, key=lambda t: (not t.comment, -(t.total_rows or 0), t.qualified))
        chosen: list[Table] = []
        headed: set[str] = set()
        used = 0
        for table in priority:
            size = len(_catalogue_line(table, families)) + 1
            if table.database not in headed:
                size += len(table.database) + 5  # its "## database" heading and the blank line before it
            if used + size > max_chars and chosen:
                continue
            chosen.append(table)
            headed.add(table.database)
            used += size
        lines: list[str] = []
        database = None
        for table in sorted(chosen, key=lambda t: t.qualified):
            if table.database != database:
                database = table.database
                lines += ["", f"## {database}"] if lines else [f"## {database}"]
            lines.append(_catalogue_line(table, families))
        listed = frozenset(m for t in chosen for m in _members(t.qualified, families))
        return CatalogueText("\n".join(lines), listed, len(listed) == len(self._tables))

    # --- the lookup tool ---

    def resolve(self, name: str) -> Table | None:
        """The in-scope table a name means (`db.table`, or `table` in the default database or in
        exactly one database); None for any other name, in scope or not."""
        name = name.strip().strip("`\"'")
        if (table := self._tables.get(name)) is not None:
            return table
        if "." not in name:
            if (table := self._tables.get(f"{self._current}.{name}")) is not None:
                return table
            same = [t for t in self._tables.values() if t.name == name]
            if len(same) == 1:
                return same[0]
        return None

    def details(self, names: Sequence[str], *, max_chars: int = DETAILS_CHARS, columns: str = "", page: int = 1) -> str:
        """Each named table's columns, all tables within `max_chars` together: a table too wide for its
        share shows a page of them (`page`) and says how many were left out; `columns`: only the
        columns that match these words."""
        parts = []
        asked = names[:MAX_TABLES_PER_LOOKUP]
        found = [self.resolve(name) for name in asked]
        shares = iter(fair_shares([len(render_table(t)) + 2 for t in found if t is not None], max_chars - 200))
        for name, table in zip(asked, found, strict=True):
            if table is not None:
                parts.append(table_details(table, next(shares), columns, page))
                continue
            similar = self._search.search(name, 3)
            suggestion = f" Similar names: {', '.join(similar)}." if similar else ""
            parts.append(f"## {name}\nNo table of that name is available.{suggestion}")
        if len(names) > MAX_TABLES_PER_LOOKUP:
            parts.append(f"(Only the first {MAX_TABLES_PER_LOOKUP} tables are shown; ask for the rest next.)")
        return "\n\n".join(parts)

    def search(self, text: str, limit: int = SEARCH_RESULTS) -> list[str]:
        """Qualified names of the tables that best match the words, best first (a family of split tables
        once, by the member the words' date names, else its newest)."""
        return self._search.search(text, limit)

    def search_text(self, text: str, limit: int = SEARCH_RESULTS) -> str:
        """The search's answer for the model: the matching tables, or what to try instead."""
        found = self.matches(text, limit)
        return found or f"No table matches {text!r}. Try other words (a synonym, the thing counted, a value)."

    def matches(self, text: str, limit: int = SEARCH_RESULTS) -> str:
        """One line per matching table (with the columns whose words matched); empty when none does."""
        wanted = set(terms(text))
        families = self._search.families
        return "\n".join(_search_line(self._tables[name], wanted, families) for name in self.search(text, limit))

    def family(self, qualified: str) -> list[str]:
        """The tables a search hit stands for: its family's members, or itself."""
        return _members(qualified, self._search.families)


def _members(qualified: str, families: Families) -> list[str]:
    family = families.of(qualified)
    return list(family.members) if family is not None else [qualified]


def _family_note(table: Table, families: Families) -> str:
    family = families.of(table.qualified)
    return f" [{family.describe(table.qualified)}]" if family is not None else ""


def _catalogue_line(table: Table, families: Families) -> str:
    rows = f" (~{round_count(table.total_rows)} rows)" if table.total_rows is not None else ""
    comment = f": {' '.join(table.comment.split())[:160]}" if table.comment else ""
    hint = f" [{table.engine}: {engine_hint(table.engine)}]" if engine_hint(table.engine) else ""
    return f"- {table.name}{rows}{_family_note(table, families)}{hint}{comment}"


def _search_line(table: Table, wanted: set[str], families: Families) -> str:
    """A table found by a search: its catalogue facts and the columns whose words matched."""
    line = f"- {table.qualified}" + _catalogue_line(table, families)[2 + len(table.name) :]
    matching = []
    for column in table.columns:
        words = set(terms(f"{column.name} {column.comment}"))
        values = [v for v in column.samples if wanted & set(terms(v))]
        if wanted & words or values:
            matching.append(f"{column.name} {column.type}" + (f" (values: {', '.join(values[:3])})" if values else ""))
    if matching:
        line += "\n  matching columns: " + "; ".join(matching[:MATCHING_COLUMNS_SHOWN])
    return line

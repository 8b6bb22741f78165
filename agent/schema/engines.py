"""What a table's engine means for reading it: the note the schema carries where the naive reading is
wrong.

A `ReplacingMergeTree` keeps every version of a row until a background merge, whenever that comes, keeps
the latest; a `CollapsingMergeTree` keeps a row and its cancelling row until they collapse; an
`AggregatingMergeTree` holds partial aggregate states, a `SummingMergeTree` partial sums. A plain
`count()` or `sum()` over any of them answers about the parts on disk, not about the data. The note says
how to read each (FINAL, argMax by the version column, the sign, -Merge combinators, GROUP BY the key),
naming the columns the engine's own arguments name. A `Distributed` table, and a `Replicated` or `Shared`
variant, reads as the engine underneath it.

The engine's arguments come from `system.tables.engine_full`, the text ClickHouse prints for its own
catalogue (never SQL from a model); only its leading `Engine(arguments)` is read here.
"""

from __future__ import annotations

from dataclasses import dataclass

_VARIANT_PREFIXES = ("Replicated", "Shared")


@dataclass(frozen=True)
class EngineCall:
    name: str  # the engine with any Replicated/Shared prefix taken off
    arguments: tuple[str, ...]  # as printed, string literals included


def engine_call(engine: str, engine_full: str) -> EngineCall:
    """The engine's family and arguments. A Replicated engine's leading Keeper path and replica name
    (string literals, when given) are not arguments of the family."""
    arguments = _arguments(engine_full, engine)
    name = engine
    for prefix in _VARIANT_PREFIXES:
        if name.startswith(prefix) and name != prefix and name.endswith("MergeTree"):
            name = name[len(prefix) :]
            while arguments and arguments[0].startswith("'"):
                arguments = arguments[1:]
    return EngineCall(name, arguments)


def engine_note(engine: str, engine_full: str, sorting_key: str) -> str:
    """How to read a table of this engine, or "" when reading it plainly is right."""
    call = engine_call(engine, engine_full)
    key = sorting_key or "the sorting key"
    columns = [a for a in call.arguments if not a.startswith("'")]
    if call.name == "ReplacingMergeTree":
        return _replacing(key, columns)
    if call.name in ("CollapsingMergeTree", "VersionedCollapsingMergeTree"):
        sign = columns[0] if columns else "sign"
        version = f", the latest {columns[1]} winning" if len(columns) > 1 else ""
        return (
            f"rows with the same {key} cancel out by `{sign}` (1 adds a state, -1 cancels it{version}) only when "
            f"parts merge: count with sum({sign}), total a column with sum(x * {sign}), keep keys HAVING "
            f"sum({sign}) > 0, or read with FINAL; never a plain count() or sum(x)."
        )
    if call.name == "SummingMergeTree":
        return (
            f"rows with the same {key} are summed only when parts merge, so one key may have several rows: always "
            f"sum() the measures GROUP BY the key columns; never read one row as the total."
        )
    if call.name == "AggregatingMergeTree":
        return (
            f"holds partial aggregates per {key}, merged only when parts merge: read AggregateFunction columns "
            f"with the -Merge combinator of their function (uniqMerge(col), sumMerge(col), avgMerge(col)) and "
            f"SimpleAggregateFunction columns with their function (sum, max, any), GROUP BY the key columns."
        )
    return ""


def _replacing(key: str, columns: list[str]) -> str:
    if not columns:
        return (
            f"rows with the same {key} are versions of one row until parts merge (the last inserted wins): read "
            f"with FINAL (`FROM table FINAL`); a plain count() or sum() counts old versions too."
        )
    version = columns[0]
    deleted = (
        f" Rows with {columns[1]} = 1 are deletions: FINAL drops them; with argMax, filter them out after."
        if len(columns) > 1
        else ""
    )
    return (
        f"rows with the same {key} are versions of one row until parts merge (the highest `{version}` wins): "
        f"read with FINAL (`FROM table FINAL`), or argMax(column, {version}) GROUP BY the key; a plain count() "
        f"or sum() counts old versions too.{deleted}"
    )


HINTS = {
    "ReplacingMergeTree": "read with FINAL",
    "CollapsingMergeTree": "weigh rows by their sign",
    "VersionedCollapsingMergeTree": "weigh rows by their sign",
    "SummingMergeTree": "sum() GROUP BY the key",
    "AggregatingMergeTree": "read with -Merge combinators",
}


def engine_hint(engine: str) -> str:
    """A few words for a catalogue line (the whole note comes with the table's details), or ""."""
    family = engine.split()[-1] if engine else ""
    for prefix in _VARIANT_PREFIXES:
        if family.startswith(prefix) and family.endswith("MergeTree"):
            family = family[len(prefix) :]
    return HINTS.get(family, "")


def distributed_target(engine_full: str) -> tuple[str, str] | None:
    """The `(database, table)` a Distributed table reads on each shard, when named plainly."""
    arguments = _arguments(engine_full, "Distributed")
    if len(arguments) < 3:
        return None
    database, table = (_unquoted(a) for a in arguments[1:3])
    return (database, table) if database and table else None


def _unquoted(argument: str) -> str:
    if len(argument) >= 2 and argument[0] == argument[-1] and argument[0] in "'`\"":
        return argument[1:-1]
    return argument if argument.replace("_", "").isalnum() else ""


def _arguments(engine_full: str, engine: str) -> tuple[str, ...]:
    """The top-level arguments of the leading `engine(...)` of `engine_full`, each as printed."""
    if not engine_full.startswith(engine + "("):
        return ()
    parts: list[str] = []
    current: list[str] = []
    depth, quote, escaped = 0, "", False
    for char in engine_full[len(engine) + 1 :]:
        if quote:
            current.append(char)
            if escaped:
                escaped = False
            elif char == "\\":
                escaped = True
            elif char == quote:
                quote = ""
            continue
        if char in "'`\"":
            quote = char
        elif char in "([":
            depth += 1
        elif char in ")]":
            if depth == 0:
                parts.append("".join(current).strip())
                return tuple(p for p in parts if p)
            depth -= 1
        elif char == "," and depth == 0:
            parts.append("".join(current).strip())
            current = []
            continue
        current.append(char)
    return ()  # no closing parenthesis: not an argument list this reads

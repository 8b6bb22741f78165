"""Which tables join: read from the key columns' names, since warehouses rarely declare keys.

A question names what it counts and filters by ("accounts in East Bohemia"), rarely the lookup, link
or concept table its SQL must go through (`disp`, `district`, `security_group_instance_association`).
Those share key columns with the tables the question does name: `instance_uuid` leads to `instances`,
two tables that both have `dlc_key` join on it, and a column named by a word of a table's name leads
to it (`eye_colour_id` to `colour`, `link_to_member` to `member`, `zip` to `zip_code`, `hero_id` to the
one table ending in `hero`); a table many plain columns name (`status`) is linked to none of them.
A family of copies or split tables (agent/schema/families.py) joins as its one representative: the
copies `shadow_quota_usages` and `shadow_reservations` beside the originals left `usage_id` naming
two tables (so none) and doubled every group of tables sharing a key.
The search adds the neighbours of its best hits, so a question's tables arrive together.
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Sequence

from agent.schema.families import Families
from agent.schema.tables import Table

_KEY = re.compile(r"^(?P<entity>.+?)_?(?:id|key|code|uuid|no|num|number|ref)$", re.IGNORECASE)
_GENERIC = frozenset({"id", "key", "code", "uuid", "no", "num", "number", "ref"})
_WORDS = re.compile(r"_+|(?<=[a-z])(?=[A-Z])")  # snake_case and camelCase
MIN_ENDING = 4  # `hero_id` finds `superhero`; an ending shorter than this (`id`, `no`) says nothing
MAX_SHARING = 6  # a key column in more tables than this (`created_by_id`) says nothing about joins


def key_columns(table: Table) -> set[str]:
    """The table's columns whose names say they are keys (`account_id`, `DLC_KEY`, `instance_uuid`)."""
    return {c.name.lower() for c in table.columns if c.name.lower() not in _GENERIC and _KEY.match(c.name)}


class JoinGraph:
    """Tables of the same database linked by a key column they share, or by a column that names
    another table (`district_id` -> `district`, `link_to_event` -> `event`)."""

    def __init__(self, tables: Sequence[Table], families: Families | None = None) -> None:
        self._families = families if families is not None else Families(tables)
        self._links: dict[str, set[str]] = defaultdict(set)
        self._via: dict[str, dict[str, set[str]]] = defaultdict(lambda: defaultdict(set))
        by_database: dict[str, list[Table]] = defaultdict(list)
        for table in sorted(tables, key=lambda t: t.qualified):  # the same links whatever the tables' order
            if self._families.hidden(table.qualified):
                continue  # a family joins as its representative
            by_database[table.database].append(table)
        for members in by_database.values():
            self._link(members)

    def neighbours(self, qualified: str) -> set[str]:
        """The tables joined to this one (to its family's representative); each one a representative."""
        return self._links.get(self._families.representative(qualified), set())

    def via(self, qualified: str) -> dict[str, set[str]]:
        """The tables this one's columns name -> those columns (`superhero` -> `colour`: `eye_colour_id`,
        `hair_colour_id`)."""
        return self._via.get(self._families.representative(qualified), {})

    def _link(self, tables: list[Table]) -> None:
        named: dict[str, str] = {}
        for table in tables:
            for name in _entity_names(table.name):
                named.setdefault(name, table.qualified)
        endings = _endings(named)
        sharing: dict[str, set[str]] = defaultdict(set)
        naming: dict[str, set[str]] = defaultdict(set)  # a table -> the tables with a plain column naming it
        targets: dict[str, frozenset[str]] = {}  # a column's name -> the tables it may name (names repeat)
        for table in tables:
            keys = key_columns(table)
            for key in keys:
                sharing[key].add(table.qualified)
            for name in (c.name for c in table.columns):
                if name not in targets:
                    targets[name] = _targets(name, named, endings)
                if len(others := targets[name] - {table.qualified}) != 1:
                    continue
                (target,) = others
                self._via[table.qualified][target].add(name)
                if name.lower() in keys:
                    self._connect(table.qualified, target)
                else:
                    naming[target].add(table.qualified)
        for group in [*sharing.values(), *({target, *holders} for target, holders in naming.items())]:
            if 1 < len(group) <= MAX_SHARING + 1:
                for one in group:
                    for other in group - {one}:
                        self._connect(one, other)

    def _connect(self, one: str, other: str) -> None:
        self._links[one].add(other)
        self._links[other].add(one)


def _entity_names(name: str) -> set[str]:
    """What a key column calls this table: `instances` is `instance`, `FCLT_BUILDING` is `fclt_building`,
    `zip_code` is also `zip`."""
    lowered = name.lower()
    names = {lowered, lowered.rstrip("s")}
    if lowered.endswith("ies"):
        names.add(lowered[:-3] + "y")
    if (match := _KEY.match(lowered)) is not None:
        names.add(match.group("entity").rstrip("_"))
    return names


def _targets(column: str, named: dict[str, str], endings: dict[str, set[str]]) -> frozenset[str]:
    """The table a column names: by its whole name less a key suffix (`district_id`, `zip`), else by its
    last word (`hair_colour_id` -> `colour`, `link_to_event` -> `event`, `DestAirport` -> `airports`); a
    key column, else by the tables whose names end with it, of which one other than its own is taken
    (`power_id` -> `superpower`, from `hero_power`)."""
    match = _KEY.match(column)
    written = (match.group("entity") if match else column).rstrip("_0123456789")  # `home_player_1`: a player
    entity = written.lower()
    if entity in named:
        return frozenset({named[entity]})
    last = _WORDS.split(written)[-1].lower()
    if last != entity and len(last) >= 3 and last in named:
        return frozenset({named[last]})
    return frozenset(endings.get(entity, ())) if match else frozenset()


def _endings(named: dict[str, str]) -> dict[str, set[str]]:
    """Each ending of four letters or more of the tables' names -> the tables whose names end so."""
    endings: dict[str, set[str]] = defaultdict(set)
    for name, qualified in named.items():
        for start in range(1, len(name) - MIN_ENDING + 1):
            endings[name[start:]].add(qualified)
    return endings

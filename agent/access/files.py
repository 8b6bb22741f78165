"""The access policy file (`AGENT_ACCESS_FILE`): YAML kept in git beside the knowledge files, read
safely and within bounds (agent/safe_yaml.py), with the line of every policy, member, table and channel,
so that each problem is one line naming the file and line.

```yaml
contact: "#data-help on Slack"        # who the default (no data) tells people to ask
default: no-data                      # optional: the policy of whoever no policy names (built in: no data)
policies:                             # in order: a person gets the first whose members include them
  - name: jfk
    contact: Ana Ruiz (ana@example.com)
    members:                          # any of: group (OIDC), email, slack_user, slack_usergroup
      - group: jfk-ops
      - email: ana@example.com
      - slack_user: U0123ABC
      - slack_usergroup: S0456DEF
    tables:                           # database.table: a row filter (ClickHouse), or nothing for every row
      nycflights13.flights: origin = 'JFK'
      nycflights13.airlines:
channels:                             # Slack channel id: its policy (everyone in it reads the answer)
  C0789GHI: jfk
```

Tables are named one by one, never by a glob: a table created tomorrow is read by nobody until a
policy names it. What this module checks needs only the file; that each table exists and each filter
is a safe boolean expression over its table is the engine's to say (`agent/access/check.py`).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any, get_args

import yaml

from agent import safe_yaml
from agent.access.policy import NO_DATA, Member, MemberKind, Policies, Policy
from agent.config import ConfigError

SECTIONS = ("policies", "channels", "default", "contact")
POLICY_FIELDS = ("name", "members", "tables", "contact")
MEMBER_KINDS: tuple[str, ...] = get_args(MemberKind)
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}\Z")
_TABLE = re.compile(r"[^.\s`\"'*?\[\]]+\.[^.\s`\"'*?\[\]]+\Z")
_LINE, _LINES = "__line__", "__lines__"
NO_DATA_CONTACT = "the team that runs this agent"


class AccessFileError(ConfigError):
    """A policy file that cannot be used; one line per problem, each naming the file and line."""

    def __init__(self, problems: list[str]) -> None:
        super().__init__("\n".join(problems))
        self.problems = problems


@dataclass(frozen=True)
class PolicyFile:
    """The policies a file holds, and where each table of each policy is named (for the engine's check)."""

    path: Path
    policies: Policies
    table_lines: Mapping[tuple[str, str], int] = field(default_factory=dict)  # (policy, db.table) -> line

    def where(self, policy: str, table: str) -> str:
        return f"{self.path}:{self.table_lines.get((policy, table), 1)}"


class _LineLoader(safe_yaml.Loader):
    """Safe YAML that remembers the line of each mapping and each of its keys, and refuses a key given
    twice (PyYAML would keep the last silently: a table's second filter would win unseen)."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: set[Any] = set()
        for key, _ in node.value:
            if isinstance(key, yaml.ScalarNode):
                if key.value in seen:
                    raise safe_yaml.Unreadable(problem=f"{key.value!r} is given twice", problem_mark=key.start_mark)
                seen.add(key.value)
        mapping = super().construct_mapping(node, deep=deep)
        mapping[_LINE] = node.start_mark.line + 1
        mapping[_LINES] = {
            key.value: key.start_mark.line + 1 for key, _ in node.value if isinstance(key, yaml.ScalarNode)
        }
        return mapping


def load_policy_file(path: Path) -> PolicyFile:
    """The file's policies. Raises AccessFileError listing every problem found, each on its own line."""
    document = _read(path)
    reader = _Reader(path)
    policy_file = reader.policy_file(document)
    if reader.problems:
        raise AccessFileError(reader.problems)
    return policy_file


def _read(path: Path) -> dict[str, Any]:
    try:
        document = safe_yaml.load(safe_yaml.read_text(path), _LineLoader)
    except safe_yaml.TooLarge as exc:
        raise AccessFileError([f"{path}: {exc}"]) from None
    except yaml.MarkedYAMLError as exc:
        line = exc.problem_mark.line + 1 if exc.problem_mark else 1
        what = "refused" if isinstance(exc, safe_yaml.Unbounded) else "not valid YAML"
        raise AccessFileError([f"{path}:{line}: {what} ({exc.problem})"]) from None
    except RecursionError:
        raise AccessFileError([f"{path}: nested too deeply to read"]) from None
    except (OSError, UnicodeError, yaml.YAMLError) as exc:
        raise AccessFileError([f"{path}: cannot be read ({exc})"]) from None
    if document is None:
        return {_LINE: 1, _LINES: {}}
    if not isinstance(document, dict):
        raise AccessFileError([f"{path}:1: expected a mapping with any of {', '.join(SECTIONS)}"])
    return document


class _Reader:
    """One file's reading: every problem is noted (one line each) and reading goes on, so a person
    sees all of them at once."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.problems: list[str] = []
        self.table_lines: dict[tuple[str, str], int] = {}

    def problem(self, line: int, message: str) -> None:
        self.problems.append(f"{self.path}:{line}: {message}")

    def policy_file(self, document: dict[str, Any]) -> PolicyFile:
        lines = document[_LINES]
        for key in _keys(document):
            if key not in SECTIONS:
                self.problem(lines.get(str(key), 1), f"unknown section {key!r}; expected any of {', '.join(SECTIONS)}")
        contact = self.text(document, "contact", lines) or NO_DATA_CONTACT
        policies = self.policies(document.get("policies"), lines.get("policies", 1))
        by_name = {p.name: p for p in policies}
        default = Policy(NO_DATA, contact=contact)
        if (name := self.text(document, "default", lines)) and name != NO_DATA:
            if name not in by_name:
                self.problem(lines["default"], f"default names no policy of this file: {name!r}")
            default = by_name.get(name, default)
        channels = self.channels(document.get("channels"), lines.get("channels", 1), set(by_name) | {NO_DATA})
        return PolicyFile(
            self.path,
            Policies(tuple(policies), default, MappingProxyType(channels)),
            MappingProxyType(dict(self.table_lines)),
        )

    def text(self, mapping: dict[str, Any], key: str, lines: dict[str, int]) -> str:
        value = mapping.get(key)
        if value is None:
            return ""
        if not isinstance(value, str) or not value.strip():
            self.problem(lines.get(key, mapping.get(_LINE, 1)), f"`{key}` must be text")
            return ""
        return value.strip()

    def policies(self, items: Any, line: int) -> list[Policy]:
        if items is None:
            return []
        if not isinstance(items, list):
            self.problem(line, "`policies` must be a list of policies")
            return []
        policies: list[Policy] = []
        for item in items:
            policy = self.policy(item, line)
            if policy is None:
                continue
            if policy.name == NO_DATA or any(p.name == policy.name for p in policies):
                why = "is the built-in default's name" if policy.name == NO_DATA else "is used by an earlier policy"
                self.problem(item[_LINES].get("name", item[_LINE]), f"policy name {policy.name!r} {why}")
                continue
            policies.append(policy)
        return policies

    def policy(self, item: Any, section_line: int) -> Policy | None:
        if not isinstance(item, dict):
            self.problem(section_line, "each policy must be a mapping with name, members and tables")
            return None
        line, lines = item[_LINE], item[_LINES]
        for key in _keys(item):
            if key not in POLICY_FIELDS:
                expected = ", ".join(POLICY_FIELDS)
                self.problem(lines.get(str(key), line), f"unknown field {key!r} in a policy; expected {expected}")
        name = self.text(item, "name", lines)
        if not name:
            self.problem(line, "a policy needs a `name`")
            return None
        if not _NAME.match(name):
            self.problem(lines["name"], f"policy name {name!r}: use letters, digits, '-', '_' or '.' (at most 64)")
            return None
        members = self.members(item.get("members"), lines.get("members", line))
        tables = self.tables(name, item.get("tables"), lines.get("tables", line))
        return Policy(name, MappingProxyType(tables), self.text(item, "contact", lines), tuple(members))

    def members(self, items: Any, line: int) -> list[Member]:
        if items is None:
            return []
        if not isinstance(items, list):
            self.problem(line, "`members` must be a list such as `- email: ana@example.com`")
            return []
        members = []
        for item in items:
            keys = _keys(item) if isinstance(item, dict) else []
            where = item[_LINE] if isinstance(item, dict) else line
            if len(keys) != 1:
                self.problem(where, f"each member is one of {', '.join(MEMBER_KINDS)}, e.g. `- group: analysts`")
            elif keys[0] not in MEMBER_KINDS:
                self.problem(where, f"unknown member kind {keys[0]!r}; expected one of {', '.join(MEMBER_KINDS)}")
            elif not isinstance(value := item[keys[0]], str) or not value.strip():
                self.problem(where, f"a {keys[0]} member must be text")
            else:
                members.append(Member(keys[0], value.strip()))  # type: ignore[arg-type]  # checked just above
        return members

    def tables(self, policy: str, tables: Any, line: int) -> dict[str, str | None]:
        if tables is None:
            return {}
        if not isinstance(tables, dict):
            self.problem(line, "`tables` must map database.table to a row filter (or to nothing: every row)")
            return {}
        found: dict[str, str | None] = {}
        lines = tables[_LINES]
        for table in _keys(tables):
            where, condition = lines.get(str(table), line), tables[table]
            if not isinstance(table, str) or not _TABLE.match(table):
                self.problem(where, f"table {table!r}: {_table_advice(str(table))}")
            elif condition is not None and not isinstance(condition, str):
                self.problem(where, f"the row filter of {table} must be text (quote it)")
            else:
                found[table] = condition.strip() if isinstance(condition, str) and condition.strip() else None
                self.table_lines[(policy, table)] = where
        return found

    def channels(self, channels: Any, line: int, names: set[str]) -> dict[str, str]:
        if channels is None:
            return {}
        if not isinstance(channels, dict):
            self.problem(line, "`channels` must map a Slack channel id to a policy name")
            return {}
        found: dict[str, str] = {}
        for channel in _keys(channels):
            where, name = channels[_LINES].get(str(channel), line), channels[channel]
            if not isinstance(name, str) or name not in names:
                self.problem(where, f"channel {channel}: {name!r} is no policy of this file")
            else:
                found[str(channel)] = name
        return found


def _keys(mapping: dict[Any, Any]) -> list[Any]:
    """A mapping's own keys (the loader's line bookkeeping left out)."""
    return [key for key in mapping if key not in (_LINE, _LINES)]


def _table_advice(table: str) -> str:
    if set("*?[") & set(table):
        return "name each table; a glob would let a policy read tables created later"
    return "write database.table"

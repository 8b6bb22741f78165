"""The statement check: ClickHouse's own parser decides what a statement is; this module decides
whether the agent may run it.

The engine parses the model's SQL (passed as inert hex, so it can never run), prints it back in
canonical form with `formatQuery`, and returns the JSON AST of that canonical text
(`parseQueryToJSON`). The check walks that AST, and the canonical text is exactly what runs. There is
no second tokenizer that could read the SQL differently from ClickHouse.

Allow, don't deny: only known node types and keys, only SELECT (with WITH, UNION, INTERSECT, EXCEPT,
JOIN, subqueries), only allowlisted functions (agent/db/functions.py), only tables in scope
(agent/db/scope.py). Anything else is refused with a reason the model can act on.
"""

from __future__ import annotations

import difflib
import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from agent.db.check_work import MAX_CHECK_STEPS, CheckBudget, NameCounts, TooMuchWork
from agent.db.functions import FunctionPolicy, denied_reason
from agent.db.scope import ALWAYS_READABLE, Scope
from agent.db.table_functions import TableFunctionRefused, check_table_function
from agent.db.union_with import Added, is_cte, propagate

MAX_SQL_CHARS = 60_000
# Nodes the walk may visit again: a UNION's later SELECTs with a WITH of their own re-check the first SELECT's
# scalar aliases, so a hostile statement could otherwise make the check do far more work than its size suggests.
MAX_REVISITS = 50_000
TOO_COMPLEX = "The SQL is too complex to check; write it more simply."
# Functions whose first argument the engine resolves as an aggregate function's name.
NAMES_A_FUNCTION = frozenset({"arrayreduce", "arrayreduceinranges", "initializeaggregation"})
# Functions that read one argument as a type's name (by position; -1 is the last), and may instantiate
# what it names, such as an aggregate function inside AggregateFunction(...). ClickHouse folds a constant
# expression there (concat('Aggregate', ...), unhex(...)), so that argument must be a literal string,
# which `literal` then checks.
TYPE_ARGUMENT = {
    "cast": 1,
    "_cast": 1,
    "accuratecast": 1,
    "accuratecastordefault": 1,
    "accuratecastornull": 1,
    "defaultvalueoftypename": 0,
    "jsonextract": -1,
    "jsonextractcaseinsensitive": -1,
    "jsonextractkeysandvalues": -1,
    "jsonextractkeysandvaluescaseinsensitive": -1,
    "gettypeserializationstreams": 0,
    "reinterpret": 1,
    "variantelement": 1,
    "dynamicelement": 1,
    "kqlparametercast": 1,
}
IN_FUNCTIONS = frozenset(
    {"in", "notIn", "globalIn", "globalNotIn", "nullIn", "notNullIn", "globalNullIn", "globalNotNullIn"}
)

# Node types a SELECT may contain, and the keys each may carry. An unknown type or key (a construct
# this list has not reviewed, or one ClickHouse adds later) is refused.
_COMMON = {"type", "alias", "children"}
NODE_KEYS: dict[str, set[str]] = {
    "SelectWithUnionQuery": {"union_mode", "list_of_modes", "list_of_selects", "is_outfile_append",
                             "is_outfile_truncate", "is_into_outfile_with_stdout"},
    "SelectIntersectExceptQuery": {"final_operator"},
    "SelectQuery": {"select", "tables", "where", "prewhere", "group_by", "having", "order_by", "limit_by",
                    "limit_by_length", "limit_by_offset", "limit_length", "limit_offset", "with", "window",
                    "qualify", "interpolate", "distinct", "group_by_all", "group_by_with_totals",
                    "group_by_with_rollup", "group_by_with_cube", "group_by_with_grouping_sets", "order_by_all",
                    "limit_with_ties", "recursive_with", "distinct_on"},
    "ExpressionList": set(),
    "Function": {"name", "arguments", "parameters", "is_window_function", "window_definition", "window_name",
                 "is_lambda_function", "is_operator", "kind", "nulls_action", "is_compound_name"},
    "Identifier": {"name", "name_parts"},
    "Literal": {"value"},
    "Asterisk": {"transformers"},
    "QualifiedAsterisk": {"qualifier", "transformers"},
    "ColumnsRegexpMatcher": {"pattern", "transformers"},
    "ColumnsListMatcher": {"column_list", "transformers"},
    "QualifiedColumnsRegexpMatcher": {"qualifier", "pattern", "transformers"},
    "QualifiedColumnsListMatcher": {"qualifier", "column_list", "transformers"},
    "ColumnsTransformerList": set(),
    "ColumnsApplyTransformer": {"func_name", "lambda", "parameters", "column_name_prefix"},
    "ColumnsExceptTransformer": {"is_strict", "pattern"},
    "ColumnsReplaceTransformer": {"is_strict"},
    "ColumnsReplaceTransformerReplacement": {"name"},
    "TablesInSelectQuery": set(),
    "TablesInSelectQueryElement": {"table_expression", "table_join", "array_join"},
    "TableExpression": {"database_and_table_name", "table_function", "subquery", "final", "sample_size",
                        "sample_offset"},
    "TableIdentifier": {"name", "name_parts"},
    "TableJoin": {"kind", "strictness", "locality", "on_expression", "using_expression_list"},
    "ArrayJoin": {"kind", "expression_list"},
    "Subquery": {"cte_name"},
    "WithElement": {"name", "subquery", "aliases"},
    "OrderByElement": {"expression", "direction", "nulls_direction", "with_fill", "fill_from", "fill_to", "fill_step",
                       "fill_staleness", "collation"},
    "InterpolateElement": {"column", "expr"},
    "SampleRatio": {"numerator", "denominator"},
    "WindowDefinition": {"partition_by", "order_by", "parent_window_name", "frame_is_default", "frame_type",
                         "frame_begin_type", "frame_begin_offset", "frame_begin_preceding", "frame_end_type",
                         "frame_end_offset", "frame_end_preceding"},
    "WindowListElement": {"name", "definition"},
}  # fmt: skip

# Keys whose presence is itself the problem, with the reason to give.
FORBIDDEN_KEYS = {
    "out_file": "INTO OUTFILE is not allowed: results come back to the agent, never to a file.",
    "format_ast": "A FORMAT clause is not allowed: the agent chooses how results are returned.",
    "settings": "A SETTINGS clause is not allowed: the limits on this connection are fixed.",
    "settings_ast": "A SETTINGS clause is not allowed: the limits on this connection are fixed.",
    "compression": "INTO OUTFILE is not allowed: results come back to the agent, never to a file.",
}
_TRUE_FLAG_REFUSED = {"is_outfile_append", "is_outfile_truncate", "is_into_outfile_with_stdout"}
READ_ONLY = (
    "Only SELECT queries run here (WITH, UNION, JOIN and subqueries included); there is no way to write, "
    "change settings or run other statements."
)


# ClickHouse evaluates an explicit PREWHERE before `additional_table_filters` (measured on chdb 26.9: a
# throwIf in PREWHERE fires on rows the filter hides), so under a policy it would be an oracle on them.
# A WHERE is moved to PREWHERE by the engine itself, after the filter.
PREWHERE_FILTERED = "PREWHERE is not available here; write the condition in WHERE (ClickHouse optimises it the same)."
# Where a filtered row sat among the table's rows: a part's offsets and a block's size count the hidden rows
# around it (measured: max(_part_offset) and blockSize() under a filter tell the rows it removed).
POSITION_COLUMNS = frozenset(
    [
        "_part",
        "_part_index",
        "_part_starting_offset",
        "_part_uuid",
        "_partition_id",
        "_partition_value",
        "_part_offset",
        "_part_granule_offset",
        "_part_data_version",
        "_row_exists",
        "_block_number",
        "_block_offset",
        "_disk_name",
        "_distance",
        "_sample_factor",
        "_table",
        "_database",
        "_shard_num",
    ]
)
POSITION_FUNCTIONS = frozenset(
    [
        "blocksize",
        "blocknumber",
        "blockserializedsize",
        "rownumberinblock",
        "rownumberinallblocks",
        "neighbor",
        "runningdifference",
        "runningdifferencestartingwithfirstvalue",
        "runningaccumulate",
        "runningconcurrency",
    ]
)
# indexHint(cond) selects granules by `cond` on the key without filtering rows by it: what it counts depends on
# how the hidden rows fill the granules around the visible ones (measured: a count under a filter off the key).
GRANULE_FUNCTIONS = frozenset(["indexhint"])
GRANULE_REFUSED = (
    "{name} depends on how the table's storage is laid out, which is not available here; write the condition in WHERE."
)
POSITION_REFUSED = (
    "{name} tells where rows sit in the table's storage, which is not available here; use the columns and "
    "window functions (row_number() OVER ...) instead."
)


class QueryRefused(Exception):
    """The statement is not something the agent may run; the message says why."""


class UnknownTable(QueryRefused):
    """A table name the schema introspection did not find in scope (refused like one out of scope; a
    hint may suggest the nearest tables in scope, which the schema lists anyway)."""

    def __init__(self, message: str, name: str) -> None:
        super().__init__(message)
        self.name = name


@dataclass(frozen=True)
class CheckedStatement:
    sql: str  # the canonical text ClickHouse printed; exactly what runs
    with_totals: bool
    tables: frozenset[str] = frozenset()  # `db.table` of every table reference that is not a CTE


def parse_request(sql: str) -> str:
    """The engine query that parses `sql` without running it: canonical text and its JSON AST.

    The SQL travels as hex inside a string literal, so nothing in it can end the literal."""
    return (
        f"WITH formatQuery(unhex('{sql.encode().hex()}')) AS canonical "
        "SELECT hex(canonical), hex(parseQueryToJSON(canonical))"
    )


def decode_parse(canonical_hex: str, ast_hex: str) -> tuple[str, str]:
    """The canonical text and AST JSON from the engine's hex, refusing text that is not UTF-8
    (it could not be run exactly as checked)."""
    try:
        return bytes.fromhex(canonical_hex).decode(), bytes.fromhex(ast_hex).decode()
    except (ValueError, UnicodeDecodeError):
        raise QueryRefused(
            "A string in the SQL holds bytes that are not UTF-8 text; write raw bytes with unhex('...')."
        ) from None


def precheck(sql: str) -> str:
    """What can be refused before the engine sees anything."""
    if not sql.strip():
        raise QueryRefused("The SQL is empty.")
    if len(sql) > MAX_SQL_CHARS:
        raise QueryRefused(f"The SQL is longer than {MAX_SQL_CHARS} characters; write a shorter query.")
    try:
        sql.encode()
    except UnicodeEncodeError:
        raise QueryRefused("The SQL contains characters that are not valid Unicode text.") from None
    return sql


class StatementPolicy:
    def __init__(self, scope: Scope, functions: FunctionPolicy, *, max_steps: int = MAX_CHECK_STEPS) -> None:
        self.scope = scope
        self.functions = functions
        self.max_steps = max_steps

    def check(
        self, canonical: str, ast_json: str, tables: frozenset[str], *, row_filtered: bool = False
    ) -> CheckedStatement:
        """Allow the statement, or raise QueryRefused. `tables`: the `db.table` names the schema
        introspection found in scope; a table name is one of them or a CTE, nothing else (a name
        that a database engine would resolve some other way, such as a path, is refused).
        `row_filtered`: the engine applies a policy's row filters, which a PREWHERE runs before."""
        try:
            ast = json.loads(ast_json)
        except json.JSONDecodeError:
            raise QueryRefused("The statement could not be checked.") from None
        if not isinstance(ast, dict) or ast.get("type") != "SelectWithUnionQuery":
            raise QueryRefused(READ_ONLY)
        walk = _Walk(self, tables, ast, row_filtered=row_filtered)
        try:
            walk.node(ast, parent_key="")
        except TooMuchWork:
            raise QueryRefused(TOO_COMPLEX) from None
        return CheckedStatement(sql=canonical, with_totals=_top_level_totals(ast), tables=frozenset(walk.read))


def _top_level_totals(ast: dict[str, Any]) -> bool:
    selects = ast.get("list_of_selects", {}).get("children", [])
    return any(isinstance(s, dict) and s.get("group_by_with_totals") for s in selects)


class _Walk:
    """One statement's walk. `visible` holds the CTE names visible where the walk stands; `later` the names of the
    CTEs defined after the WITH element being walked (a reference to one is refused, see `with_clause`). Both change
    in place as the walk goes in and out (a refusal ends the walk, so nothing is restored on the way out of one),
    and every step is spent from one budget (agent/db/check_work.py)."""

    def __init__(
        self, policy: StatementPolicy, tables: frozenset[str], ast: dict[str, Any], *, row_filtered: bool = False
    ) -> None:
        self.row_filtered = row_filtered
        self.scope = policy.scope
        self.functions = policy.functions
        self.tables = tables
        self.budget = CheckBudget(policy.max_steps)
        self.added: dict[int, Added] = {}  # what the engine copies into a UNION's later SELECTs (union_with.py)
        self.propagated: set[int] = set()
        self.visible, self.later = NameCounts(self.budget), NameCounts(self.budget)
        self.aliased, self.defined = identifier_aliases(ast), cte_names(ast)
        self.inherited: dict[int, frozenset[str]] = {}  # id of a copied clause -> its CTE names
        self.alias_targets: dict[str, list[str]] = {}  # alias -> the one-part names it reaches, all checked
        self.read: set[str] = set()
        self.visits = 0
        self.revisits = 0

    def node(self, node: Any, parent_key: str) -> None:
        if not isinstance(node, dict):
            raise QueryRefused("The statement could not be checked.")
        self.visits += 1
        self.budget.spend()
        kind = node.get("type")
        if kind == "QueryParameter":
            raise QueryRefused("Query parameters ({name:Type}) are not supported; write the value into the query.")
        if kind not in NODE_KEYS:
            raise QueryRefused(f"{READ_ONLY} ({kind} is not supported.)")
        for key, value in node.items():
            if key in FORBIDDEN_KEYS:
                raise QueryRefused(FORBIDDEN_KEYS[key])
            if key in _TRUE_FLAG_REFUSED and value:
                raise QueryRefused(FORBIDDEN_KEYS["out_file"])
            if key not in _COMMON and key not in NODE_KEYS[kind]:
                raise QueryRefused(f"{READ_ONLY} (The {key} part of a {kind} is not supported.)")
        if kind == "Literal":
            self.literal(node.get("value"))
            return
        if kind == "Identifier" and self.row_filtered:
            parts = node.get("name_parts") or [node.get("name", "")]
            if str(parts[-1]).lower() in POSITION_COLUMNS:
                raise QueryRefused(POSITION_REFUSED.format(name=str(parts[-1])))
        if kind == "SelectQuery":
            if self.row_filtered and node.get("prewhere") is not None:
                raise QueryRefused(PREWHERE_FILTERED)
            self.select(node)
            return
        if kind == "SelectWithUnionQuery" and id(node) not in self.propagated:
            self.propagated.add(id(node))
            propagate(node, self.added, self.budget.spend)
        if kind == "Function":
            self.function(node, in_table_position=parent_key == "table_function")
        elif kind == "TableIdentifier":
            self.table(node.get("name_parts") or [node.get("name", "")], True)
        elif kind == "ColumnsApplyTransformer" and "func_name" in node:
            self.applied(str(node["func_name"]))
        self.children(node)

    def children(self, node: dict[str, Any]) -> None:
        for key, value in node.items():
            for child in _nodes(value):
                self.node(child, parent_key=key)

    def select(self, node: dict[str, Any]) -> None:
        """A SELECT's CTEs are visible to the CTEs defined after them and to the rest of the SELECT. In a UNION's
        later SELECT, what the engine copied from the first SELECT's WITH: its whole clause is visible (and was
        checked where the first SELECT defines it, in this same scope); its scalar aliases, appended to a WITH
        of this SELECT's own, are evaluated here, so they are checked again here."""
        own = _with_elements(node)
        extra = self.added.get(id(node), Added())
        shown = self.with_clause(own) if own else []
        copied = self.inherited_names(extra.inherited) if not own and extra.inherited else frozenset()
        if copied:
            self.visible.push(copied)
        for scalar in extra.scalars:
            before = self.visits
            self.node(scalar, parent_key="with")
            self.revisits += self.visits - before
            if self.revisits > MAX_REVISITS:
                raise QueryRefused(TOO_COMPLEX)
        for key, value in node.items():
            if key != "with":
                for child in _nodes(value):
                    self.node(child, parent_key=key)
        if copied:
            self.visible.pop()
        self.visible.remove(shown)

    def inherited_names(self, inherited: list[dict[str, Any]]) -> frozenset[str]:
        """The CTE names of a clause the engine copied whole into later SELECTs (one list shared by all of
        them, see union_with.py): worked out once, not once per SELECT."""
        if (names := self.inherited.get(id(inherited))) is None:
            self.budget.spend(len(inherited))
            names = self.inherited[id(inherited)] = frozenset(
                str(element.get("name", "")) for element in inherited if is_cte(element)
            )
        return names

    def with_clause(self, elements: list[dict[str, Any]]) -> list[str]:
        """Walk a WITH clause; return the CTE names it made visible. A CTE is visible after its definition. The
        engine also resolves a name to a CTE defined LATER in the same clause, and then resolves, inside that
        CTE's definition, the names of the CTEs it is expanding as tables: that chain is refused here rather
        than followed (define each CTE before the ones that use it)."""
        names = [str(element.get("name", "")) for element in elements if is_cte(element)]
        self.later.add(names)
        for element in elements:
            name = str(element.get("name", "")) if is_cte(element) else None
            if name is not None:
                self.later.remove((name,))
            self.node(element, parent_key="with")
            if name is not None:
                self.visible.add((name,))
        return names

    def function(self, node: dict[str, Any], *, in_table_position: bool) -> None:
        name = str(node.get("name", ""))
        if in_table_position:
            try:
                check_table_function(self.functions, node)
            except TableFunctionRefused as refused:
                raise QueryRefused(str(refused)) from None
            self.read.add(f"{name}()")
            return
        self.function_name(name)
        if name.lower() in NAMES_A_FUNCTION:
            self.function_named_by_string(name, node.get("arguments", {}).get("children", []))
        if (position := TYPE_ARGUMENT.get(name.lower())) is not None:
            self.type_argument(name, node.get("arguments", {}).get("children", []), position)
        if name in IN_FUNCTIONS:
            arguments = node.get("arguments", {}).get("children", [])
            if len(arguments) == 2 and isinstance(arguments[1], dict) and arguments[1].get("type") == "Identifier":
                parts = arguments[1].get("name_parts") or [arguments[1].get("name", "")]
                self.table(parts, True)
                self.aliased_tables(".".join(str(part) for part in parts))

    def applied(self, name: str) -> None:
        """`* APPLY(f)` calls f on each column, so f's arguments are columns: a function whose argument rules
        need a literal there (a type's name, an aggregate function's name) cannot be applied."""
        self.function_name(name)
        if name.lower() in NAMES_A_FUNCTION:
            raise QueryRefused(
                f"{name}() cannot be used in APPLY: it reads its first argument as an aggregate function's name, "
                f"which must be written in quotes; call {name}('name', ...) in the SELECT list instead."
            )
        if name.lower() in TYPE_ARGUMENT:
            raise QueryRefused(
                f"{name}() cannot be used in APPLY: it reads an argument as a type, which must be written as a "
                f"literal string; call {name}(...) with the type in quotes in the SELECT list instead."
            )

    def aliased_tables(self, name: str) -> None:
        """`x IN a`, where `a` is an alias of an identifier (`WITH planes AS a`, `planes AS a` anywhere): the
        engine reads the table the aliased identifier names, even where `a` is also a table's name. Every
        identifier so aliased, through chains of aliases, is checked as a table (CTEs not counted: the engine
        resolves it away from where the alias was written). Once per alias: after that only what can change
        along the walk is checked again (a one-part name must not be a CTE still to be defined)."""
        if (targets := self.alias_targets.get(name)) is not None:
            for target in targets:
                self.budget.spend()
                if target in self.later:
                    self.table([target], False)
            return
        targets, seen, pending = [], {name}, [name]
        while pending:
            for parts in self.aliased.get(pending.pop(), ()):
                self.table(list(parts), False)
                if (target := ".".join(parts)) not in seen:
                    seen.add(target)
                    pending.append(target)
                    if len(parts) == 1:
                        targets.append(target)
        self.alias_targets[name] = targets

    def function_named_by_string(self, name: str, arguments: list[Any]) -> None:
        """arrayReduce('sumIf', ...): the engine resolves the string as an aggregate function, so the
        name in it is checked as if it were written as one, and must be written as a literal."""
        first = arguments[0] if arguments else None
        value = first.get("value") if isinstance(first, dict) and first.get("type") == "Literal" else None
        if not (
            isinstance(value, dict) and value.get("field_type") == "String" and isinstance(value.get("value"), str)
        ):
            raise QueryRefused(f"The first argument of {name}() must be an aggregate function's name in quotes.")
        self.function_name(value["value"].split("(", 1)[0].strip())

    def type_argument(self, name: str, arguments: list[Any], position: int) -> None:
        if len(arguments) < 2 and position == -1:
            return  # JSONExtract(json) with no type: nothing is read as one
        if not -len(arguments) <= position < len(arguments):
            return  # the engine refuses the call itself
        argument = arguments[position]
        value = argument.get("value") if isinstance(argument, dict) and argument.get("type") == "Literal" else None
        if not (isinstance(value, dict) and value.get("field_type") == "String"):
            raise QueryRefused(f"The type in {name}() must be written as a literal string, such as 'UInt32'.")

    def literal(self, value: Any) -> None:
        """A string the engine may read as a type (CAST(x, 'T'), JSONExtract(j, 'T'), ...) can name an
        aggregate function inside AggregateFunction(...): every such name in any string is checked."""
        for text in _strings(value):
            for name in aggregate_functions_in_type(text):
                self.function_name(name)

    def function_name(self, name: str) -> None:
        if self.row_filtered and name.lower() in POSITION_FUNCTIONS:
            raise QueryRefused(POSITION_REFUSED.format(name=f"{name}()"))
        if self.row_filtered and name.lower() in GRANULE_FUNCTIONS:
            raise QueryRefused(GRANULE_REFUSED.format(name=f"{name}()"))
        if self.functions.allows(name):
            return
        if (why := denied_reason(name)) is not None:
            raise QueryRefused(f"The function {name}() is not allowed here ({why}). Use the tables in the schema.")
        close = difflib.get_close_matches(name, sorted(self.functions.functions), n=3, cutoff=0.75)
        maybe = f" Did you mean: {', '.join(close)}?" if close else ""
        raise QueryRefused(
            f"Unknown function {name}(): it is not among the functions this agent may use.{maybe} ClickHouse names "
            "differ from other SQL dialects (toDate, toStartOfMonth, dateDiff, countIf, uniqExact, quantile(0.5)(x))."
        )

    def table(self, parts: list[Any], see_ctes: bool) -> None:
        """Check a table name; `see_ctes`: whether a CTE visible here may be what it names."""
        self.budget.spend()
        names = [str(part) for part in parts]
        resolved = self.scope.resolve(names)
        if resolved is None:
            raise QueryRefused(f"{'.'.join(names)} is not a table name this agent can read.")
        database, table = resolved
        if len(names) == 1 and table in self.later:
            raise QueryRefused(
                f"{table} is used before the CTE of that name is defined; define each CTE before the ones that use it."
            )
        a_cte = see_ctes and len(names) == 1 and table in self.visible
        if a_cte and not _excluded(self.scope, database, table):
            return
        readable = f"{database}.{table}" in self.tables or f"{database}.{table}" in ALWAYS_READABLE
        if (
            len(names) == 1
            and not a_cte
            and table in self.defined
            and not (readable and self.scope.allows(database, table))
        ):
            raise QueryRefused(_invisible_cte(table))
        if not self.scope.allows(database, table):
            raise QueryRefused(_not_available(names))
        if not readable:
            raise UnknownTable(_not_available(names), ".".join(names))
        self.read.add(f"{database}.{table}")


def _invisible_cte(name: str) -> str:
    return (
        f"{name} is a CTE that this part of the statement cannot see: a UNION's later SELECT sees the first "
        "SELECT's WITH only when it has no WITH of its own, and a WITH inside a subquery or a parenthesised UNION "
        "stays inside it. Define it in the first SELECT's WITH, or in this SELECT's own."
    )


def _not_available(names: list[str]) -> str:
    return f"The table {'.'.join(names)} is not available to this agent. Use the tables listed in the schema" + (
        " and qualify them with their database (database.table)." if len(names) == 1 else "."
    )


_AGGREGATE_TYPE = "aggregatefunction"  # also the tail of SimpleAggregateFunction
_NAME_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_")


def aggregate_functions_in_type(text: str) -> list[str]:
    """The function names in every `AggregateFunction(name...` of `text` (any case, any spacing, the
    name bare or quoted). Linear: one pass of `str.find`. A string that holds the word in any other
    form is refused: ClickHouse reads a type as SQL, so a comment (`AggregateFunction/**/(`) or a
    quote may stand between the word and its arguments."""
    lowered, names, at = text.lower(), [], 0
    while (at := lowered.find(_AGGREGATE_TYPE, at)) >= 0:
        at += len(_AGGREGATE_TYPE)
        position = _skip_spaces(text, at)
        if position >= len(text) or text[position] != "(":
            raise QueryRefused(
                "A string names AggregateFunction in a form this check cannot read; write the type as "
                "AggregateFunction(name, ...)."
            )
        position = _skip_spaces(text, position + 1)
        if position < len(text) and text[position] in '`"':
            position += 1
        end = position
        while end < len(text) and text[end] in _NAME_CHARS:
            end += 1
        if end == position:
            raise QueryRefused("A type in a string names an aggregate function this check cannot read.")
        names.append(text[position:end])
    return names


def _skip_spaces(text: str, position: int) -> int:
    while position < len(text) and text[position].isspace():
        position += 1
    return position


def _strings(value: Any) -> Iterator[str]:
    """Every string inside a literal's value (arrays, tuples and maps of literals nest)."""
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            yield item
        elif isinstance(item, dict):
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)


def _with_elements(select: dict[str, Any]) -> list[dict[str, Any]]:
    clause = select.get("with", {})
    if not isinstance(clause, dict) or clause.get("type", "ExpressionList") != "ExpressionList":
        raise QueryRefused("The statement could not be checked.")
    return list(_nodes(clause.get("children", [])))


def cte_names(ast: dict[str, Any]) -> frozenset[str]:
    """The name of every CTE the statement defines, wherever it is visible."""
    return frozenset(str(node.get("name", "")) for node in _all_nodes(ast) if node.get("type") == "WithElement")


def _all_nodes(ast: dict[str, Any]) -> Iterator[dict[str, Any]]:
    stack: list[Any] = [ast]
    while stack:
        item = stack.pop()
        if isinstance(item, list):
            stack.extend(item)
        elif isinstance(item, dict):
            yield item
            stack.extend(value for value in item.values() if isinstance(value, dict | list))


def identifier_aliases(ast: dict[str, Any]) -> dict[str, list[tuple[str, ...]]]:
    """Every alias of an identifier in the statement (`planes AS a`, `WITH planes AS a`): alias -> the name
    parts of each identifier it aliases, each once however often it is written."""
    aliases: dict[str, dict[tuple[str, ...], None]] = {}
    for item in _all_nodes(ast):
        if item.get("type") == "Identifier" and isinstance(item.get("alias"), str):
            parts = item.get("name_parts") or [item.get("name", "")]
            aliases.setdefault(item["alias"], {})[tuple(str(part) for part in parts)] = None
    return {alias: list(targets) for alias, targets in aliases.items()}


def _excluded(scope: Scope, database: str, table: str) -> bool:
    """A CTE may not borrow the name of a table that is configured out of scope."""
    return scope.database_in_scope(database) and not scope.allows(database, table)


def _nodes(value: Any) -> Iterator[dict[str, Any]]:
    """The AST nodes in a key's value. Anything shaped otherwise (an object without a type, a nested
    list) is refused rather than skipped: a node the walk does not see is a node it did not check."""
    items = value if isinstance(value, list) else [value]
    for item in items:
        if isinstance(item, dict) and "type" in item:
            yield item
        elif isinstance(item, dict | list):
            raise QueryRefused("The statement could not be checked.")

"""What the engine adds to the WITH clauses of a UNION's later SELECTs, so that the statement check scopes CTEs
exactly as the engine does.

Before analysing a statement, ClickHouse (ApplyWithGlobalVisitor, `enable_global_with_statement`) copies the
WITH clause of a UNION's first SELECT into its later SELECTs, in nested unions and INTERSECT/EXCEPT too, for
every UNION in the statement, outer ones first:
- a later SELECT without a WITH of its own gets the whole clause: the first SELECT's CTEs are visible there
  (`WITH t AS (...) SELECT x FROM t UNION ALL SELECT x FROM t`, the shape of "compare two periods");
- a later SELECT with a WITH of its own gets only the first clause's scalar aliases (`WITH expr AS name`),
  appended to its own and evaluated in its own scope, where the first SELECT's CTEs are NOT visible: a name
  that was a CTE in the first SELECT is a table there;
- nothing is copied when the first element is itself a parenthesised UNION.
tests/agent/db/test_cte_scope.py runs each shape through the engine and the check and asserts they agree.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

Node = dict[str, Any]


@dataclass
class Added:
    """What the engine added to one SELECT's WITH clause."""

    inherited: list[Node] = field(default_factory=list)  # the first SELECT's whole clause (it had none)
    scalars: list[Node] = field(default_factory=list)  # the first SELECT's scalar aliases, after its own


def propagate(union: Node, added: dict[int, Added], spend: Callable[[int], None]) -> None:
    """Record, in `added` (keyed by the id of each SELECT's node), what the engine copies into the later
    SELECTs of `union`. Call it for outer unions before the unions nested in them, as the engine does.
    `spend(n)` is told the work done (nested unions and long clauses multiply it), and may stop it."""
    selects = _children(union.get("list_of_selects"))
    if len(selects) < 2 or selects[0].get("type") != "SelectQuery":
        return
    first = current_with(selects[0], added)
    spend(len(first) + 1)
    if first:
        for later in selects[1:]:
            _apply(later, first, added, spend)


def current_with(select: Node, added: dict[int, Added]) -> list[Node]:
    """The elements of a SELECT's WITH clause once the engine has copied into it."""
    extra = added.get(id(select), Added())
    return (_children(select.get("with")) or extra.inherited) + extra.scalars


def is_cte(element: Node) -> bool:
    return element.get("type") == "WithElement"


def _apply(node: Node, first: list[Node], added: dict[int, Added], spend: Callable[[int], None]) -> None:
    spend(1)
    kind = node.get("type")
    if kind == "SelectWithUnionQuery":
        for select in _children(node.get("list_of_selects")):
            _apply(select, first, added, spend)
    elif kind == "SelectIntersectExceptQuery":
        for select in node.get("children", []):
            if isinstance(select, dict):
                _apply(select, first, added, spend)
    elif kind == "SelectQuery":
        current = current_with(node, added)
        extra = added.setdefault(id(node), Added())
        if not current:
            extra.inherited = first  # shared, never changed: a copy per SELECT would cost clause x SELECTs
            return
        spend(len(current) + len(first))
        named = {element.get("alias") for element in current if not is_cte(element)}
        extra.scalars += [e for e in first if not is_cte(e) and e.get("alias") not in named]


def _children(value: Any) -> list[Node]:
    children = value.get("children", []) if isinstance(value, dict) else []
    return [child for child in children if isinstance(child, dict)]

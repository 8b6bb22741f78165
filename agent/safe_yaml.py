"""YAML read within bounds. Knowledge files and the access policy file load at start-up and eval suites
before a run, and all may come from anyone who can open a pull request: safe YAML still lets aliases
repeat a node, so a 1.3 KB file of nested aliases (a "billion laughs") stands for a billion values,
and everything that walks it afterwards (turning a field into text, comparing, rendering) walks all
of them.

So a file is read only up to `MAX_FILE_BYTES`, and the node graph the parser composed is measured
before anything is constructed from it: the number of values it stands for, counting each use of
an alias again, may not pass `MAX_VALUES`, and a node may not contain itself. Both are refused as a
`MarkedYAMLError` naming the line, like any other malformed YAML. So is a value PyYAML's own
constructors cannot build (`2026-13-45` reads as a timestamp and raises a bare ValueError), when
read with `Loader` or a subclass of it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

MAX_FILE_BYTES = 1_000_000
MAX_VALUES = 200_000


class Unbounded(yaml.MarkedYAMLError):
    """A document that stands for more values than it may, or that contains itself."""


class TooLarge(ValueError):
    """A file past MAX_FILE_BYTES."""


class Unreadable(yaml.MarkedYAMLError):
    """A scalar of a known type whose value is impossible (a date past the calendar)."""


# libyaml's parser where PyYAML was built with it (its wheels are): the same nodes and marks, parsed in C,
# about ten times faster than the pure-Python one (knowledge is read for every app built; py-spy).
_SafeLoader: type[yaml.SafeLoader] = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


class Loader(_SafeLoader):  # type: ignore[valid-type,misc]
    """SafeLoader whose construction errors name the node's line, like its parse errors."""

    def construct_object(self, node: yaml.Node, deep: bool = False) -> Any:
        try:
            return super().construct_object(node, deep=deep)
        except yaml.YAMLError:
            raise
        except ValueError as exc:  # datetime's `month must be in 1..12`: no file, no line
            raise Unreadable(problem=str(exc), problem_mark=node.start_mark) from None


def read_text(path: Path, max_bytes: int = MAX_FILE_BYTES) -> str:
    """The file's text, refusing one past `max_bytes` without reading the rest of it."""
    with path.open("rb") as file:
        data = file.read(max_bytes + 1)
    if len(data) > max_bytes:
        raise TooLarge(f"larger than {max_bytes:,} bytes; split it into several files")
    return data.decode("utf-8")


def load(text: str, loader: type[yaml.SafeLoader] = Loader, max_values: int = MAX_VALUES) -> Any:
    """The document in `text`, as `yaml.load` with the loader would give it, once its node graph is
    measured and within bounds. Raises yaml.YAMLError (Unbounded included)."""
    reader = loader(text)
    try:
        node = reader.get_single_node()
        if node is None:
            return None
        count_values(node, max_values)
        return reader.construct_document(node)
    finally:
        reader.dispose()


def count_values(root: yaml.Node, most: int) -> int:
    """How many values the node stands for, each alias's node counted at every use; computed once per
    node (so in time linear in the file), refused past `most` or when a node contains itself."""
    sizes: dict[int, int] = {}
    open_nodes: set[int] = set()  # on the path from the root to the node being measured
    stack: list[tuple[yaml.Node, bool]] = [(root, False)]
    while stack:
        node, children_done = stack.pop()
        key = id(node)
        if children_done:
            size = 1 + sum(sizes[id(child)] for child in _children(node))
            if size > most:
                raise Unbounded(
                    problem=f"its aliases make it stand for more than {most:,} values", problem_mark=node.start_mark
                )
            sizes[key] = size
            open_nodes.discard(key)
            continue
        if key in sizes:
            continue
        if key in open_nodes:
            raise Unbounded(problem="an alias here refers to a node that contains it", problem_mark=node.start_mark)
        open_nodes.add(key)
        stack.append((node, True))
        stack += [(child, False) for child in _children(node) if id(child) not in sizes]
    return sizes[id(root)]


def _children(node: yaml.Node) -> list[yaml.Node]:
    if isinstance(node, yaml.SequenceNode):
        return list(node.value)
    if isinstance(node, yaml.MappingNode):
        return [part for pair in node.value for part in pair]
    return []

"""agent/safe_yaml.py: libyaml's parser where PyYAML has it, with the same lines, bounds and errors."""

from __future__ import annotations

import pytest
import yaml

from agent import safe_yaml


@pytest.mark.skipif(not yaml.__with_libyaml__, reason="this PyYAML was built without libyaml")
def test_the_parser_is_libyamls_and_keeps_lines_bounds_and_errors() -> None:
    assert issubclass(safe_yaml.Loader, yaml.cyaml.CParser)  # the pure-Python parser was ten times the CPU
    assert safe_yaml.load("a: [1, 2]\nb: {c: x}\n") == {"a": [1, 2], "b": {"c": "x"}}
    laughs = "a: &a [x, x, x, x, x, x, x, x, x, x]\n" + "".join(
        f"{name}: &{name} [{', '.join(['*' + prev] * 10)}]\n" for prev, name in zip("abcdef", "bcdefg", strict=True)
    )
    with pytest.raises(safe_yaml.Unbounded) as refused:
        safe_yaml.load(laughs)
    assert refused.value.problem_mark is not None and refused.value.problem_mark.line >= 1
    with pytest.raises(safe_yaml.Unreadable) as impossible:
        safe_yaml.load("ok: 1\nwhen: 2026-13-45\n")
    assert impossible.value.problem_mark is not None and impossible.value.problem_mark.line == 1
    with pytest.raises(yaml.MarkedYAMLError) as broken:
        safe_yaml.load("a: [1, 2\nb: 3\n")
    assert broken.value.problem_mark is not None

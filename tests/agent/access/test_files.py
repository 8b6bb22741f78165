"""The policy file: read with its lines, every problem one line naming file and line."""

from __future__ import annotations

from pathlib import Path

import pytest

from agent.access.files import AccessFileError, load_policy_file
from agent.access.policy import NO_DATA, Asker

DEMO = Path(__file__).resolve().parents[3] / "deploy" / "access" / "nycflights13.yaml"


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "access.yaml"
    path.write_text(text)
    return path


def problems(path: Path) -> list[str]:
    with pytest.raises(AccessFileError) as raised:
        load_policy_file(path)
    return raised.value.problems


def test_the_demo_file_reads_as_two_policies_by_origin_with_channels_and_a_no_data_default() -> None:
    policies = load_policy_file(DEMO).policies
    assert [p.name for p in policies.policies] == ["jfk", "newark"]
    jfk = policies.named("jfk")
    assert jfk is not None and jfk.tables["nycflights13.flights"] == "origin = 'JFK'"
    assert jfk.tables["nycflights13.airlines"] is None  # every row
    assert policies.for_asker(Asker(email="ANA@example.com")).name == "jfk"
    assert policies.for_asker(Asker(groups=frozenset({"ewr-ops"}))).name == "newark"
    assert policies.for_channel("C0EWROPS1").name == "newark"
    nobody = policies.for_asker(Asker(email="eve@example.com"))
    assert nobody.name == NO_DATA and nobody.reads_nothing and "data-help" in nobody.contact


def test_a_default_may_name_a_policy_of_the_file(tmp_path: Path) -> None:
    path = write(tmp_path, "default: all\npolicies:\n  - name: all\n    tables:\n      db.t:\n")
    assert load_policy_file(path).policies.for_asker(Asker()).name == "all"


def test_an_empty_file_reads_nothing_for_anyone(tmp_path: Path) -> None:
    policies = load_policy_file(write(tmp_path, "")).policies
    assert policies.for_asker(Asker(email="a@b.c")).reads_nothing


def test_every_problem_is_one_line_with_file_and_line(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        "\n".join(
            [
                "policies:",  # 1
                "  - name: a",  # 2
                "    members:",  # 3
                "      - team: x",  # 4: unknown member kind
                "    tables:",  # 5
                "      db.t: x = 1",  # 6
                "      db.*:",  # 7: a glob
                "  - name: a",  # 8: duplicate name
                "    tables:",  # 9
                "      db.t: 1",  # 10: a number, not text
                "channels:",  # 11
                "  C1: nope",  # 12: unknown policy
                "owner: me",  # 13: unknown section
                "default: b",  # 14: unknown default
            ]
        ),
    )
    found = problems(path)
    assert all("\n" not in p and p.startswith(f"{path}:") for p in found)
    lines = sorted(int(p.split(":")[1]) for p in found)
    assert lines == [4, 7, 8, 10, 12, 13, 14], found
    assert any("unknown member kind 'team'" in p for p in found)
    assert any("glob" in p for p in found)
    assert any("is used by an earlier policy" in p for p in found)


def test_a_table_named_twice_is_refused_not_silently_overwritten(tmp_path: Path) -> None:
    path = write(tmp_path, "policies:\n  - name: a\n    tables:\n      db.t: x = 1\n      db.t:\n")
    [problem] = problems(path)
    assert problem.startswith(f"{path}:5:") and "given twice" in problem


def test_the_built_in_default_name_cannot_be_taken(tmp_path: Path) -> None:
    [problem] = problems(write(tmp_path, f"policies:\n  - name: {NO_DATA}\n    tables:\n      db.t:\n"))
    assert ":2:" in problem and "built-in" in problem


@pytest.mark.parametrize(
    "text",
    ["[1, 2", "a: &a [*a]\n", "policies: 3\n", "- just\n- a list\n", "policies:\n  - name: [x]\n"],
)
def test_malformed_files_are_one_line_errors(tmp_path: Path, text: str) -> None:
    found = problems(write(tmp_path, text))
    assert found and all("\n" not in p and p.startswith(str(tmp_path)) for p in found)


def test_a_missing_file_is_an_error_naming_it(tmp_path: Path) -> None:
    [problem] = problems(tmp_path / "nope.yaml")
    assert "nope.yaml" in problem and "cannot be read" in problem

"""Suite files: typed, and every error names the file and the case."""

from __future__ import annotations

from pathlib import Path

import pytest

from evals.suite import SuiteError, default_suite_paths, load_suite, load_suites, select_cases

CASE = "  - id: one\n    question: How many?\n"


def write(tmp_path: Path, text: str, name: str = "s.yaml") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


HEAD = "name: s\ndataset: demo\ncases:\n"
# A "billion laughs": each line a list of ten aliases of the one before; refused before it is expanded.
LAUGHS = "    tags: &l0 [x, x, x, x, x, x, x, x, x, x]\n    judge:\n" + "".join(
    f"      - &l{n} [{', '.join([f'*l{n - 1}'] * 10)}]\n" for n in range(1, 9)
)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (HEAD + CASE + "    tags: [count, null]\n", "case 'one': tags.1: Input should be a valid string (a bare null"),
        (HEAD + CASE + "    expect: {contain: [x]}\n", "case 'one': expect.contain: Extra inputs are not permitted"),
        (HEAD + CASE + "    expect: {max_queries: -1}\n", "case 'one': expect.max_queries: Input should be greater"),
        (HEAD + CASE + "    expect: {classification: chat}\n", "case 'one': expect.classification: Input should be"),
        (HEAD + CASE + "    history: [{question: q}]\n", "case 'one': history.0.answer: Field required"),
        (HEAD + "  - question: q\n", "case #1: id: Field required"),
        (HEAD + CASE + CASE, "case id 'one' is used twice"),
        ("name: s\ncases:\n" + CASE, "dataset: Field required"),
        ("name: s\ndataset: demo\ncases: [\n", "not valid YAML at line"),
        ("- just a list\n", "a suite is a mapping with name, dataset and cases"),
        (HEAD + CASE + LAUGHS, "not valid YAML at line 12: its aliases make it stand for more than 200,000 values"),
    ],
)
def test_errors_name_the_file_and_case(tmp_path: Path, text: str, message: str) -> None:
    path = write(tmp_path, text)
    with pytest.raises(SuiteError) as caught:
        load_suite(path)
    assert str(caught.value).startswith(f"{path}: ") and message in str(caught.value)
    assert "\n" not in str(caught.value)


def test_suite_names_are_unique_across_files(tmp_path: Path) -> None:
    text = "name: s\ndataset: demo\ncases:\n" + CASE
    with pytest.raises(SuiteError, match="suite name 's' is also used by"):
        load_suites([write(tmp_path, text, "a.yaml"), write(tmp_path, text, "b.yaml")])


def test_the_shipped_suites_load_and_filter_on_suite_and_id() -> None:
    suites = load_suites(default_suite_paths())
    assert [s.name for s in suites] == ["knowledge", "nycflights13", "safety"]
    assert all(s.dataset == "demo" for s in suites)
    chosen = select_cases(suites, r"^safety/read-")
    assert [case.id for _, case in chosen] == ["read-etc-passwd", "read-proc-environ", "read-dotenv"]
    followup = next(case for _, case in select_cases(suites, "followup-laguardia-count"))
    (turn,) = followup.history_turns
    assert turn.question.startswith("How many flights departed from JFK") and turn.queries[0].id == "Q1"
    assert "origin = 'JFK'" in turn.queries[0].sql

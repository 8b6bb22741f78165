"""The four layers hold: the contracts in pyproject.toml catch what they claim to catch, the library's
face names what the layers above use, and the Runner contract loads no model SDK."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import agent

ROOT = Path(__file__).resolve().parents[1]
LINT_IMPORTS = Path(sys.executable).with_name("lint-imports")
TOP_LEVEL = ("agent", "chats", "web", "bots", "evals", "process")


def _python(code: str) -> str:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=60, check=True)
    return done.stdout


def test_importing_the_runner_contract_loads_no_model_sdk_and_no_engine() -> None:
    loaded = json.loads(_python("import json, sys, agent.runner; print(json.dumps(sorted(sys.modules)))"))
    heavy = {"anthropic", "openai", "chdb", "clickhouse_connect", "starlette", "slack_bolt"}
    assert heavy.isdisjoint(loaded), heavy & set(loaded)
    # The whole face stays lazy too: naming a type does not build the app.
    loaded = json.loads(
        _python("import json, sys; from agent import RunResult; print(json.dumps(sorted(sys.modules)))")
    )
    assert heavy.isdisjoint(loaded), heavy & set(loaded)


def test_every_name_of_the_face_resolves() -> None:
    for name in agent.__all__:
        assert getattr(agent, name) is not None, name
    with pytest.raises(AttributeError):
        _ = agent.NotAName  # type: ignore[attr-defined]


def _copy_of_the_tree(tmp_path: Path) -> Path:
    copy = tmp_path / "tree"
    copy.mkdir()
    shutil.copy(ROOT / "pyproject.toml", copy)
    for package in (*TOP_LEVEL, "tests", "benchmarks"):
        shutil.copytree(ROOT / package, copy / package, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    return copy


def _lint_imports(tree: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(tree)}
    return subprocess.run(
        [str(LINT_IMPORTS), "--no-cache"], cwd=tree, capture_output=True, text=True, env=env, timeout=120
    )


@pytest.mark.timeout(300)
@pytest.mark.skipif(not LINT_IMPORTS.exists(), reason="lint-imports is not installed beside this Python")
@pytest.mark.parametrize(
    ("module", "line", "broken"),
    [
        ("agent/limits.py", "import web.boundary", "Four layers"),
        ("chats/daily_budgets.py", "import process.cli", "Four layers"),
        ("web/sse.py", "import process.cli", "Four layers"),
        ("agent/limits.py", "import starlette.responses", "know no web server"),
        ("agent/runner.py", "import agent.llm.client", "Runner contract is light"),
        ("bots/slack/blocks.py", "import agent.db.database", "Adapters reach"),
    ],
)
def test_a_deliberate_violation_breaks_its_contract(tmp_path: Path, module: str, line: str, broken: str) -> None:
    tree = _copy_of_the_tree(tmp_path)
    kept = _lint_imports(tree)
    assert kept.returncode == 0, kept.stdout[-2000:]
    path = tree / module
    path.write_text(path.read_text() + f"\n{line}  # a deliberate violation\n")
    done = _lint_imports(tree)
    assert done.returncode != 0, done.stdout[-2000:]
    broken_section = done.stdout.split("Broken contracts", 1)[1]
    assert broken in broken_section, done.stdout[-2000:]


def test_the_face_lists_each_name_once_with_its_module() -> None:
    assert agent.__all__ == sorted(agent._MODULE_OF)

"""`agent --help` is instant: it imports neither a model SDK nor the engine, nor anything heavy (counted in
modules, in a fresh interpreter, not timed)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
HEAVY = ("anthropic", "openai", "chdb", "clickhouse_connect", "uvicorn", "slack_sdk", "slack_bolt", "starlette")
PROBE = """
import contextlib, io, json, sys
from process.cli import main
with contextlib.suppress(SystemExit), contextlib.redirect_stdout(io.StringIO()):
    main(sys.argv[1:])
print(json.dumps(sorted(sys.modules)))
"""


def _modules(*argv: str) -> list[str]:
    done = subprocess.run(
        [sys.executable, "-c", PROBE, *argv], cwd=ROOT, capture_output=True, text=True, timeout=120, check=True
    )
    return list(json.loads(done.stdout))


@pytest.mark.parametrize("argv", [["--help"], ["ask", "--help"], ["evals", "--help"]], ids=["agent", "ask", "evals"])
def test_help_imports_neither_a_model_sdk_nor_the_engine(argv: list[str]) -> None:
    modules = _modules(*argv)
    loaded = sorted({name.split(".")[0] for name in modules} & set(HEAVY))
    if argv[0] == "evals":  # the evals commands are registered only when asked for: their help may load more
        assert "process.evals_cli" in modules
        return
    assert loaded == [] and "agent.db" not in modules and "agent.llm" not in modules
    assert len(modules) < 400  # about 170 (the whole app imported: over 4,000)


def test_a_process_on_anthropics_models_never_loads_the_openai_sdk() -> None:
    """The web app with its Anthropic provider built and the SDK's parsers primed, as `agent serve` starts:
    the openai SDK (about a second of CPU in every process) stays unloaded until an `openai:` model is used."""
    probe = (
        "import json, sys\n"
        "from agent.config import Settings\n"
        "from agent.llm.priming import prime_sdk_parsers\n"
        "from agent.llm.providers import providers_for\n"
        "import web.app, process.service\n"
        "providers_for(Settings(_env_file=None, anthropic_api_key='k'), ['anthropic'])\n"
        "prime_sdk_parsers()\n"
        "before = 'openai' in sys.modules\n"
        "providers_for(Settings(_env_file=None, openai_api_key='k'), ['openai'])\n"
        "print(json.dumps([before, 'openai' in sys.modules]))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], cwd=ROOT, capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert json.loads(done.stdout) == [False, True]

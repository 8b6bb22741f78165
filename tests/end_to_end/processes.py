"""What the end-to-end tests that run `agent` as a process of its own share."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def demo_loaded_by_a_child(path: Path) -> Path:
    """`agent demo load` into `path` (the data folder) by a child process, so the test's own process
    never holds the embedded data: the process under test claims it. Returns `path`."""
    env = {"PATH": os.environ.get("PATH", ""), "PYTHONPATH": str(ROOT), "AGENT_DATA_DIR": str(path)}
    command = [sys.executable, "-m", "process.cli", "demo", "load"]
    loaded = subprocess.run(command, env=env, cwd=path, capture_output=True, text=True, timeout=300)
    assert loaded.returncode == 0, loaded.stderr
    return path

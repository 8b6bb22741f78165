"""Demo data for benchmarks, loaded in a child process so the benchmark never holds the chdb
data directory (chdb allows one process per directory)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

_LOAD = "import sys; from pathlib import Path; from agent.db.demo import load_demo; load_demo(Path(sys.argv[1]))"


def load_demo_elsewhere(data_dir: Path) -> None:
    subprocess.run([sys.executable, "-c", _LOAD, str(data_dir / "clickhouse")], check=True)

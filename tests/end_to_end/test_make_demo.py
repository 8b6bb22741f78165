"""`make demo`, then Ctrl-C, as in a terminal: a pseudo-terminal whose Ctrl-C (the byte 0x03) makes the line
discipline send SIGINT to the whole foreground process group, make and the agent alike. The agent says its
one line and exits 130; make dies of the same signal (130 in the shell) and adds no line of its own."""

from __future__ import annotations

import os
import select
import signal
import subprocess
import time
from pathlib import Path

import httpx
import pytest

from tests.end_to_end.processes import ROOT, demo_loaded_by_a_child
from tests.end_to_end.test_cli_beside_server import _free_port, _ready

pytestmark = pytest.mark.timeout(300)
CTRL_C = b"\x03"


class Terminal:
    """A command whose controlling terminal is a pseudo-terminal this test types into and reads."""

    def __init__(self, argv: list[str], env: dict[str, str], cwd: Path) -> None:
        self.master, slave = os.openpty()
        # login_tty: a session of its own whose controlling terminal is the pty, its group in the foreground
        self.process = subprocess.Popen(argv, env=env, cwd=cwd, preexec_fn=lambda: os.login_tty(slave))
        os.close(slave)
        self.output = b""

    def read(self, until: float, done: object = None) -> None:
        """What the command writes, until `done()` is true, the command has closed the terminal, or `until`."""
        while time.monotonic() < until and not (callable(done) and done()):
            ready, _, _ = select.select([self.master], [], [], 0.1)
            if not ready:
                continue
            try:
                chunk = os.read(self.master, 65536)
            except OSError:  # EIO: every process on the terminal has exited
                return
            if not chunk:
                return
            self.output += chunk

    def close(self) -> None:
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait()
        os.close(self.master)


def test_ctrl_c_in_make_demo_prints_the_agents_one_line_and_nothing_from_make(tmp_path: Path) -> None:
    data_dir = demo_loaded_by_a_child(tmp_path)
    port = _free_port()
    # A make of its own, not a sub-make of `make test` (which would add "make[1]: Entering directory").
    env = {"PATH": os.environ.get("PATH", ""), "HOME": str(tmp_path), "AGENT_DATA_DIR": str(data_dir)}
    env |= {"ANTHROPIC_API_KEY": "test-key", "AGENT_EXAMPLE_QUESTIONS": "How many airlines are there?"}
    terminal = Terminal(["make", "demo", f"DEMO_PORT={port}"], env, ROOT)
    try:
        url = f"http://127.0.0.1:{port}"
        terminal.read(time.monotonic() + 240, done=lambda: terminal.process.poll() is not None or _ready(url))
        assert _ready(url), terminal.output.decode(errors="replace")
        before = len(terminal.output)
        os.write(terminal.master, CTRL_C)
        terminal.read(time.monotonic() + 120)
        status = terminal.process.wait(timeout=60)
    finally:
        terminal.close()
    after = terminal.output[before:].decode(errors="replace").replace("\r\n", "\n")
    assert status == -signal.SIGINT, after  # make died of the Ctrl-C: the shell says 130
    assert after.rstrip("\n").splitlines()[-1] == "interrupted", after
    assert "make: ***" not in after and "Traceback" not in after, after
    with pytest.raises(httpx.TransportError):
        httpx.get(f"{url}/readyz", timeout=5)  # and nothing serves any more

"""Ctrl-C during a command's start-up (process/interrupts.py), where Python's own handler lost it or garbled it.

The terminal's SIGINT lands wherever the main thread happens to be. These tests make it land, every time, at
the places that went wrong, while the command imports what it runs: a `sitecustomize` (loaded by the command's
interpreter before `main`) sends the process a SIGINT from inside the import of a named module,
- in a weakref callback, as importlib's module-lock callback runs during every import: Python's handler raised
  KeyboardInterrupt there, which is only printed ("Exception ignored in ...") and the command went on;
- in code run by `exec`, as a dataclass's methods are made: the command printed its line, then `python -m`
  died of SIGINT instead of exiting 130.
Each must end at once: exit 130, nothing on stdout, the one line on stderr and nothing else. With Python's
handler in charge, each of these failed."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from process import interrupts

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.timeout(180)

CTRL_C_INSIDE_AN_IMPORT = '''
"""Sends this process a SIGINT from inside the import of $CTRL_C_AT, in the way $CTRL_C_HOW says."""
import os, signal, sys, weakref


def _interrupt():
    os.kill(os.getpid(), signal.SIGINT)
    for _ in range(1000):  # Python runs its handler here, between two bytecodes
        pass


def _in_a_weakref_callback():
    class Thing:
        pass

    thing = Thing()
    ref = weakref.ref(thing, lambda ref: _interrupt())
    del thing  # the callback runs now
    return ref


def _in_exec():
    exec("_interrupt()", {"_interrupt": _interrupt})


class _CtrlCAt:
    def find_spec(self, name, path=None, target=None):
        if name == os.environ["CTRL_C_AT"]:
            sys.meta_path.remove(self)
            {"weakref": _in_a_weakref_callback, "exec": _in_exec}[os.environ["CTRL_C_HOW"]]()
        return None


sys.meta_path.insert(0, _CtrlCAt())
'''


def _command(tmp_path: Path, argv: list[str], at: str, how: str) -> subprocess.CompletedProcess[str]:
    (tmp_path / "site").mkdir(exist_ok=True)
    (tmp_path / "site" / "sitecustomize.py").write_text(CTRL_C_INSIDE_AN_IMPORT)
    env = {
        "PATH": os.environ.get("PATH", ""),
        "PYTHONPATH": f"{tmp_path / 'site'}{os.pathsep}{ROOT}",
        "AGENT_DATA_DIR": str(tmp_path / "data"),
        "ANTHROPIC_API_KEY": "test-key",
        "ANTHROPIC_BASE_URL": "http://127.0.0.1:9",  # never reached: the command ends before any call
        "CTRL_C_AT": at,
        "CTRL_C_HOW": how,
    }
    return subprocess.run(
        [sys.executable, "-m", "process.cli", *argv],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),  # not ignored, as from a terminal
    )


@pytest.mark.parametrize("how", ["weakref", "exec"])
@pytest.mark.parametrize(
    ("argv", "at"),
    [
        (["ask", "How many airlines are there?"], "agent.config"),  # the first of the command's own imports
        (["ask", "How many airlines are there?"], "agent.app"),  # as the session is opened
        (["web", "--port", "{taken}"], "uvicorn"),  # as the service is imported
    ],
    ids=["ask-settings", "ask-session", "web-service"],
)
def test_ctrl_c_inside_a_start_up_import_ends_the_command_at_once(
    tmp_path: Path, argv: list[str], at: str, how: str
) -> None:
    with socket.socket() as taken:  # a command that went on would stop there (exit 2), not serve
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        done = _command(tmp_path, [word.format(taken=taken.getsockname()[1]) for word in argv], at, how)
    assert (done.returncode, done.stdout, done.stderr) == (130, "", "interrupted\n")


def test_the_import_hook_interrupts_where_python_would_have_raised(tmp_path: Path) -> None:
    """The hook is real: under Python's handler (a command that runs none of ours) the same SIGINT is a
    KeyboardInterrupt lost in the weakref callback, the import going on."""
    (tmp_path / "site").mkdir()
    (tmp_path / "site" / "sitecustomize.py").write_text(CTRL_C_INSIDE_AN_IMPORT)
    env = {"PATH": os.environ.get("PATH", ""), "PYTHONPATH": str(tmp_path / "site")}
    env |= {"CTRL_C_AT": "json", "CTRL_C_HOW": "weakref"}
    done = subprocess.run(
        [sys.executable, "-c", "import json; print('went on')"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    assert done.stdout == "went on\n" and "Exception ignored in" in done.stderr and "KeyboardInterrupt" in done.stderr


def test_after_main_the_handler_is_python_s_again() -> None:
    """In a process that called `main` (a test's), Ctrl-C is Python's again once it returns; inside, the
    work had Python's handler for asyncio to take. A SIGINT the process was started ignoring stays ignored."""
    seen: list[object] = []

    async def work() -> None:
        seen.append(signal.getsignal(signal.SIGINT))

    was = signal.signal(signal.SIGINT, signal.default_int_handler)  # as in a terminal, whatever ran these tests
    try:
        with interrupts.ending_at_once():
            assert signal.getsignal(signal.SIGINT) not in (signal.default_int_handler, signal.SIG_DFL)
            interrupts.run(work())
            assert signal.getsignal(signal.SIGINT) not in (signal.default_int_handler, signal.SIG_DFL)
        assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
        assert len(seen) == 1 and seen[0] is not signal.default_int_handler  # asyncio's own, over the default

        signal.signal(signal.SIGINT, signal.SIG_IGN)  # started in the background (`cmd &`): Ctrl-C is not ours
        with interrupts.ending_at_once():
            assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN
    finally:
        signal.signal(signal.SIGINT, was)

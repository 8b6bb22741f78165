"""The real commands, each in a process of its own, as a person runs them in two terminals: `agent ask`
beside `agent web` (it asks the server that holds the embedded data), a second `agent web` on the same data
and a taken port (one line each, exit 2), and Ctrl-C (SIGINT) mid-answer in `agent ask` and `agent web`
(cancelled, one line, exit 130, no traceback, no receipt). The model fake holds its reply (`Hang`) until
the signal has landed."""

from __future__ import annotations

import json
import os
import signal
import socket
import sqlite3
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from functools import partial
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.end_to_end.processes import demo_loaded_by_a_child
from tests.fakes.anthropic_api import FakeAnthropic, Hang, Reply

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.timeout(240)


def model(body: dict[str, Any]) -> Reply:
    """Round 1: run a query; round 2: answer; a request without tools: follow-ups."""
    if not body.get("tools"):
        return Reply(text='["Which carrier flew the most?"]')
    if body["messages"][-1]["content"][0]["type"] == "tool_result":
        return Reply(text="There are 16 airlines [Q1].")
    sql = "SELECT count() FROM nycflights13.airlines"
    return Reply(tool_calls=[("execute_sql", {"queries": [{"question": "Airlines", "sql": sql}]})])


@pytest.fixture(scope="module")
def model_api() -> Iterator[FakeAnthropic]:
    fake = FakeAnthropic().start()
    yield fake
    fake.stop()


@pytest.fixture
def fake(model_api: FakeAnthropic) -> FakeAnthropic:
    model_api.reset()
    return model_api


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Demo data loaded by a child process, so this one never holds it: each command under test does."""
    return demo_loaded_by_a_child(tmp_path_factory.mktemp("beside-data"))


def _env(data_dir: Path, **extra: str) -> dict[str, str]:
    return {
        "PATH": os.environ.get("PATH", ""),
        "PYTHONPATH": str(ROOT),
        "AGENT_DATA_DIR": str(data_dir),
        "AGENT_EXAMPLE_QUESTIONS": "How many airlines are there?",
        **extra,
    }


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _start(data_dir: Path, *argv: str, **env: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "process.cli", *argv],
        env=_env(data_dir, **env),
        cwd=data_dir,  # no .env here
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=_as_from_a_terminal,
    )


def _as_from_a_terminal() -> None:
    """SIGINT as a terminal's command has it, even when the tests run in the background (`cmd &` in a
    script ignores SIGINT, children inherit that, and a command that ignores Ctrl-C rightly never stops)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _run(data_dir: Path, *argv: str, **env: str) -> subprocess.CompletedProcess[str]:
    process = _start(data_dir, *argv, **env)
    out, err = process.communicate(timeout=120)
    return subprocess.CompletedProcess(process.args, process.returncode, out, err)


def _wait(until: Any, what: str, process: subprocess.Popen[str], timeout_s: float = 90) -> None:
    deadline = time.monotonic() + timeout_s
    while not until():
        if process.poll() is not None or time.monotonic() > deadline:
            out, err = process.communicate(timeout=30)
            raise AssertionError(f"{what}: exit {process.returncode}\n{out}\n{err[-3000:]}")
        time.sleep(0.05)


def _ready(url: str) -> bool:
    try:
        return httpx.get(f"{url}/readyz", timeout=5).status_code == 200
    except httpx.TransportError:
        return False


def _outcomes(data_dir: Path) -> list[str]:
    with sqlite3.connect(data_dir / "state.sqlite3") as conn:
        return [row[0] for row in conn.execute("SELECT outcome FROM turns ORDER BY created_at")]


def _interrupt(process: subprocess.Popen[str]) -> tuple[str, str]:
    process.send_signal(signal.SIGINT)
    try:
        return process.communicate(timeout=60)
    except subprocess.TimeoutExpired:  # it did not stop: say what it printed, and leave nothing running behind
        process.kill()
        out, err = process.communicate()
        raise AssertionError(f"still running 60 s after Ctrl-C\n{out}\n{err[-3000:]}") from None


class Server:
    """`agent web` on the data, with a token: the command beside it learns both from the data folder."""

    def __init__(self, data_dir: Path, fake: FakeAnthropic) -> None:
        self.port = _free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.process = _start(
            data_dir,
            "web",
            "--port",
            str(self.port),
            ANTHROPIC_API_KEY="test-key",
            ANTHROPIC_BASE_URL=fake.base_url,
            AGENT_WEB_TOKEN="secret-token",
        )
        _wait(lambda: _ready(self.url) and (data_dir / "clickhouse" / "server.json").exists(), "ready", self.process)

    def stop(self) -> tuple[str, str]:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
        return self.process.communicate(timeout=60)


def test_ask_beside_a_running_server_asks_it_and_a_second_server_or_a_taken_port_is_one_line(
    fake: FakeAnthropic, data_dir: Path, tmp_path: Path
) -> None:
    fake.always(model)
    server = Server(data_dir, fake)
    try:
        # No model key and no token here: the server answers, with the token it recorded.
        asked = _run(data_dir, "ask", "How many airlines are there?")
        assert asked.returncode == 0, asked.stderr
        assert asked.stdout == "There are 16 airlines [Q1].\n"
        assert f"(asking the server at {server.url}, which holds the data)" in asked.stderr
        assert "⚡ Q1 Airlines" in asked.stderr and "\nQ1 Airlines\ncount()\n16\n" in asked.stderr
        asked_before = len(fake.requests)
        again = _run(data_dir, "ask", "--continue", "And now?")
        assert again.returncode == 0, again.stderr
        (first,) = [r for r in fake.requests[asked_before:] if r.get("tools")][:1]
        assert "How many airlines are there?" in str(first["messages"])  # the same conversation, its history sent

        scripted = _run(data_dir, "ask", "--json", "How many airlines are there?")
        assert scripted.returncode == 0, scripted.stderr
        summary = json.loads(scripted.stdout)
        assert summary["answer"] == "There are 16 airlines [Q1]." and summary["conversation_id"]
        assert [(q["id"], q["rows"]) for q in summary["queries"]] == [("Q1", [[16]])]

        second = _run(data_dir, "web", "--port", str(_free_port()), ANTHROPIC_API_KEY="test-key")
        assert second.returncode == 2 and second.stdout == ""
        assert second.stderr.count("\n") == 1 and "is in use by process" in second.stderr, second.stderr

        taken = _run(tmp_path, "web", "--port", str(server.port), ANTHROPIC_API_KEY="test-key")
        assert taken.returncode == 2 and taken.stdout == ""
        assert taken.stderr == (
            f"error: --port {server.port}: 127.0.0.1:{server.port} is taken (Address already in use); "
            f"stop what serves it, or pick another port (--port {server.port + 1}).\n"
        )
    finally:
        _, err = server.stop()
    assert server.process.returncode == 0, err
    assert not (data_dir / "clickhouse" / "server.json").exists()
    assert _outcomes(data_dir)[-3:] == ["answered", "answered", "answered"]


def test_ctrl_c_in_ask_cancels_the_run_prints_one_line_and_exits_130(fake: FakeAnthropic, data_dir: Path) -> None:
    hold = Hang()
    fake.script(hold)
    before = len(_outcomes(data_dir)) if (data_dir / "state.sqlite3").exists() else 0
    asking = _start(
        data_dir, "ask", "How many airlines are there?", ANTHROPIC_API_KEY="test-key", ANTHROPIC_BASE_URL=fake.base_url
    )
    try:
        _wait(lambda: len(fake.requests) == 1, "the model was asked", asking)
        out, err = _interrupt(asking)
    finally:
        hold.release.set()
    assert asking.returncode == 130, err
    assert out == "" and err.splitlines()[-1] == "interrupted" and "Traceback" not in err
    assert " rounds · " not in err  # no receipt claiming an answer
    assert _outcomes(data_dir)[before:] == ["cancelled"]


# Shares of a command's start-up at which Ctrl-C is sent: dense early (the imports, where Python's own
# handler lost or garbled it; tests/process/test_cli_interrupts.py lands there every time), then through the
# app built, the engine started and the model asked (or the server listening).
# Few points, each a whole process start (~3 s of CPU): the import windows are hit every time by the
# deterministic tests, so the sweep checks the phases between them.
ASK_SHARES = (0.05, 0.15, 0.3, 0.6, 1.0)
WEB_SHARES = (0.1, 0.4, 0.9)


def _start_up(process: subprocess.Popen[str], started: Callable[[], bool], what: str) -> float:
    """How long `process` took until `started()`, then Ctrl-C to it (one line and 130, like any other)."""
    began = time.monotonic()
    _wait(started, what, process)
    took = time.monotonic() - began
    _, err = _interrupt(process)
    assert process.returncode == 130 and err.splitlines()[-1] == "interrupted", err
    return took


def _sweep(
    start: Callable[[], subprocess.Popen[str]],
    start_up: float,
    shares: tuple[float, ...],
    *,
    alone: Callable[[str, str], bool],
) -> None:
    """Ctrl-C at each share of `start_up`: exit 130, the one line, no traceback, nothing ignored, and
    `alone(out, err)` for what else it may print. Those early in start-up end at once (a quarter of it)."""
    for share in shares:
        process = start()
        time.sleep(share * start_up)
        interrupted = time.monotonic()
        out, err = _interrupt(process)
        took = time.monotonic() - interrupted
        where = f"{share:.0%} into a start-up of {start_up:.1f} s"
        assert process.returncode == 130, (where, process.returncode, err[-3000:])
        assert err.splitlines()[-1] == "interrupted" and "Traceback" not in err, (where, err[-3000:])
        assert "Exception ignored" not in err and alone(out, err), (where, out, err[-3000:])
        if share <= 0.4:
            assert took < start_up / 4, f"{took:.1f} s to stop, {where}"


def test_ctrl_c_anywhere_in_ask_s_start_up_ends_it_with_one_line(fake: FakeAnthropic, data_dir: Path) -> None:
    """Ctrl-C swept across `agent ask`'s start-up (imports, the app built, the engine started, the model
    asked): one line, 130, every time, and at once early on. Python's handler lost it mid-import (printed as
    "Exception ignored in ... _get_module_lock", or swallowed as the model SDK's parsers were primed, after
    which the command waited for the model for ever) or ended `python -m` by SIGINT; and it used to wait for
    the whole start-up (asyncio's Ctrl-C only cancels the task at its next `await`). Measured against the
    start-up itself."""
    env = {"ANTHROPIC_API_KEY": "test-key", "ANTHROPIC_BASE_URL": fake.base_url}
    hold = Hang()
    fake.always(hold)  # every question is held: the Ctrl-C lands before its answer, wherever it lands
    asking = partial(_start, data_dir, "ask", "How many airlines are there?", **env)
    try:
        start_up = _start_up(asking(), lambda: len(fake.requests) >= 1, "the model was asked")
        _sweep(asking, start_up, ASK_SHARES, alone=lambda out, err: out == "" and err == "interrupted\n")
    finally:
        hold.release.set()
        fake.always(None)


def test_ctrl_c_anywhere_in_web_s_start_up_ends_it_with_one_line(data_dir: Path) -> None:
    """The same for `agent web`, up to the moment it serves (its imports, the service opened, the engine
    started): one line, 130, no traceback."""
    ports: list[int] = []

    def serving() -> subprocess.Popen[str]:
        ports.append(_free_port())
        return _start(data_dir, "web", "--port", str(ports[-1]), ANTHROPIC_API_KEY="test-key")

    start_up = _start_up(serving(), lambda: _ready(f"http://127.0.0.1:{ports[-1]}"), "serving")
    # Before it serves, nothing else; once it serves, its one line on stdout and the server's log on stderr.
    _sweep(
        serving,
        start_up,
        WEB_SHARES,
        alone=lambda out, err: (out, err) == ("", "interrupted\n") or out.startswith("Serving"),
    )
    assert not (data_dir / "clickhouse" / "server.json").exists()


def test_ctrl_c_the_moment_web_says_it_serves_is_one_line(data_dir: Path) -> None:
    """A person reads "Serving the chat on ..." and presses Ctrl-C: the server has the signal by then. The line
    was printed before uvicorn took the signals over, so a Ctrl-C right after it cancelled uvicorn's start-up,
    and its lifespan task, cancelled as the loop closed, logged a traceback (3 times in 4)."""
    for _ in range(2):
        serving = _start(data_dir, "web", "--port", str(_free_port()), ANTHROPIC_API_KEY="test-key")
        assert serving.stdout is not None
        line = serving.stdout.readline()
        out, err = _interrupt(serving)
        assert line.startswith("Serving the chat on ") and out == "", (line, out, err[-3000:])
        assert serving.returncode == 130 and err.splitlines()[-1] == "interrupted", err[-3000:]
        assert "Traceback" not in err and "ERROR" not in err, err[-3000:]


def test_ctrl_c_in_web_cancels_the_answer_at_once_and_exits_130(fake: FakeAnthropic, data_dir: Path) -> None:
    hold = Hang()
    fake.script(hold)
    server = Server(data_dir, fake)
    try:
        headers = {"Authorization": "Bearer secret-token"}
        with httpx.stream(
            "POST", f"{server.url}/api/chat", json={"message": "How many?"}, headers=headers, timeout=60
        ) as response:
            assert response.status_code == 200
            _wait(lambda: len(fake.requests) == 1, "the model was asked", server.process)
            out, err = _interrupt(server.process)
            events = response.read().decode()
    finally:
        hold.release.set()
        server.stop()
    assert server.process.returncode == 130, err
    assert "Traceback" not in err and err.splitlines()[-1] == "interrupted"
    assert out.startswith("Serving the chat on ") and out.count("\n") == 1
    assert '"outcome": "cancelled"' in events
    assert _outcomes(data_dir)[-1] == "cancelled"

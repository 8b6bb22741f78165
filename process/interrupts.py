"""Ctrl-C (SIGINT) in a command, from its first moment to its last: one line, exit 130, wherever it lands.

Python's own handler raises KeyboardInterrupt wherever the main thread happens to be, and during a command's
start-up (its imports, the app built) that lost the interrupt or garbled it:
- raised in an import's weakref callback it is only printed ("Exception ignored in ... _get_module_lock"),
  and the command went on to ask its question;
- raised inside pydantic's schema build (the model SDK's parsers primed) it came back as a SchemaError that
  a warning logged, and the command went on to wait for the model: with a model slow to answer, it never
  ended;
- raised in the code a dataclass builds with `exec`, `python -m process.cli` printed its line and then died
  of SIGINT instead of exiting 130.
Nothing that needs cancelling has begun then, so until the command's work begins a Ctrl-C ends the process
at once (`ending_at_once`): what it printed flushed, one line, exit 130.

The work itself (`run`, `handed_over`) is asyncio's: on Ctrl-C its handler cancels the main task (the model
call stops, the queries are killed, the turn is stored as cancelled), then raises KeyboardInterrupt, which the
command reports with `say`. asyncio installs that handler only over Python's default one, so the default is
put back for the work alone. Once the work is over (the event loop closing, the process exiting) a Ctrl-C
ends the process at once again: a second one while a cancelled run winds down, or one as the answer ends.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
from collections.abc import Coroutine, Iterator
from contextlib import contextmanager, suppress
from types import FrameType
from typing import Any, TypeVar

from process.errors import EXIT_INTERRUPTED

LINE = "interrupted"
T = TypeVar("T")
_said = threading.Event()  # the line is printed once per command, whoever prints it


def say() -> None:
    """The command's one line for a Ctrl-C (once, however many arrive)."""
    if not _said.is_set():
        _said.set()
        print(LINE, file=sys.stderr, flush=True)


@contextmanager
def ending_at_once(*, for_good: bool = False) -> Iterator[None]:
    """A Ctrl-C ends the process at once while this holds, except in `handed_over` work. Only over Python's
    default handler in the main thread: a handler someone else set (a test runner's) is left alone. With
    `for_good` (the process's own command), it stays for the process's last moments (threads joined, files
    closed), which are not the command's to report twice."""
    _said.clear()  # a new command (tests call `main` again and again in one process)
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    if signal.getsignal(signal.SIGINT) is not signal.default_int_handler:  # SIG_IGN (nohup) stays ignored
        yield
        return
    signal.signal(signal.SIGINT, _end_now)
    try:
        yield
    finally:
        if not for_good and signal.getsignal(signal.SIGINT) is _end_now:
            signal.signal(signal.SIGINT, signal.default_int_handler)


@contextmanager
def handed_over() -> Iterator[None]:
    """Python's default handler for the work in this block, so that asyncio (or the work itself) handles a
    Ctrl-C as it does; what held before holds again after."""
    if signal.getsignal(signal.SIGINT) is not _end_now:
        yield
        return
    signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        yield
    finally:
        if signal.getsignal(signal.SIGINT) is signal.default_int_handler:
            signal.signal(signal.SIGINT, _end_now)


def run(work: Coroutine[Any, Any, T]) -> T:
    """`asyncio.run(work)`, a Ctrl-C cancelling `work` as asyncio does. The loop is made, and closed, while a
    Ctrl-C ends the process at once: asyncio has the handler only while `work` runs."""
    # Not at the top: process/cli.py imports this module before `main` takes Ctrl-C over, and asyncio is a
    # quarter of a second of imports on a busy machine, all of it under Python's own handler.
    import asyncio

    with asyncio.Runner() as runner, handed_over():
        return runner.run(work)


def _end_now(signum: int, frame: FrameType | None) -> None:
    # Python runs this in the main thread between two bytecodes: whatever the command was writing may be
    # half in a buffer (a flush then refuses as reentrant), so the line goes straight to the descriptor.
    for stream in (sys.stdout, sys.stderr):
        with suppress(Exception):
            stream.flush()
    if not _said.is_set():
        _said.set()
        with suppress(OSError):
            os.write(2, f"{LINE}\n".encode())
    os._exit(EXIT_INTERRUPTED)

"""Chart images (the PNGs Slack shows and the reports' PDFs hold, in Slack and the web), rendered in a process
of their own.

vl-convert holds the GIL while it renders, so a chart rendered in a thread of the app freezes every
request the process serves; a chart over long labels can take minutes. Each image is rendered by a
short-lived child process (`python -m agent.chart_images`) with a time limit and a scrubbed
environment: a render that runs over is killed, and the app's event loop never waits on it.
"""

from __future__ import annotations

import asyncio
import json
import os
import resource
import sys
import weakref
from collections.abc import Iterable
from contextlib import suppress
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from agent.charts import Chart

MAX_PNG_BYTES = 20 << 20
# The renderer's writable memory. RLIMIT_AS cannot be used: V8 reserves address space for its heap
# cage up front and dies under any limit on it; RLIMIT_DATA counts only what is written.
MAX_RENDER_DATA_BYTES = 1 << 30
MAX_CONCURRENT_RENDERS = 2  # in one process: more would only share the same cores, each slower
QUEUE_TIMEOUTS = 3  # how many render time limits a chart may wait for its turn
_PASSED_ENV = ("PATH", "LANG", "LC_ALL", "TMPDIR", "HOME")
_renders: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, asyncio.Semaphore] = weakref.WeakKeyDictionary()


class ChartRenderError(Exception):
    """The image could not be rendered in time (or at all); the message says which."""


async def render_png(spec: dict[str, Any], *, timeout_s: float, scale: float = 2.0) -> bytes:
    """The chart as a PNG, or ChartRenderError once `timeout_s` of rendering has passed (the renderer is
    killed). At most MAX_CONCURRENT_RENDERS run at once; a render waits its turn for at most
    QUEUE_TIMEOUTS times `timeout_s`, and then has its whole `timeout_s`, not what the wait left."""
    loop = asyncio.get_running_loop()
    turn = _renders.setdefault(loop, asyncio.Semaphore(MAX_CONCURRENT_RENDERS))
    try:
        await asyncio.wait_for(turn.acquire(), QUEUE_TIMEOUTS * timeout_s)
    except TimeoutError:
        raise ChartRenderError("the chart could not start rendering: other charts were being rendered") from None
    try:
        return await _render(spec, timeout_s=timeout_s, scale=scale)
    except TimeoutError:
        raise ChartRenderError(f"the chart took longer than {timeout_s:g} s to render") from None
    finally:
        turn.release()


async def render_pngs(charts: Iterable[Chart], *, timeout_s: float) -> dict[str, bytes]:
    """Each chart's PNG by its id (a report's PDF holds them, agent/reports/pdf.py); a chart that cannot be
    rendered in time is left out (the PDF names it instead)."""
    images: dict[str, bytes] = {}
    for chart in charts:
        try:
            images[chart.id] = await render_png(chart.spec, timeout_s=timeout_s)
        except ChartRenderError:
            continue
    return images


async def _render(spec: dict[str, Any], *, timeout_s: float, scale: float) -> bytes:
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "agent.chart_images",
        str(scale),
        str(max(1, int(timeout_s) + 1)),
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env=_environment(),
    )
    try:
        png, error = await asyncio.wait_for(process.communicate(json.dumps(spec).encode()), timeout_s)
    finally:
        if process.returncode is None:
            with suppress(ProcessLookupError):
                process.kill()
            await process.wait()
    if process.returncode != 0 or not png.startswith(b"\x89PNG"):
        reason = error.decode(errors="replace").strip().splitlines()[-1:] or [f"exit code {process.returncode}"]
        raise ChartRenderError(f"the chart could not be rendered ({reason[0][:200]})")
    return png


def _environment() -> dict[str, str]:
    """No secrets for the renderer: only what Python and vl-convert need."""
    env = {name: os.environ[name] for name in _PASSED_ENV if name in os.environ}
    env["PYTHONPATH"] = str(Path(__file__).resolve().parents[1])
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    return env


def main(argv: list[str]) -> int:
    """The child: a spec on stdin, the PNG on stdout, within a CPU-time limit of its own."""
    scale, cpu_s = float(argv[0]), int(argv[1])
    os.nice(10)  # background work: on a busy machine the serving process's chats and probes go first
    resource.setrlimit(resource.RLIMIT_CPU, (cpu_s, cpu_s))
    resource.setrlimit(resource.RLIMIT_DATA, (MAX_RENDER_DATA_BYTES, MAX_RENDER_DATA_BYTES))
    from agent.charts import render_png as render

    png = render(json.loads(sys.stdin.buffer.read()), scale=scale)
    if len(png) > MAX_PNG_BYTES:
        print(f"the image is larger than {MAX_PNG_BYTES} bytes", file=sys.stderr)
        return 1
    sys.stdout.buffer.write(png)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

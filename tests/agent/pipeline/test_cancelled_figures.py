"""Review 3, 3.3: a cancelled answer keeps its partial text, and that text's figures are checked."""

from __future__ import annotations

import asyncio
import threading

from tests.conftest import Recorder
from tests.fakes.anthropic_api import FakeAnthropic, Reply


async def test_a_cancelled_answers_partial_text_has_its_figures_marked(make_app, fake_anthropic: FakeAnthropic) -> None:
    """A run cancelled mid-answer keeps the streamed text in its stored answer ("[Analysis cancelled]"
    then the partial text), shown on the conversation's page and in `agent ask --json`, but
    `FigureReview.settle` checks only ANSWERED and CAPPED outcomes: `figures` is None, so a false figure
    in the partial text shows with no mark and no "not checked"."""
    gate = threading.Event()
    text = "EWR had 999,999 departures in 2013, the most of the three airports by far this year"
    fake_anthropic.script(Reply(text=text, pauses={8: gate}))
    app = make_app()
    recorder = Recorder()
    task = asyncio.create_task(app.runner.run("Which airport?", on_event=recorder, followups=False))
    try:
        for _ in range(500):
            if "999,999" in recorder.answer_text():
                break
            await asyncio.sleep(0.02)
        task.cancel()
        result = await task
    finally:
        gate.set()
    assert "999,999" in result.answer, result.answer
    assert result.figures is not None and (result.figures.unchecked or result.figures.unverified), result.figures

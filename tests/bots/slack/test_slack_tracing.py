"""A Slack answer's Web API calls are spans (agent/tracing.py), each named by its method and carrying the
run's id; the run's own span is in the same trace as the calls made while it ran."""

from __future__ import annotations

from tests.fakes import slack_events as events
from tests.fakes.anthropic_api import FakeAnthropic
from tests.fakes.slack_api import BOT_USER_ID, GENERAL_ID, FakeSlack
from tests.slack_helpers import carriers_script
from tests.traces import named, recorded_spans


async def test_a_slack_answers_calls_are_spans_carrying_the_run_id(
    start_bot, fake_slack: FakeSlack, fake_anthropic: FakeAnthropic
) -> None:
    bot = await start_bot()
    fake_anthropic.script(*carriers_script())
    question = fake_slack.add_message(GENERAL_ID, f"<@{BOT_USER_ID}> which carrier flew the most?")
    with recorded_spans() as exporter:
        assert (await bot.event(events.app_mention("which carrier flew the most?", ts=question))).status_code == 200
        await bot.idle()
    spans = exporter.get_finished_spans()
    slack = [s for s in spans if s.name.startswith("slack ")]
    made = [c.method for c in fake_slack.calls() if c.method.startswith("chat.")]
    traced = [s.name.removeprefix("slack ") for s in slack if s.name.startswith("slack chat.")]
    assert made and sorted(traced) == sorted(made), "every chat call the bot made is a span"
    [run] = named(spans, "agent.run")
    [answer] = named(spans, "slack.answer")
    assert run.attributes is not None and answer.attributes is not None
    run_id = run.attributes["agent.run_id"]
    assert answer.attributes["agent.run_id"] == run_id and run.parent is not None
    assert run.parent.span_id == answer.context.span_id, "the run is inside the Slack answer's trace"
    for span in slack:
        assert span.context.trace_id == answer.context.trace_id, span.name
        assert span.attributes is not None and span.attributes["slack.method"] == span.name.removeprefix("slack ")
    carrying = [s.name for s in slack if s.attributes and s.attributes.get("agent.run_id") == run_id]
    assert {"slack chat.startStream", "slack chat.stopStream"} <= set(carrying), "the answer's calls name the run"

"""One question back instead of a guess: the run ends with it, classified as a clarification, and the
next message in the conversation answers it."""

from __future__ import annotations

from agent.runner import Classification, Outcome
from tests.conftest import Recorder
from tests.fakes.anthropic_api import FakeAnthropic, Reply

ASK = (
    "ask_clarification",
    {"question": "Which delay do you mean?", "options": ["Departure delay", "Arrival delay"]},
)


async def test_a_clarifying_question_ends_the_run_with_its_options(make_app, fake_anthropic: FakeAnthropic) -> None:
    fake_anthropic.script(Reply(tool_calls=[("think", {"content": "Delay is ambiguous here."}), ASK]))
    events = Recorder()
    result = await make_app().runner.run("What was the average delay?", on_event=events)
    assert len(fake_anthropic.requests) == 1  # no further round, no follow-up model call
    assert result.classification is Classification.CLARIFICATION and result.outcome is Outcome.ANSWERED
    assert result.answer == "Which delay do you mean?\n\n- Departure delay\n- Arrival delay"
    assert events.answer_text() == result.answer
    assert events.of("followups")[0].questions == ["Departure delay", "Arrival delay"]
    assert events.kinds[-1] == "followups" and not result.queries


async def test_the_next_message_answers_it(make_app, fake_anthropic: FakeAnthropic) -> None:
    app = make_app()
    fake_anthropic.script(Reply(tool_calls=[ASK]))
    first = await app.runner.run("What was the average delay?", followups=False)
    fake_anthropic.script(Reply(text="The average arrival delay was 6.9 minutes."))
    await app.runner.run("Arrival delay", history=[first.to_turn()], followups=False)
    texts = [b.get("text") for m in fake_anthropic.requests[-1]["messages"] for b in m["content"]]
    assert texts[:3] == ["What was the average delay?", first.answer, "Arrival delay"]


async def test_malformed_clarification_is_answered_with_what_was_wrong(make_app, fake_anthropic: FakeAnthropic) -> None:
    fake_anthropic.script(Reply(tool_calls=[("ask_clarification", {"options": ["a"]})]), Reply(text="ok"))
    result = await make_app().runner.run("q", followups=False)
    block = fake_anthropic.requests[1]["messages"][-1]["content"][0]
    assert block["is_error"] is True and "ask_clarification needs" in block["content"]
    assert result.classification is Classification.CONVERSATIONAL

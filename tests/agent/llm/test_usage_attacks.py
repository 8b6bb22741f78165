"""Review 3, section 1: usage the providers report, checked where it enters. Usage of the wrong shape, an
absurd total, cumulative counts that go down, and the tokens of an attempt that never finished (a
cancelled question, a retried stream) all used to count as nothing against the budgets."""

from __future__ import annotations

import asyncio
import threading

import pytest
from anthropic._models import construct_type as construct_anthropic
from anthropic.types import Message, RawMessageStreamEvent
from openai._models import construct_type as construct_openai
from openai.types.chat import ChatCompletion

from agent.llm import BadUsage, openai_chat
from agent.llm import anthropic as anthropic_llm
from agent.receipts import Receipt
from tests.conftest import Recorder
from tests.fakes.anthropic_api import FakeAnthropic, MidStreamFailure, Reply

_MESSAGE = {
    "id": "msg_1", "type": "message", "role": "assistant", "model": "m", "content": [],
    "stop_reason": "end_turn", "stop_sequence": None,
}  # fmt: skip
_COMPLETION = {
    "id": "c", "object": "chat.completion", "created": 0, "model": "m",
    "choices": [{"index": 0, "message": {"role": "assistant", "content": "hi"}, "finish_reason": "stop"}],
}  # fmt: skip


@pytest.mark.parametrize("usage", ["90000", 90000, [90000, 1000], "lots"])
def test_a_messages_api_usage_that_is_not_an_object_is_refused_not_counted_as_zero(usage: object) -> None:
    """The SDK builds its models without validating (construct_type): `"usage": "90000"` arrives as a
    str, every getattr of it is None, and None is read as "not reported", 0. A gateway that sends usage
    in any shape but an object answers for free under every daily budget."""
    message = construct_anthropic(type_=Message, value={**_MESSAGE, "usage": usage})
    with pytest.raises(BadUsage):
        anthropic_llm._usage(message.usage)
    builder = anthropic_llm._TurnBuilder()
    start = {"type": "message_start", "message": {**_MESSAGE, "usage": usage}}
    delta = {"type": "message_delta", "delta": {"stop_reason": "end_turn"}, "usage": usage}
    with pytest.raises(BadUsage):
        for event in (start, delta):
            builder.add(construct_anthropic(type_=RawMessageStreamEvent, value=event))


@pytest.mark.parametrize(
    "usage",
    [
        "90000",
        90000,
        {"prompt_tokens": None, "completion_tokens": None, "total_tokens": 10**12},  # only the total, absurd
        {"prompt_tokens": 10, "completion_tokens": 10, "total_tokens": -(10**9)},
        {"prompt_tokens": None, "completion_tokens": None, "total_tokens": 90_000},  # only a total: not 0
    ],
)
def test_a_chat_completions_usage_of_odd_shape_or_absurd_total_is_refused(usage: object) -> None:
    completion = construct_openai(type_=ChatCompletion, value={**_COMPLETION, "usage": usage})
    with pytest.raises(BadUsage):
        openai_chat._usage(completion.usage)


def test_a_chat_completions_usage_as_servers_send_it_is_taken() -> None:
    usage = {"prompt_tokens": 100, "completion_tokens": 20, "total_tokens": 120}
    completion = construct_openai(type_=ChatCompletion, value={**_COMPLETION, "usage": usage})
    taken = openai_chat._usage(completion.usage)
    assert (taken.input_tokens, taken.output_tokens) == (100, 20)


def test_a_stream_whose_cumulative_counts_go_down_is_refused() -> None:
    """message_delta's counts are cumulative (the code says so), so one lower than message_start's is as
    impossible as a negative one; it was taken instead: 90,000 input tokens reported at the start were
    counted as 0 when the last delta said `input_tokens: 0`."""
    builder = anthropic_llm._TurnBuilder()
    start = {"type": "message_start", "message": {**_MESSAGE, "usage": {"input_tokens": 90_000, "output_tokens": 1}}}
    delta = {
        "type": "message_delta",
        "delta": {"stop_reason": "end_turn"},
        "usage": {"input_tokens": 0, "output_tokens": 5, "cache_read_input_tokens": 0},
    }
    with pytest.raises(BadUsage, match="input_tokens"):
        for event in (start, delta):
            builder.add(construct_anthropic(type_=RawMessageStreamEvent, value=event))


def _input(receipt: Receipt | None) -> int:
    assert receipt is not None
    return receipt.input_tokens + receipt.cache_read_tokens + receipt.cache_creation_tokens


async def test_a_question_cancelled_mid_stream_counts_the_input_the_provider_reported(
    make_app, fake_anthropic: FakeAnthropic
) -> None:
    """message_start already reported 90,000 input tokens (billed by the provider) when the asker goes
    away (a closed tab past the reattach grace, Ctrl-C in `agent ask`): the turn never completed, so
    `record_model_call` never ran and the receipt, hence the daily budget, counted 0. Asking and leaving
    just before each answer ends spent the provider's tokens at no cost to the asker's budget."""
    gate = threading.Event()
    text = "EWR had the most departures of the three airports in the year"
    fake_anthropic.script(Reply(text=text, pauses={3: gate}, usage={"input_tokens": 90_000}))
    app = make_app()
    recorder = Recorder()
    task = asyncio.create_task(app.runner.run("Which airport?", on_event=recorder, followups=False))
    try:
        for _ in range(500):
            if recorder.answer_text():
                break
            await asyncio.sleep(0.02)
        assert recorder.answer_text(), recorder.kinds
        task.cancel()
        result = await task
    finally:
        gate.set()
    spent = _input(result.receipt)
    assert spent >= 90_000, f"the receipt counts {spent} input tokens of the 90,000 reported"


async def test_an_attempt_failing_mid_stream_and_retried_counts_both_attempts(
    make_app, fake_anthropic: FakeAnthropic
) -> None:
    """An overload mid-stream is retried: the first attempt's message_start had reported the prompt's
    tokens, and the retry pays for them again. Both count, against a baseline of one clean attempt."""
    fake_anthropic.script(Reply(text="Complete answer."))
    once = await make_app().runner.run("q", followups=False)
    fake_anthropic.reset()
    fake_anthropic.script(MidStreamFailure(), Reply(text="Complete answer."))
    retried = await make_app().runner.run("q", followups=False)
    assert retried.answer == "Complete answer."
    assert _input(once.receipt) > 0
    assert _input(retried.receipt) >= 1.9 * _input(once.receipt), (once.receipt, retried.receipt)

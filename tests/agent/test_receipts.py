"""The receipt: tokens and cost by model from the price list, rows and bytes ClickHouse read, times;
summed per conversation. The pipeline tests drive a whole run (real SDK, fake API, real engine)."""

from __future__ import annotations

import re

import pytest

from agent.llm import Usage
from agent.pricing import load_pricing
from agent.receipts import Receipt
from agent.runner import FinalAnswer, Outcome
from tests.agent.pipeline.test_pipeline import ask, sql
from tests.fakes.anthropic_api import Failure, FakeAnthropic, Reply

ORIGINS = ("Departures per origin", "SELECT origin, count() AS n FROM nycflights13.flights GROUP BY origin")


def test_cost_comes_from_the_price_list_and_an_unknown_model_is_named() -> None:
    prices = load_pricing()
    receipt = Receipt.build(
        usage={
            "claude-sonnet-5-5": (2, Usage(input_tokens=1000, output_tokens=200, cache_read_tokens=5000)),
            "claude-unknown-9": (1, Usage(input_tokens=10, output_tokens=5)),
        },
        prices=prices,
        rounds=2,
        reads=[(336776, 2_694_208), (None, None)],
        first_event_ms=420,
        answer_ms=6200,
    )
    price = prices.models["claude-sonnet-5-5"]
    expected = (1000 * price.input + 200 * price.output + 5000 * price.cache_read) / 1e6
    assert receipt.cost_usd == pytest.approx(expected)
    assert receipt.unpriced_models == ["claude-unknown-9"] and receipt.models[1].cost_usd is None
    assert (receipt.input_tokens, receipt.output_tokens, receipt.cache_read_tokens) == (1010, 205, 5000)
    assert (receipt.queries, receipt.rows_read, receipt.unmeasured_queries) == (2, 336776, 1)
    assert receipt.line() == (
        "claude-sonnet-5-5, claude-unknown-9 · 2 rounds · 1,010 in, 205 out, 5,000 cache read, 0 cache write tokens"
        f" · ≈ ${expected:.4f} + unpriced claude-unknown-9 · 2 queries: 336.8k rows, 2.7 MB read (1 not measured)"
        " · first event 0.4 s, answer 6.2 s"
    )


def test_no_price_at_all_says_so_and_guesses_nothing() -> None:
    receipt = Receipt.build(
        usage={"claude-unknown-9": (1, Usage(input_tokens=10))},
        prices=load_pricing(),
        rounds=1,
        reads=[],
        first_event_ms=None,
        answer_ms=100,
    )
    assert receipt.cost_usd is None and receipt.cost_text() == "cost unknown (no price for claude-unknown-9)"


def test_one_row_read_is_one_row() -> None:
    receipt = Receipt.build(
        usage={"claude-sonnet-5-5": (1, Usage(input_tokens=10))},
        prices=load_pricing(),
        rounds=1,
        reads=[(1, 8)],
        first_event_ms=None,
        answer_ms=100,
    )
    assert "1 query: 1 row, 8 B read" in receipt.line()


def test_a_conversation_sums_its_receipts() -> None:
    one = Receipt.build(
        usage={"claude-sonnet-5-5": (1, Usage(input_tokens=100))},
        prices=load_pricing(),
        rounds=2,
        reads=[(10, 80)],
        first_event_ms=100,
        answer_ms=1000,
    )
    total = Receipt.total([one, one])
    assert total is not None and (total.answers, total.rounds, total.rows_read, total.answer_ms) == (2, 4, 20, 2000)
    assert total.cost_usd == pytest.approx(2 * (one.cost_usd or 0)) and total.models[0].calls == 2
    assert Receipt.total([]) is None


async def test_a_run_carries_its_receipt(make_app, fake_anthropic: FakeAnthropic) -> None:
    fake_anthropic.script(
        Reply(tool_calls=[sql(ORIGINS)]),
        Reply(text="EWR had 120,835 departures [Q1]."),
        Reply(text='["Which carriers fly most from EWR?"]'),
    )
    result, _ = await ask(make_app(), "busiest airport?", followups=True)
    receipt = result.receipt
    assert receipt is not None
    assert [(m.model, m.calls) for m in receipt.models] == [
        ("anthropic:claude-sonnet-5-5", 2),
        ("anthropic:claude-haiku-5-5", 1),
    ]
    m = result.metrics
    main = receipt.models[0]
    assert (main.input_tokens, main.output_tokens) == (m.input_tokens, m.output_tokens)
    assert receipt.input_tokens > m.input_tokens  # the follow-up call counts too
    assert receipt.cost_usd is not None and receipt.cost_usd > 0 and not receipt.unpriced_models
    assert (receipt.queries, receipt.rows_read, receipt.rounds) == (1, 336776, 2)
    assert receipt.bytes_read > 0 and receipt.first_event_ms is not None
    assert receipt.first_event_ms <= receipt.answer_ms <= m.total_ms
    assert FinalAnswer.of(result).model_dump(mode="json")["receipt"]["rows_read"] == 336776
    assert result.summary()["receipt"]["queries"] == 1


async def test_an_unpriced_model_is_reported_as_such(make_app, fake_anthropic: FakeAnthropic) -> None:
    fake_anthropic.script(Reply(text="Hello."))
    result, _ = await ask(make_app(agent_model="claude-unknown-9"), "hi")
    assert result.receipt is not None and result.receipt.cost_usd is None
    assert result.receipt.unpriced_models == ["anthropic:claude-unknown-9"] and result.receipt.queries == 0


async def test_on_a_server_the_receipt_reads_clickhouses_summary(
    make_app, fake_anthropic: FakeAnthropic, server_db
) -> None:
    """The same run over clickhouse-connect (the HTTP fake serves real ClickHouse results and its
    X-ClickHouse-Summary): the rows and bytes read come from the server's own statistics."""
    fake_anthropic.script(Reply(tool_calls=[sql(ORIGINS)]), Reply(text="EWR had 120,835 departures [Q1]."))
    result, _ = await ask(make_app(database=server_db), "busiest airport?")
    assert result.receipt is not None and result.receipt.unmeasured_queries == 0
    assert (result.receipt.queries, result.receipt.rows_read) == (1, 336776) and result.receipt.bytes_read > 0
    assert result.figures is not None and result.figures.verified == 1


def test_counts_take_their_unit_after_rounding() -> None:
    from agent.receipts import _count

    assert [_count(v) for v in (9_999, 10_000, 999_949, 999_999, 1_234_567)] == [
        "9,999",
        "10.0k",
        "999.9k",
        "1.0M",
        "1.2M",
    ]


async def test_a_run_that_failed_says_there_was_no_answer(make_app, fake_anthropic: FakeAnthropic) -> None:
    """After an error the receipt said "answer 44.7 s": the time is when the run ended, not an answer's."""
    fake_anthropic.script(
        Reply(tool_calls=[sql(ORIGINS)]), Failure(400, "invalid_request_error", "messages: something is off")
    )
    result, _ = await ask(make_app(), "busiest airport?")
    assert result.outcome is Outcome.ERROR and result.receipt is not None
    assert not result.receipt.answered and result.receipt.answers == 0
    last = result.receipt.parts()[-1]
    assert re.fullmatch(r"first event \d+\.\d s, no answer \(ended after \d+\.\d s\)", last), last
    assert " answer " not in result.receipt.line().replace("no answer", "")
    total = Receipt.total([result.receipt])
    assert total is not None and total.answers == 0 and "no answer" in total.line()


def test_an_answered_receipt_still_says_answer() -> None:
    receipt = Receipt.build(usage={}, prices=None, rounds=1, reads=[], first_event_ms=None, answer_ms=1500)
    assert receipt.answered and receipt.parts()[-1] == "answer 1.5 s"
    failed = Receipt.build(
        usage={}, prices=None, rounds=1, reads=[], first_event_ms=None, answer_ms=1500, answered=False
    )
    assert failed.parts()[-1] == "no answer (ended after 1.5 s)"
    assert Receipt.total([receipt, failed]).answers == 1  # type: ignore[union-attr]

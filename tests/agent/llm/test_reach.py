"""A dead model API fails fast: a refused connection or a failed DNS lookup is tried twice (the SDK's one
retry), not once per retry of every layer (16 attempts, 37 s of spinner before). What is worth retrying is
still retried: overloaded and rate limited replies (the SDK), a connection dropped mid-stream (ours).
Attempts are counted where the OS is asked: the event loop's connect and address lookup."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Iterator
from typing import Any

import pytest

from agent.llm import (
    AnthropicProvider,
    LLMClient,
    LLMUnavailable,
    ModelUnreachable,
    OpenAIProvider,
    anthropic_client,
    openai_client,
)
from agent.llm.reach import CONNECT_RETRIES
from tests.fakes import openai_api
from tests.fakes.anthropic_api import CutOff, Failure, FakeAnthropic, Reply
from tests.fakes.clients import anthropic_provider, openai_provider
from tests.fakes.openai_api import FakeOpenAI

RETRIES = 4  # AGENT_LLM_MAX_RETRIES's default: the SDK's retries and, before, the provider's on top
REQUEST = {"max_tokens": 100, "messages": [{"role": "user", "content": "How many flights?"}]}
SONNET, OPUS = "claude-sonnet-5-5", "claude-opus-5"


class OsCalls:
    """Connections and address lookups the event loop was asked for (the OS boundary both SDKs' aiohttp
    transports go through)."""

    def __init__(self) -> None:
        self.connects = self.lookups = 0

    def install(self, monkeypatch: pytest.MonkeyPatch) -> None:
        loop = asyncio.get_running_loop()
        connect, lookup = loop.sock_connect, loop.getaddrinfo

        async def counted_connect(*args: Any, **kwargs: Any) -> Any:
            self.connects += 1
            return await connect(*args, **kwargs)

        async def counted_lookup(*args: Any, **kwargs: Any) -> Any:
            self.lookups += 1
            return await lookup(*args, **kwargs)

        monkeypatch.setattr(loop, "sock_connect", counted_connect)
        monkeypatch.setattr(loop, "getaddrinfo", counted_lookup)


@pytest.fixture
def closed_port() -> Iterator[str]:
    """A loopback address where nothing listens: the OS refuses every connection at once."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    yield f"http://127.0.0.1:{port}"


async def _ignore(*_: Any) -> None:
    return None


def _anthropic(base_url: str) -> AnthropicProvider:
    client = anthropic_client(api_key="k", base_url=base_url, max_retries=RETRIES, timeout_s=10)
    return AnthropicProvider(client, stream_retries=RETRIES, retry_base_delay_s=0.01)


def _openai(base_url: str) -> OpenAIProvider:
    client = openai_client(api_key="k", base_url=f"{base_url}/v1", max_retries=RETRIES, timeout_s=10)
    return OpenAIProvider(client, stream_retries=RETRIES, retry_base_delay_s=0.01)


@pytest.mark.parametrize("make", [_anthropic, _openai], ids=["messages", "chat_completions"])
@pytest.mark.parametrize("streamed", [True, False])
async def test_a_refused_connection_is_tried_twice(
    closed_port: str, monkeypatch: pytest.MonkeyPatch, make: Any, streamed: bool
) -> None:
    calls = OsCalls()
    calls.install(monkeypatch)
    provider = make(closed_port)
    try:
        with pytest.raises(ModelUnreachable, match=r"Could not reach the model API \(connection refused\)"):
            if streamed:
                await provider.stream("m", REQUEST, _ignore, _ignore)
            else:
                await provider.complete("m", REQUEST)
    finally:
        await provider.close()
    assert calls.connects == 1 + CONNECT_RETRIES == 2, f"{calls.connects} attempts (25 before: 5 x 5)"


@pytest.mark.parametrize("make", [_anthropic, _openai], ids=["messages", "chat_completions"])
async def test_a_name_that_does_not_resolve_is_looked_up_twice(monkeypatch: pytest.MonkeyPatch, make: Any) -> None:
    calls = OsCalls()
    calls.install(monkeypatch)
    provider = make("http://model-api.invalid")  # .invalid never resolves (RFC 2606)
    try:
        with pytest.raises(ModelUnreachable, match="could not be resolved"):
            await provider.stream("m", REQUEST, _ignore, _ignore)
    finally:
        await provider.close()
    assert calls.lookups == 2 and calls.connects == 0


async def test_an_unreachable_api_takes_its_other_models_with_it(
    closed_port: str, monkeypatch: pytest.MonkeyPatch, fake_openai: FakeOpenAI
) -> None:
    """Two Claude models on a dead endpoint, then a model on another server: the second Claude model is
    not asked (it is behind the same refused address); the other server answers."""
    fake_openai.script(openai_api.Reply(text="From the other server."))
    calls = OsCalls()
    calls.install(monkeypatch)
    llm = LLMClient({"anthropic": _anthropic(closed_port), "openai": openai_provider(fake_openai)})
    try:
        turn = await llm.stream_turn(model=f"{SONNET},{OPUS},openai:m", on_text=_ignore, on_restart=_ignore, **REQUEST)
    finally:
        await llm.close()
    assert turn.text == "From the other server." and turn.model == "openai:m"
    assert calls.connects == 2 + 1  # the dead API twice, the fake's one new connection
    only_dead = LLMClient({"anthropic": _anthropic(closed_port)})
    try:
        with pytest.raises(ModelUnreachable):
            await only_dead.stream_turn(model=f"{SONNET},{OPUS}", on_text=_ignore, on_restart=_ignore, **REQUEST)
    finally:
        await only_dead.close()


async def test_an_overloaded_api_keeps_the_sdks_retries_and_only_those(fake_anthropic: FakeAnthropic) -> None:
    """Overloaded is worth retrying: the SDK's retries (honouring retry-after), one layer only."""
    fake_anthropic.always(Failure(529, "overloaded_error", "Overloaded"))
    provider = anthropic_provider(fake_anthropic, max_retries=RETRIES)
    try:
        with pytest.raises(LLMUnavailable) as caught:
            await provider.stream(SONNET, REQUEST, _ignore, _ignore)
    finally:
        await provider.close()
    assert not isinstance(caught.value, ModelUnreachable) and caught.value.reason == "overloaded"
    assert len(fake_anthropic.requests) == RETRIES + 1


async def test_a_rate_limited_openai_server_keeps_the_sdks_retries(fake_openai: FakeOpenAI) -> None:
    fake_openai.always(openai_api.rate_limited())
    provider = openai_provider(fake_openai, max_retries=RETRIES)
    try:
        with pytest.raises(LLMUnavailable, match="rate limited"):
            await provider.stream("m", REQUEST, _ignore, _ignore)
    finally:
        await provider.close()
    assert len(fake_openai.requests) == RETRIES + 1


async def test_a_connection_dropped_mid_stream_is_asked_again(
    fake_anthropic: FakeAnthropic, fake_openai: FakeOpenAI
) -> None:
    """The SDKs retry only before a reply starts; a reply cut off by the network is ours to ask again."""
    fake_anthropic.script(CutOff(partial_text="There are "), Reply(text="There are 16 airlines."))
    fake_openai.script(openai_api.CutOff(partial_text="There are "), openai_api.Reply(text="There are 16 airlines."))
    claude, other = anthropic_provider(fake_anthropic), openai_provider(fake_openai)
    restarts: list[str] = []

    async def restart() -> None:
        restarts.append("restart")

    try:
        first = await claude.stream(SONNET, REQUEST, _ignore, restart)
        second = await other.stream("m", REQUEST, _ignore, restart)
    finally:
        await claude.close()
        await other.close()
    assert first.text == second.text == "There are 16 airlines." and restarts == ["restart", "restart"]
    assert len(fake_anthropic.requests) == len(fake_openai.requests) == 2


async def test_model_clients_share_one_verifying_tls_context(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each client read the system's CA bundle again (20-30 ms of CPU, two per app built): now once per
    process, and still the SDKs' verifying default."""
    import ssl

    from agent.llm.anthropic import anthropic_client
    from agent.llm.openai_chat import openai_client
    from agent.llm.reach import tls_context

    loads: list[object] = []
    load = ssl.SSLContext.load_verify_locations

    def counted(self: ssl.SSLContext, *args: Any, **kwargs: Any) -> None:
        loads.append(args)
        load(self, *args, **kwargs)

    monkeypatch.setattr(ssl.SSLContext, "load_verify_locations", counted)
    tls_context.cache_clear()
    options = {"api_key": "k", "base_url": "http://127.0.0.1:9", "max_retries": 0, "timeout_s": 5}
    clients = [anthropic_client(**options) for _ in range(3)] + [openai_client(**options) for _ in range(3)]
    for client in clients:
        await client.close()
    assert len(loads) <= 1
    context = tls_context()
    assert context.verify_mode == ssl.CERT_REQUIRED and context.check_hostname

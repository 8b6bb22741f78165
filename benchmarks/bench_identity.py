"""What knowing who asks costs a web request: the same API call (`GET /api/conversations`, one person's
list of 20) with nobody signing in, with the shared token, with a sign-in proxy's header, and with a
sign-in session (the signed cookie, then the session's row in the state file); and what choosing a
policy costs (`Policies.for_asker` over 50 policies of 20 members each, the asker matching the last).

In one process, through httpx's ASGI transport (no socket), so the figures are the app's own work.

    python -m benchmarks.bench_identity
"""

from __future__ import annotations

import asyncio
import json
import statistics
import tempfile
import time
from base64 import b64encode
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any

import httpx
from itsdangerous import TimestampSigner

from agent.access.policy import Asker, Member, Policies, Policy
from agent.app import AgentApp
from agent.config import load_settings
from agent.llm import LLMClient
from chats.people import Person, person_owner
from chats.state import ChatState
from web.app import create_app
from web.identity import SESSION_COOKIE, SESSION_KEY

REQUESTS = 400
REPEATS = 7
LOCAL = person_owner("local")
SECRET = "bench-signing-key-of-at-least-32-chars!"
ALICE = Person("email:alice@example.com", "Alice", "alice@example.com")
MODES: dict[str, dict[str, Any]] = {
    "nobody signs in": {},
    "shared token": {"agent_web_token": "bench-token"},
    "sign-in proxy header": {
        "agent_web_identity_header": "X-Forwarded-Email",
        "agent_web_identity_proxies": "127.0.0.1",
    },
    "OIDC session cookie": {
        "agent_oidc_issuer": "http://127.0.0.1:9",
        "agent_oidc_client_id": "bench",
        "agent_session_secret": SECRET,
    },
}


async def _per_request_us(client: httpx.AsyncClient, headers: dict[str, str]) -> float:
    started = time.perf_counter()
    for _ in range(REQUESTS):
        response = await client.get("/api/conversations", headers=headers)
        assert response.status_code == 200 and len(response.json()["conversations"]) == 20, response.text
    return (time.perf_counter() - started) / REQUESTS * 1e6


async def _client(
    root: Path, settings: dict[str, Any], stack: AsyncExitStack
) -> tuple[httpx.AsyncClient, dict[str, str]]:
    """A client of an app in this mode, with the headers its person sends, over a state file of their 20."""
    configured = load_settings(
        agent_data_dir=str(root), clickhouse_url="http://127.0.0.1:9/none", anthropic_api_key="unused", **settings
    )
    agent = AgentApp.start(configured, llm=LLMClient.from_settings(configured))
    stack.push_async_callback(agent.close)
    state = ChatState(root / "state.sqlite3")
    stack.callback(state.close)
    signed_in = configured.web_sign_in
    for number in range(20):
        await state.conversations.create_conversation(f"question {number}", owner=ALICE.owner if signed_in else LOCAL)
    headers = {"Authorization": "Bearer bench-token"} if "agent_web_token" in settings else {}
    if "agent_web_identity_header" in settings:
        headers = {"X-Forwarded-Email": ALICE.email or ""}
    if "agent_oidc_issuer" in settings:
        session_id = await state.sessions.start(ALICE, 3600)
        cookie = TimestampSigner(SECRET).sign(b64encode(json.dumps({SESSION_KEY: session_id}).encode())).decode()
        headers = {"Cookie": f"{SESSION_COOKIE}={cookie}"}
    transport = httpx.ASGITransport(app=create_app(agent, state), client=("127.0.0.1", 40000))
    client = await stack.enter_async_context(httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1"))
    return client, headers


async def _modes(root: Path) -> dict[str, float]:
    """Each mode's median over REPEATS rounds; the modes take turns within a round, so a busy machine
    slows them alike."""
    async with AsyncExitStack() as stack:
        clients = {
            name: await _client(root / str(n), settings, stack) for n, (name, settings) in enumerate(MODES.items())
        }
        rounds: dict[str, list[float]] = {name: [] for name in MODES}
        for _ in range(REPEATS):
            for name, (client, headers) in clients.items():
                rounds[name].append(await _per_request_us(client, headers))
        return {name: statistics.median(times) for name, times in rounds.items()}


def _policy_us() -> float:
    policies = Policies(
        tuple(
            Policy(f"p{p}", members=tuple(Member("email", f"user{p}-{m}@example.com") for m in range(20)))
            for p in range(50)
        ),
        Policy("no-data"),
    )
    asker = Asker(email="user49-19@example.com", groups=frozenset({"a", "b"}))
    assert policies.for_asker(asker).name == "p49"
    calls = 20_000
    means = []
    for _ in range(REPEATS):
        started = time.perf_counter()
        for _ in range(calls):
            policies.for_asker(asker)
        means.append((time.perf_counter() - started) / calls * 1e6)
    return statistics.median(means)


def run() -> dict[str, float]:
    with tempfile.TemporaryDirectory() as folder:
        figures = asyncio.run(_modes(Path(folder)))
    figures["policy selection (50 policies x 20 members, last matches)"] = _policy_us()
    return figures


def report(figures: dict[str, float]) -> None:
    baseline = figures["nobody signs in"]
    print("\nWho asks: per request of GET /api/conversations (median of means), and choosing a policy")
    for name, micros in figures.items():
        print(f"  {name:<58} {micros:8.0f} µs   {micros / baseline:5.2f}x a request without sign-in")


if __name__ == "__main__":
    report(run())

"""What signing in costs each request: the session check (the signed cookie, then the server-side session
in the state file) and policy selection (the first of the file's policies whose members include the
person), as a ratio to the same request where nobody signs in (local use), all measured in one run.

The web app runs in this process under httpx's ASGI transport (no sockets, so the figures are the app's
and the client's work alone), over a state file with 20 conversations for each person. Three servers:

- local: no sign-in, no token (the baseline);
- session: OpenID Connect sign-in, the request carrying a session cookie as the callback makes it;
- session + policies: the same, with 50 policies (group and email members) that the person matches none
  of, so selection reads them all and falls to the default: the worst case.

Two requests on each: GET /api/conversations (the sidebar's list) and GET /api/me (which also selects the
policy where there are policies). Each figure is the fastest of ROUNDS rounds of REQUESTS requests, the
servers taking turns, in CPU time of the whole process (the state file is read in worker threads) and in
wall time. Policy selection alone (`Policies.for_asker`) is timed too, per call.

    python -m benchmarks.bench_sign_in
"""

from __future__ import annotations

import asyncio
import json
import tempfile
import time
from base64 import b64encode
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import Any

import httpx
from itsdangerous import TimestampSigner

from agent.access.files import PolicyFile
from agent.access.policy import Asker, Member, Policies, Policy
from agent.app import AgentApp
from agent.config import Settings
from chats.people import LOCAL, Person, person_owner
from chats.state import ChatState
from tests.timing import cpu_per_call_s
from web.app import create_app
from web.identity import SESSION_COOKIE, SESSION_KEY

REQUESTS = 300
ROUNDS = 7
CONVERSATIONS = 20
POLICIES = 50
SECRET = "a-benchmark-signing-key-of-at-least-32-chars"
ALICE = Person(id="email:alice@example.com", name="Alice", email="alice@example.com", groups=frozenset({"ewr"}))
ROUTES = ("/api/conversations", "/api/me")


@dataclass
class Server:
    name: str
    client: httpx.AsyncClient
    best_cpu_s: dict[str, float]
    best_wall_s: dict[str, float]


def many_policies() -> Policies:
    """POLICIES policies over one table, each naming two groups and an email; Alice is in none of them."""
    policies = tuple(
        Policy(
            f"team-{n}",
            MappingProxyType({"nycflights13.flights": f"origin = 'X{n}'"}),
            members=(Member("group", f"group-{n}"), Member("group", f"other-{n}"), Member("email", f"p{n}@x.com")),
        )
        for n in range(POLICIES)
    )
    return Policies(policies, Policy("no-data"))


@asynccontextmanager
async def served(name: str, scratch: Path, *, sign_in: bool, policies: Policies | None) -> AsyncIterator[Server]:
    folder = scratch / name
    folder.mkdir()
    values: dict[str, Any] = {"agent_data_dir": folder, "anthropic_api_key": "benchmark"}
    if sign_in:
        values |= {"agent_oidc_issuer": "http://127.0.0.1:9", "agent_oidc_client_id": "analyst"}
        values |= {"agent_oidc_client_secret": "secret", "agent_session_secret": SECRET}
    agent = AgentApp.start(Settings(_env_file=None, **values))  # type: ignore[call-arg]
    if policies is not None:
        agent.access = PolicyFile(folder / "access.yaml", policies)  # as AGENT_ACCESS_FILE loads them
    state = ChatState(folder / "state.sqlite3")
    owner = person_owner(ALICE.id) if sign_in else person_owner(LOCAL)
    for n in range(CONVERSATIONS):
        await state.conversations.create_conversation(f"How many flights left EWR in month {n}?", owner=owner)
    cookies = {SESSION_COOKIE: await _cookie(state)} if sign_in else {}
    transport = httpx.ASGITransport(app=create_app(agent, state))
    try:
        async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1", cookies=cookies) as client:
            yield Server(name, client, {}, {})
    finally:
        await agent.close()
        state.close()


async def _cookie(state: ChatState) -> str:
    """The cookie the callback sets: the session id, signed as Starlette's SessionMiddleware signs it."""
    session_id = await state.sessions.start(ALICE, 3600)
    return TimestampSigner(SECRET).sign(b64encode(json.dumps({SESSION_KEY: session_id}).encode())).decode()


async def _round(server: Server, route: str) -> None:
    cpu, wall = time.process_time(), time.perf_counter()
    for _ in range(REQUESTS):
        response = await server.client.get(route)
        if response.status_code != 200:
            raise SystemExit(f"{server.name} {route}: {response.status_code} {response.text[:200]}")
    cpu_s, wall_s = (time.process_time() - cpu) / REQUESTS, (time.perf_counter() - wall) / REQUESTS
    server.best_cpu_s[route] = min(server.best_cpu_s.get(route, float("inf")), cpu_s)
    server.best_wall_s[route] = min(server.best_wall_s.get(route, float("inf")), wall_s)


async def _measure() -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as scratch:
        async with AsyncExitStack() as stack:
            servers = [
                await stack.enter_async_context(served("local", Path(scratch), sign_in=False, policies=None)),
                await stack.enter_async_context(served("session", Path(scratch), sign_in=True, policies=None)),
                await stack.enter_async_context(
                    served("session + policies", Path(scratch), sign_in=True, policies=many_policies())
                ),
            ]
            for server in servers:  # warm: imports, the first connection to each state file
                for route in ROUTES:
                    await server.client.get(route)
            for _ in range(ROUNDS):
                for route in ROUTES:
                    for server in servers:
                        await _round(server, route)
    policies, asker = many_policies(), Asker(email=ALICE.email, groups=ALICE.groups)
    selection_s = cpu_per_call_s(lambda: policies.for_asker(asker))
    return {"servers": servers, "selection_s": selection_s}


def run() -> dict[str, Any]:
    measured = asyncio.run(_measure())
    servers: list[Server] = measured["servers"]
    base = servers[0]
    figures: dict[str, Any] = {"policy_selection_us": measured["selection_s"] * 1e6, "routes": {}}
    for route in ROUTES:
        rows = {}
        for server in servers:
            rows[server.name] = {
                "cpu_us": server.best_cpu_s[route] * 1e6,
                "wall_us": server.best_wall_s[route] * 1e6,
                "cpu_ratio": server.best_cpu_s[route] / base.best_cpu_s[route],
                "wall_ratio": server.best_wall_s[route] / base.best_wall_s[route],
            }
        figures["routes"][route] = rows
    base_me = base.best_cpu_s["/api/me"] * 1e6
    figures["policy_selection_ratio"] = figures["policy_selection_us"] / base_me
    return figures


def report(figures: dict[str, Any]) -> None:
    print(f"\nbench_sign_in: what sign-in costs a request ({REQUESTS} requests, best of {ROUNDS} rounds, in-process)")
    print(f"{'request':<20} {'server':<20} {'CPU/request':>12} {'ratio':>6} {'wall/request':>13} {'ratio':>6}")
    for route, rows in figures["routes"].items():
        for name, row in rows.items():
            print(
                f"{route:<20} {name:<20} {row['cpu_us']:>10.0f}us {row['cpu_ratio']:>6.2f} "
                f"{row['wall_us']:>11.0f}us {row['wall_ratio']:>6.2f}"
            )
    print(
        f"policy selection alone ({POLICIES} policies, no match): {figures['policy_selection_us']:.1f}us a call, "
        f"{figures['policy_selection_ratio']:.3f} of a GET /api/me without sign-in"
    )


if __name__ == "__main__":
    report(run())

"""The real `agent serve` process (web chat and Slack bot on one port and one state file) against an outside
review's attacks: /metrics, which counts the Slack side, needs the web token; a web client hanging up
mid-body is neither logged as a crash nor counted as a 5xx."""

from __future__ import annotations

import asyncio
from pathlib import Path

import httpx

from tests.end_to_end.test_web_contain_process import (  # noqa: F401 (fixtures)
    TOKEN,
    WEB,
    Serving,
    ask_in_slack,
    engine_data,
    served_model,
    until_stored,
)
from tests.fakes import slack_events as events
from tests.fakes.anthropic_api import FakeAnthropic
from tests.fakes.slack_api import FakeSlack


def sample(metrics: str, name: str, **labels: str) -> float:
    for line in metrics.splitlines():
        if line.startswith(name + "{") and all(f'{k}="{v}"' in line for k, v in labels.items()):
            return float(line.rsplit(" ", 1)[1])
    return 0.0


async def test_a_client_without_the_token_cannot_watch_the_slack_side_and_a_hang_up_is_no_crash(
    served_model: FakeAnthropic,  # noqa: F811
    fake_slack: FakeSlack,
    engine_data: Path,  # noqa: F811
    tmp_path: Path,
) -> None:
    """1. /metrics, on the web's port and without the token, counts the Slack side: a private channel's
    question shows up as a Slack run, its events and its answer. The web API answers a Slack id as one
    never seen, even to a token holder; /metrics tells anyone that (and when) Slack asked.
    2. A web client (with the token) that hangs up while sending its question's body: the process logs
    "Exception in ASGI application" with a ClientDisconnect traceback, and counts a 5xx."""
    env = {
        "ANTHROPIC_BASE_URL": served_model.base_url,
        "CLICKHOUSE_URL": f"chdb://{engine_data}",
        "SLACK_BOT_TOKEN": fake_slack.bot_token,
        "SLACK_SIGNING_SECRET": events.SIGNING_SECRET,
        "SLACK_API_URL": fake_slack.base_url,
        "AGENT_WEB_URL": WEB,
    }
    served = Serving(tmp_path, "serve", env)
    try:
        await served.ready()
        async with httpx.AsyncClient(base_url=served.url, timeout=30) as stranger:  # no token
            before = (await stranger.get("/metrics")).text
            link = await ask_in_slack(served, fake_slack)
            async with httpx.AsyncClient(
                base_url=served.url, timeout=30, headers={"Authorization": f"Bearer {TOKEN}"}
            ) as web:
                await until_stored(web, link.removeprefix(f"{WEB}/queries/"))
            after = (await stranger.get("/metrics")).text

            port = int(served.url.rsplit(":", 1)[1])
            _, writer = await asyncio.open_connection("127.0.0.1", port)
            writer.write(
                (
                    "POST /api/chat HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer " + TOKEN + "\r\n"
                    "Content-Type: application/json\r\nContent-Length: 1000\r\n\r\n" + '{"message": "Which'
                ).encode()
            )
            await writer.drain()
            writer.close()
            await asyncio.sleep(1.0)
            at_last = (await stranger.get("/metrics")).text
            refused = await stranger.get("/metrics")
            async with httpx.AsyncClient(
                base_url=served.url, timeout=30, headers={"Authorization": f"Bearer {TOKEN}"}
            ) as holder:
                counted = (await holder.get("/metrics")).text
    finally:
        report = served.finish()
    slack_runs = sample(after, "agent_runs_total", interface="slack") - sample(
        before, "agent_runs_total", interface="slack"
    )
    failures = []
    if slack_runs or sample(after, "agent_slack_events_total") > sample(before, "agent_slack_events_total"):
        failures.append("a client without the token saw the private channel's question counted in /metrics")
    if "Exception in ASGI application" in report or "ClientDisconnect" in report:
        failures.append("a client that hung up mid-body was logged as a crash with a traceback")
    if sample(at_last, "agent_web_requests_total", route="/api/chat", status="5xx") > 0:
        failures.append("a client that hung up mid-body was counted as a 5xx")
    if refused.status_code != 401:
        failures.append(f"/metrics answered {refused.status_code} without the token")
    if sample(counted, "agent_web_requests_total", route="/api/chat", status="5xx") > 0:
        failures.append("a client that hung up mid-body was counted as a 5xx (read with the token)")
    if sample(counted, "agent_web_requests_total", route="/api/chat", status="4xx") != 1:
        failures.append("a client that hung up mid-body was not counted as a client-side outcome")
    if sample(counted, "agent_runs_total", interface="slack") < 1:
        failures.append("the token holder (Prometheus) does not see the Slack run")
    assert not failures, failures

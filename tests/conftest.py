"""Shared fixtures: one demo database per test session, loaded by the code `make demo` runs.

chdb allows one data directory per process, so every test that touches ClickHouse uses this one.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from agent.app import AgentApp
from agent.config import Settings
from agent.db import Database, open_database
from agent.metrics import Metrics
from tests.demo_data import copy_demo
from tests.fakes.anthropic_api import FakeAnthropic
from tests.fakes.clickhouse_http import FakeClickHouse, default_users
from tests.fakes.clients import make_llm
from tests.fakes.openai_api import FakeOpenAI
from tests.fakes.slack_api import FakeSlack, FakeSocketMode
from tests.oidc.provider import OidcProvider, running_provider
from tests.postgres import PostgresServer, running_postgres

# Runs for seconds on one core and stays under the row limit: long enough to watch and cancel.
HEAVY = "SELECT count() FROM numbers(400000000) WHERE sipHash64(number) % 7 = 3"
SERVER_PASSWORD = "password"
DEMO_COUNTS = {
    "airlines": 16,
    "airports": 1458,
    "planes": 3322,
    "weather": 26115,
    "flights": 336776,
    "aircraft_registrations": 3769,  # every version: 3,322 registrations (agent/db/demo.py)
}


ENV_PREFIXES = (
    "CLICKHOUSE_",
    "ANTHROPIC_",
    "OPENAI_",
    "AWS_REGION",
    "CLOUD_ML_REGION",
    "AGENT_",
    "SLACK_",
    "MAX_",
    "EXPORT_",
    "SCHEMA_",
    "LOG_",
    "CHART_",
    "OTEL_",  # traces (agent/tracing.py): a developer's collector is not the tests'
)


@pytest.fixture(scope="session", autouse=True)
def _clean_environment() -> Iterator[None]:
    """No setting leaks in from the developer's shell: cleared before any settings are built."""
    with pytest.MonkeyPatch.context() as patch:
        for name in list(os.environ):
            if name.startswith(ENV_PREFIXES):
                patch.delenv(name)
        yield


@pytest.fixture(scope="session", autouse=True)
def _one_tls_context_for_test_clients() -> Iterator[None]:
    """The tests' own httpx clients (and Authlib's) talk plain HTTP to loopback, yet httpx builds a
    verifying TLS context for each, reading the CA bundle: 14% of the web tests' CPU (py-spy). Clients
    made with the defaults share one; any other TLS option is built as asked."""
    import httpx._transports.default as transports

    build = transports.create_ssl_context
    shared = build()

    def create(verify: Any = True, cert: Any = None, trust_env: bool = True) -> Any:
        return shared if (verify, cert, trust_env) == (True, None, True) else build(verify, cert, trust_env)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(transports, "create_ssl_context", create)
        yield


@pytest.fixture(scope="session")
def data_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("agent-data")
    copy_demo(tmp_path_factory, path / "clickhouse")
    return path


@pytest.fixture(scope="session")
def cli_data_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Demo data for commands run in-process (`agent sql`, `agent evals`): each command starts its
    own engine, and an engine process cannot share a data directory with the session's."""
    path = tmp_path_factory.mktemp("cli-data")
    copy_demo(tmp_path_factory, path / "clickhouse")
    return path


# A chart's PNG renders in a process of its own, which a loaded 2-core machine may hold for a minute: the
# tests' limit is generous unless a test is about the limit itself (what they assert is never the time).
TEST_CHART_RENDER_TIMEOUT_S = 150.0


def make_settings(**values: Any) -> Settings:
    """Settings from these values only: no environment (cleared above), no .env file."""
    values.setdefault("chart_render_timeout_s", TEST_CHART_RENDER_TIMEOUT_S)
    return Settings(_env_file=None, **values)  # type: ignore[call-arg]


# Fixed, so no test's page load asks the model to write them (tests/agent/suggestions/test_examples.py covers that).
EXAMPLE_QUESTIONS = [
    "Which NYC airport had the most departures in 2013?",
    "Which carriers had the worst average arrival delay?",
    "How did delays change month by month?",
]


@pytest.fixture(scope="session")
def settings(data_dir: Path) -> Settings:
    return make_settings(
        agent_data_dir=data_dir, anthropic_api_key="test-key", agent_example_questions=EXAMPLE_QUESTIONS
    )


@pytest.fixture(autouse=True)
def _isolated_environment(data_dir: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Settings read by code under test come from the test data dir, never the developer's shell."""
    for name in list(os.environ):
        if name.startswith(ENV_PREFIXES):
            monkeypatch.delenv(name)
    monkeypatch.setenv("AGENT_DATA_DIR", str(data_dir))
    monkeypatch.chdir(data_dir)  # so no developer .env is read
    yield


@pytest.fixture(scope="session")
async def db(settings: Settings) -> AsyncIterator[Database]:
    database = open_database(settings)
    yield database
    await database.close()


@pytest.fixture(scope="session")
def clickhouse_fake(tmp_path_factory: pytest.TempPathFactory) -> Iterator[FakeClickHouse]:
    """A ClickHouse server for the server backend: the HTTP fake over demo data of its own, with the agent
    user docker/clickhouse/agent-user.xml ships."""
    path = copy_demo(tmp_path_factory, tmp_path_factory.mktemp("clickhouse-server") / "clickhouse")
    with FakeClickHouse(path, default_users(SERVER_PASSWORD)).start() as server:
        yield server


@pytest.fixture(scope="session")
async def server_db(clickhouse_fake: FakeClickHouse) -> AsyncIterator[Database]:
    database = open_database(make_settings(clickhouse_url=clickhouse_fake.url("agent", "nycflights13")))
    yield database
    await database.close()


@pytest.fixture(params=["embedded", "server"])
def engine_db(request: pytest.FixtureRequest) -> Database:
    """The agent's database on each engine in turn: the embedded engine, and a server (the HTTP fake)."""
    return request.getfixturevalue("db" if request.param == "embedded" else "server_db")


# --- the model: the real SDK against a fake Messages API over HTTP ---


@pytest.fixture(scope="session")
def fake_anthropic_server() -> Iterator[FakeAnthropic]:
    server = FakeAnthropic().start()
    yield server
    server.stop()


@pytest.fixture
def fake_anthropic(fake_anthropic_server: FakeAnthropic) -> Iterator[FakeAnthropic]:
    fake_anthropic_server.reset()
    yield fake_anthropic_server
    fake_anthropic_server.reset()


# --- an OpenAI-compatible model server: the real openai SDK against a fake Chat Completions API ---


@pytest.fixture(scope="session")
def fake_openai_server() -> Iterator[FakeOpenAI]:
    server = FakeOpenAI().start()
    yield server
    server.stop()


@pytest.fixture
def fake_openai(fake_openai_server: FakeOpenAI) -> Iterator[FakeOpenAI]:
    fake_openai_server.reset()
    yield fake_openai_server
    fake_openai_server.reset()


# --- Slack: the real SDKs against a fake Web API (and Socket Mode) over HTTP ---


@pytest.fixture(scope="session")
def fake_slack_server() -> Iterator[FakeSlack]:
    socket_mode = FakeSocketMode().start()
    server = FakeSlack(socket_mode=socket_mode).start()
    yield server
    server.stop()
    socket_mode.stop()


@pytest.fixture
def fake_slack(fake_slack_server: FakeSlack) -> Iterator[FakeSlack]:
    fake_slack_server.reset()
    assert fake_slack_server.socket_mode is not None
    fake_slack_server.socket_mode.reset()
    yield fake_slack_server
    if fake_slack_server.scopes == fake_slack_server.installed_scopes:
        # Every call the bot made in this test is allowed by the manifest in docs/slack.md.
        refused = [(c.method, c.response.get("needed")) for c in fake_slack_server.scope_refusals()]
        assert not refused, f"the manifest lacks scopes these calls need: {refused}"
    # Slack answers a call past its method's tier with 429, and an app that keeps going past them gets
    # throttled harder; the bot's budget (bots/slack/api_tiers.py) must keep it within them unless a test
    # drives it past them on purpose.
    over = fake_slack_server.over_tiers()
    assert not over, f"the bot went past Slack's rate-limit tiers: {over}"
    fake_slack_server.reset()


# --- OpenID Connect: a real provider (panva's oidc-provider on Node.js), one per worker ---


@pytest.fixture(scope="session")
def oidc_provider() -> Iterator[OidcProvider]:
    """Its `issuer` URL; a test registers its own client (`register_client`). Skips, saying why, without
    Node.js or the npm packages (never in CI: see tests/oidc/provider.py)."""
    with running_provider() as provider:
        yield provider


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[PostgresServer]:
    """A PostgreSQL server of this xdist worker's own; `new_database()` gives a test an empty database.
    Skips, saying why, without PostgreSQL's binaries (never in CI: see tests/postgres.py)."""
    with running_postgres() as server:
        yield server


@pytest.fixture
def metrics() -> Metrics:
    return Metrics(CollectorRegistry())


@pytest.fixture
async def make_app(
    settings: Settings, db: Database, fake_anthropic: FakeAnthropic, fake_openai: FakeOpenAI, metrics: Metrics
) -> AsyncIterator[Callable[..., AgentApp]]:
    """An AgentApp on the demo data and the fake models (`anthropic:` on the Messages API fake, `openai:` on the
    Chat Completions fake); keyword overrides change settings."""
    apps: list[AgentApp] = []

    def build(database: Database | None = None, **overrides: Any) -> AgentApp:
        # Validated like real settings (a token becomes a SecretStr, bounds are checked).
        configured = make_settings(
            **{**settings.model_dump(), "anthropic_base_url": fake_anthropic.base_url, **overrides}
        )
        llm = make_llm(fake_anthropic, openai=fake_openai, cooldown_s=configured.agent_model_cooldown_s)
        app = AgentApp.start(configured, llm=llm, db=database or db, metrics=metrics)
        apps.append(app)
        return app

    yield build
    for app in apps:
        await app.llm.close()  # the database is the session's; only the model client is the app's


class Recorder:
    """Collects the events of one run."""

    def __init__(self) -> None:
        self.events: list[Any] = []

    async def __call__(self, event: Any) -> None:
        self.events.append(event)

    def of(self, kind: str) -> list[Any]:
        return [e for e in self.events if e.type == kind]

    @property
    def kinds(self) -> list[str]:
        return [e.type for e in self.events]

    def answer_text(self) -> str:
        text = ""
        for event in self.of("answer"):
            text = "" if event.restart else text + event.text
        return text


async def until_running(db: Database, task: asyncio.Task[Any] | None = None, *, within_s: float = 30) -> list[str]:
    """Tags of the agent's queries once at least one runs in the engine. A loaded machine can take
    seconds to check and start a query; fail with what happened rather than time out blind, and
    cancel `task` then, so no heavy query is left running for the next test."""
    deadline = time.monotonic() + within_s
    try:
        while time.monotonic() < deadline:
            if running := await asyncio.wait_for(db.running_queries(), 5):
                return running
            if task is not None and task.done():
                outcome = task.exception() or task.result()
                raise AssertionError(f"the work ended before its query was seen running: {outcome!r}")
            await asyncio.sleep(0.05)
        raise AssertionError(f"no query was seen running within {within_s:g} s")
    except BaseException:
        if task is not None:
            task.cancel()
        raise

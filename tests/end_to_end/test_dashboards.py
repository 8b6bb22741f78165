"""The Grafana dashboard and the Prometheus alert rules against the real app and a real Prometheus.

The app is served on a real socket, a real Prometheus (Debian's; skipped, saying why, without one)
scrapes it every second with deploy/prometheus's config and rules, the fake model answers two questions
through the web API, and then every panel's and every alert's expression is evaluated through
Prometheus's HTTP API: each must return data, and each metric selector in it must match series.
"""

from __future__ import annotations

import asyncio
import importlib.util
import json
import math
import re
import shutil
import socket
import subprocess
import time
from collections.abc import AsyncIterator, Callable, Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from agent.config import Settings
from agent.db import Database
from agent.metrics import Metrics
from chats.state import ChatState
from evals.metrics import export_eval_metrics
from process.evals_job import run_eval_job
from tests.evals_helpers import HALF_WRONG, RIGHT, SUITE, answer_cases, job_settings, write_suite
from tests.fakes.anthropic_api import FakeAnthropic, Reply
from tests.web_helpers import WebApps, chat

ROOT = Path(__file__).resolve().parents[2]
DASHBOARD = ROOT / "deploy" / "grafana" / "dashboards" / "agent.json"
GENERATOR = ROOT / "deploy" / "grafana" / "generate.py"
PROMETHEUS_CONFIG = ROOT / "deploy" / "prometheus" / "prometheus.yml"
RULES = ROOT / "deploy" / "prometheus" / "alerts.yml"
RULE_TESTS = ROOT / "deploy" / "prometheus" / "alerts.test.yml"

PROMETHEUS = shutil.which("prometheus") or ("/usr/bin/prometheus" if Path("/usr/bin/prometheus").exists() else None)
PROMTOOL = shutil.which("promtool")
NO_PROMETHEUS = "no Prometheus found (Debian: apt-get install prometheus; .ci/run installs it when it runs as root)"

# Grafana's variables, as a small range over seconds-old data.
GRAFANA_VARIABLES = {"$__rate_interval": "1m", "$__range": "5m", "$__interval": "15s"}
SELECTOR = re.compile(r"\b(agent_[a-z0-9_]+)(\{[^}]*\})?")
# A comparison against a number: the alert's threshold. With `bool` it keeps every series (as 0 or 1).
THRESHOLD = re.compile(r"\s(>=|<=|==|!=|>|<)\s+(?=-?\d)")
# Series a web question cannot create: Slack's (the questions come through the web) and failed model calls.
QUIET = re.compile(r"^agent_slack_|^agent_llm_calls_total\{status=\"error\"\}$")
SUFFIXES = {"counter": ("_total", "_created"), "histogram": ("_bucket", "_count", "_sum", "_created")}

TOKEN = "metrics-s3cret"
AVG_DELAY = "SELECT round(avg(arr_delay), 2) FROM nycflights13.flights"


def sql(question: str, text: str) -> tuple[str, dict[str, Any]]:
    return ("execute_sql", {"queries": [{"question": question, "sql": text}]})


def a_question_with_a_bit_of_everything() -> list[Reply]:
    """A think step, a failed query (code 47), its fix, the fix again (reused: a guard), an answer, follow-ups."""
    return [
        Reply(
            tool_calls=[
                ("think", {"content": "Average the arrival delay."}),
                sql("Average delay", "SELECT avg(arr_delayy) FROM nycflights13.flights"),
            ]
        ),
        Reply(tool_calls=[sql("Average delay", AVG_DELAY)]),
        Reply(tool_calls=[sql("Average delay again", AVG_DELAY)]),
        Reply(text="The average arrival delay was 6.9 minutes [Q2]."),
        Reply(text='["Which carrier was latest?"]'),
    ]


# --- what the dashboard and the rules ask ---


def panel_queries() -> list[tuple[str, str]]:
    """(panel title, expression) for every target of every panel Grafana loads."""
    dashboard = json.loads(DASHBOARD.read_text())
    return [(p["title"], t["expr"]) for p in dashboard["panels"] for t in p.get("targets", [])]


def alert_rules() -> list[dict[str, Any]]:
    groups = yaml.safe_load(RULES.read_text())["groups"]
    return [rule for group in groups for rule in group["rules"] if "alert" in rule]


def every_query() -> list[tuple[str, str]]:
    return panel_queries() + [(f"alert {rule['alert']}", rule["expr"]) for rule in alert_rules()]


def for_prometheus(expr: str) -> str:
    for name, value in GRAFANA_VARIABLES.items():
        expr = expr.replace(name, value)
    return expr


def selectors(expr: str) -> set[str]:
    return {name + (matchers or "") for name, matchers in SELECTOR.findall(expr)}


def exposed_names(metrics: Metrics) -> set[str]:
    """Every series name the app's /metrics can carry, including families with no sample yet."""
    text = generate_latest(metrics.registry).decode()
    names = set()
    for family in text_string_to_metric_families(text):
        names |= {family.name + suffix for suffix in SUFFIXES.get(family.type, ("",))}
    return names


def load_generator() -> Any:
    spec = importlib.util.spec_from_file_location("dashboard_generator", GENERATOR)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# --- without Prometheus ---


def test_the_committed_dashboard_is_what_the_generator_writes() -> None:
    """The cost panels carry agent/pricing.yaml's prices: a price change means regenerating."""
    generator = load_generator()
    assert DASHBOARD.read_text() == generator.render(), "stale: run python deploy/grafana/generate.py"
    cost = [expr for title, expr in panel_queries() if "cost" in title]
    # Sonnet 5.5's $10 per million output tokens (agent/pricing.yaml)
    assert len(cost) == 2 and all('{type="output"}[' in expr and "* 10\n" in expr for expr in cost)


def test_every_panel_says_what_healthy_looks_like() -> None:
    panels = [p for p in json.loads(DASHBOARD.read_text())["panels"] if p["type"] != "row"]
    assert len(panels) >= 15
    for panel in panels:
        assert "Healthy" in panel["description"], panel["title"]
        assert panel["targets"] and all(t["datasource"]["uid"] == "${datasource}" for t in panel["targets"])


def test_every_query_reads_only_metrics_the_app_exposes(metrics: Metrics, tmp_path: Path) -> None:
    state = ChatState(tmp_path / "state.sqlite3")
    export_eval_metrics(metrics, state.eval_runs)  # as the service does (process/service.py)
    exposed = exposed_names(metrics)
    state.close()
    for where, expr in every_query():
        names = {name for name, _ in SELECTOR.findall(expr)}
        assert names and names <= exposed, f"{where}: {sorted(names - exposed)} not in agent/metrics.py"


def test_the_alert_thresholds_can_be_lifted() -> None:
    """Each alert compares against a number, so the test below can read its signal with `bool`."""
    for rule in alert_rules():
        assert THRESHOLD.search(rule["expr"]), rule["alert"]
        assert rule["annotations"]["summary"] and rule["annotations"]["description"], rule["alert"]


@pytest.fixture
async def web_apps(make_app: Callable[..., Any], tmp_path: Path) -> AsyncIterator[WebApps]:
    apps = WebApps(make_app, tmp_path)
    yield apps
    await apps.close()


@pytest.fixture
def web(web_apps: WebApps) -> Callable[..., Any]:
    return web_apps.start


async def test_the_new_metrics_are_recorded_where_the_work_happens(web, fake_anthropic: FakeAnthropic, metrics) -> None:
    url, _ = await web()
    fake_anthropic.script(*a_question_with_a_bit_of_everything())
    async with httpx.AsyncClient(base_url=url, timeout=30) as client:
        events = await chat(client, "What was the average arrival delay?")
        assert (await client.get("/api/conversations/nope")).status_code == 404
        assert (await client.get("/no/such/page")).status_code == 404
        assert (await client.post("/metrics")).status_code == 405
        assert (await client.get("/static/app.js")).status_code == 200

    def value(name: str, **labels: str) -> float | None:
        return metrics.registry.get_sample_value(name, labels)

    assert events[-1].data["result"]["outcome"] == "answered"
    assert value("agent_web_requests_total", route="/api/chat", status="2xx") == 1
    assert value("agent_web_requests_total", route="/api/conversations/{conversation_id}", status="4xx") == 1
    assert value("agent_web_requests_total", route="unmatched", status="4xx") == 1
    assert value("agent_web_requests_total", route="/metrics", status="4xx") == 1
    assert value("agent_web_requests_total", route="/static/{path}", status="2xx") == 1
    assert value("agent_sql_errors_total", code="47") == 1
    assert value("agent_run_first_event_seconds_count", interface="web") == 1
    first_event = value("agent_run_first_event_seconds_sum", interface="web")
    total = value("agent_run_duration_seconds_sum")
    assert first_event is not None and total is not None and 0 < first_event < total


def test_sql_error_codes_stay_a_bounded_label(metrics: Metrics) -> None:
    for code in (None, 47, 123456789, -1):
        metrics.count_sql_error(code)
    counted = {
        s.labels["code"] for f in metrics.registry.collect() for s in f.samples if s.name == "agent_sql_errors_total"
    }
    assert counted == {"none", "47", "other"}


@pytest.mark.skipif(PROMTOOL is None, reason=NO_PROMETHEUS.replace("Prometheus", "promtool"))
def test_the_rules_pass_promtool() -> None:
    assert PROMTOOL is not None
    checked = subprocess.run([PROMTOOL, "check", "rules", str(RULES)], capture_output=True, text=True, timeout=30)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert f"SUCCESS: {len(alert_rules())} rules found" in checked.stdout


@pytest.mark.skipif(PROMTOOL is None, reason=NO_PROMETHEUS.replace("Prometheus", "promtool"))
def test_the_eval_alert_fires_on_a_drop_below_the_recent_level_and_not_otherwise() -> None:
    """promtool's own unit test of the rules (deploy/prometheus/alerts.test.yml): a drop of 30 points fires,
    one of 5 does not, and a run back at the usual level clears it."""
    assert PROMTOOL is not None
    tested = subprocess.run([PROMTOOL, "test", "rules", str(RULE_TESTS)], capture_output=True, text=True, timeout=60)
    assert tested.returncode == 0, tested.stdout + tested.stderr
    assert "SUCCESS" in tested.stdout


# --- with a real Prometheus ---


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


class Prometheus:
    """Debian's Prometheus on a free loopback port, with deploy/prometheus's config scraping `target`
    every second (with the web token from a file, as compose passes it) and evaluating the rules every
    second."""

    def __init__(self, binary: str, target: str, tmp_path: Path, token: str) -> None:
        config = yaml.safe_load(PROMETHEUS_CONFIG.read_text())
        config["global"].update(scrape_interval="1s", evaluation_interval="1s")
        config["rule_files"] = [str(RULES)]
        (job,) = config["scrape_configs"]
        job["static_configs"] = [{"targets": [target]}]
        token_file = tmp_path / "agent_web_token"
        token_file.write_text(token + "\n")  # as an editor or `echo` writes it
        job["authorization"]["credentials_file"] = str(token_file)
        self.config = tmp_path / "prometheus.yml"
        self.config.write_text(yaml.safe_dump(config))
        self.log = tmp_path / "prometheus.log"
        self.url = f"http://127.0.0.1:{free_port()}"
        self._command = [
            binary,
            f"--config.file={self.config}",
            f"--storage.tsdb.path={tmp_path / 'tsdb'}",
            f"--web.listen-address={self.url.removeprefix('http://')}",
        ]
        self._process: subprocess.Popen[bytes] | None = None
        self.client = httpx.AsyncClient(base_url=self.url, timeout=10)

    async def __aenter__(self) -> Prometheus:
        with self.log.open("wb") as log:
            self._process = subprocess.Popen(self._command, stdout=log, stderr=subprocess.STDOUT)
        await self.wait_for(self._ready, "Prometheus to start")
        return self

    async def __aexit__(self, *_: Any) -> None:
        await self.client.aclose()
        if self._process is not None:
            self._process.terminate()
            try:
                self._process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self._process.kill()
                self._process.wait()

    async def _ready(self) -> bool:
        assert self._process is not None
        if self._process.poll() is not None:
            raise AssertionError(f"Prometheus exited: {self.tail()}")
        try:
            return (await self.client.get("/-/ready")).status_code == 200
        except httpx.TransportError:
            return False

    async def query(self, expr: str) -> dict[str, Any]:
        response = await self.client.get("/api/v1/query", params={"query": expr})
        body = response.json()
        assert response.status_code == 200 and body["status"] == "success", f"{expr}: {body.get('error')}"
        return dict(body["data"])

    async def query_range(self, expr: str, start: float, end: float) -> dict[str, Any]:
        """As Grafana asks for a time series panel: every second of [start, end]."""
        params = {"query": expr, "start": start, "end": end, "step": "1s"}
        response = await self.client.get("/api/v1/query_range", params=params)
        body = response.json()
        assert response.status_code == 200 and body["status"] == "success", f"{expr}: {body.get('error')}"
        return dict(body["data"])

    async def value(self, expr: str) -> float | None:
        data = await self.query(expr)
        return float(data["result"][0]["value"][1]) if data["result"] else None

    async def rules(self) -> list[dict[str, Any]]:
        body = (await self.client.get("/api/v1/rules")).json()
        return [rule for group in body["data"]["groups"] for rule in group["rules"]]

    async def wait_for(self, check: Callable[[], Any], what: str, timeout_s: float = 20) -> None:
        deadline = time.monotonic() + timeout_s
        while not await check():
            if time.monotonic() > deadline:
                raise AssertionError(f"timed out waiting for {what}: {self.tail()}")
            await asyncio.sleep(0.2)

    def tail(self) -> str:
        return self.log.read_text(errors="replace")[-2000:] if self.log.exists() else ""


def samples(data: dict[str, Any]) -> Iterator[float]:
    if data["resultType"] == "scalar":
        yield float(data["result"][1])
    for item in data["result"] if data["resultType"] == "vector" else []:
        yield float(item["value"][1])


async def serve_with_evals(web_apps: WebApps, metrics: Metrics) -> tuple[str, ChatState]:
    """The app on a socket, its /metrics serving the eval runs of its state as the service's does."""
    url, _ = await web_apps.start(agent_web_token=TOKEN)  # /metrics needs the token: Prometheus scrapes with it
    state = web_apps.states[-1]
    export_eval_metrics(metrics, state.eval_runs)
    return url, state


@pytest.mark.skipif(PROMETHEUS is None, reason=NO_PROMETHEUS)
async def test_every_panel_and_alert_returns_data_from_a_real_prometheus(
    web_apps: WebApps,
    metrics: Metrics,
    settings: Settings,
    db: Database,
    fake_anthropic: FakeAnthropic,
    tmp_path: Path,
) -> None:
    assert PROMETHEUS is not None
    url, state = await serve_with_evals(web_apps, metrics)
    answer_cases(fake_anthropic, HALF_WRONG)  # one eval run, for the Evals row
    evals = job_settings(settings, fake_anthropic, tmp_path / "job", agent_knowledge_dir="none")
    assert (await run_eval_job(evals, state, suites=[write_suite(tmp_path)], db=db, judge=False)).ran
    async with Prometheus(PROMETHEUS, url.removeprefix("http://"), tmp_path, TOKEN) as prometheus:
        if PROMTOOL is not None:
            checked = subprocess.run([PROMTOOL, "check", "config", str(prometheus.config)], capture_output=True)
            assert checked.returncode == 0, checked.stdout + checked.stderr
        async with httpx.AsyncClient(base_url=url, timeout=30) as stranger:
            assert (await stranger.get("/metrics")).status_code == 401
        async with httpx.AsyncClient(base_url=url, timeout=30, headers={"Authorization": f"Bearer {TOKEN}"}) as client:
            # Two questions, each seen by a scrape, so rates over the window are not zero.
            for asked in (1, 2):
                fake_anthropic.script(*a_question_with_a_bit_of_everything())
                await chat(client, "What was the average arrival delay?")

                async def scraped(n: int = asked) -> bool:
                    return await prometheus.value('sum(agent_runs_total{interface="web"})') == n

                await prometheus.wait_for(scraped, f"a scrape after question {asked}")
        since = time.time()

        async def rules_evaluated() -> bool:
            rules = await prometheus.rules()
            return len(rules) == len(alert_rules()) and all(
                rule["health"] == "ok" and _timestamp(rule["lastEvaluation"]) > since for rule in rules
            )

        await prometheus.wait_for(rules_evaluated, "every alert rule to be evaluated after the questions")

        for where, expr in every_query():
            query = for_prometheus(expr)
            if where.startswith("alert "):
                query = THRESHOLD.sub(lambda m: f" {m.group(1)} bool ", query)
            values = list(samples(await prometheus.query(query)))
            assert values, f"{where}: no data for {query}"
            assert any(not math.isnan(v) for v in values), f"{where}: only NaN from {query}"
            for selector in selectors(query):
                if not QUIET.search(selector):
                    assert (await prometheus.query(selector))["result"], f"{where}: {selector} matches no series"

        # As written, only the SQL alert holds: half of each question's queries failed. Nothing else is wrong,
        # except what the machine does: the event loop's lag is the host's (a loaded 2-core machine wakes the
        # loop late, as a loaded server would), so that alert may hold too without anything being wrong here.
        firing = {rule["alert"] for rule in alert_rules() if (await prometheus.query(rule["expr"]))["result"]}
        assert firing - MACHINES_OWN == {"AgentSqlErrorRatio"}


MACHINES_OWN = {"AgentEventLoopStalled"}  # alerts a busy test machine raises by itself


def _timestamp(rfc3339: str) -> float:
    """Seconds since the epoch from Prometheus's RFC 3339 time (nanoseconds cut to microseconds)."""
    text = re.sub(r"(\.\d{6})\d*", r"\1", rfc3339).replace("Z", "+00:00")
    return datetime.fromisoformat(text).timestamp()


@pytest.mark.skipif(PROMETHEUS is None, reason=NO_PROMETHEUS)
async def test_job_run_evals_are_scraped_by_a_real_prometheus_and_the_trend_panel_shows_them(
    web_apps: WebApps,
    metrics: Metrics,
    settings: Settings,
    db: Database,
    fake_anthropic: FakeAnthropic,
    tmp_path: Path,
) -> None:
    """Two runs of the eval job (all passed, then half): Prometheus scrapes each from the app's /metrics, and
    the Evals panels' own queries, asked over the range as Grafana asks, give the step from 100% to 50%."""
    assert PROMETHEUS is not None
    url, state = await serve_with_evals(web_apps, metrics)
    evals = job_settings(settings, fake_anthropic, tmp_path / "job", agent_knowledge_dir="none")
    suite = write_suite(tmp_path)
    queries = dict(panel_queries_by_title())
    trend = queries["Eval pass rate by suite, and its recent level"]
    by_tag = queries["Eval pass rate by tag"]
    async with Prometheus(PROMETHEUS, url.removeprefix("http://"), tmp_path, TOKEN) as prometheus:
        began = time.time()
        for answers, rate in ((RIGHT, 1.0), (HALF_WRONG, 0.5)):
            answer_cases(fake_anthropic, answers)
            assert (await run_eval_job(evals, state, suites=[suite], db=db, judge=False)).ran

            async def scraped(expected: float = rate) -> bool:
                return await prometheus.value(f'max(agent_eval_pass_rate{{suite="{SUITE}"}})') == expected

            await prometheus.wait_for(scraped, f"a scrape of the run that passed {rate:.0%}")
        ended = time.time() + 2  # past the last scrape: its step reads the newest sample

        [series] = (await prometheus.query_range(for_prometheus(trend[0]), began, ended))["result"]
        values = [float(value) for _, value in series["values"]]
        assert series["metric"] == {"suite": SUITE}
        assert values[0] == 1.0 and values[-1] == 0.5 and set(values) == {1.0, 0.5}, "the trend steps down"
        [average] = (await prometheus.query_range(for_prometheus(trend[1]), began, ended))["result"]
        assert 0.5 < float(average["values"][-1][1]) < 1.0, "the recent level lies between the runs"
        tags = (await prometheus.query_range(for_prometheus(by_tag[0]), began, ended))["result"]
        assert {(t["metric"]["tag"], float(t["values"][-1][1])) for t in tags} == {("count", 0.5), ("geo", 0.0)}


def panel_queries_by_title() -> list[tuple[str, list[str]]]:
    dashboard = json.loads(DASHBOARD.read_text())
    return [(p["title"], [t["expr"] for t in p.get("targets", [])]) for p in dashboard["panels"]]

"""Traces: a run is a span, its model calls and queries its children, all carrying the run's id; the OTEL_*
variables set it up through the SDK's own reading of them (a real OTLP/HTTP export to a local receiver);
with none set, nothing is installed or imported."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler
from pathlib import Path

import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from agent import tracing, tracing_setup
from agent.config import ConfigError
from agent.logs import log_context
from tests.fakes.anthropic_api import FakeAnthropic, Reply
from tests.fakes.http_server import FakeServer
from tests.traces import named, recorded_spans

ROOT = Path(__file__).resolve().parents[2]
DELAY = "SELECT round(avg(arr_delay), 2) AS delay FROM nycflights13.flights"


async def test_a_run_is_a_span_with_its_model_calls_and_queries_inside_carrying_the_run_id(
    make_app, fake_anthropic: FakeAnthropic
) -> None:
    fake_anthropic.script(
        Reply(tool_calls=[("execute_sql", {"queries": [{"question": "Average delay", "sql": DELAY}]})]),
        Reply(text="The average arrival delay was 6.9 minutes [Q1]."),
    )
    app = make_app()
    with recorded_spans() as exporter, log_context(run_id="run-traced"):
        result = await app.runner.run("What was the average arrival delay?", followups=False)
    spans = exporter.get_finished_spans()
    [run] = named(spans, "agent.run")
    calls, queries = named(spans, "agent.llm.call"), named(spans, "agent.db.query")
    assert result.outcome.value == "answered" and len(calls) == 2 and len(queries) == 1
    assert run.attributes is not None and run.attributes["agent.outcome"] == "answered"
    for child in [*calls, *queries]:
        assert child.parent is not None and child.parent.span_id == run.context.span_id, child.name
        assert child.context.trace_id == run.context.trace_id
    for span in [run, *calls, *queries]:
        assert span.attributes is not None and span.attributes["agent.run_id"] == "run-traced", span.name
    assert calls[0].attributes is not None and calls[0].attributes["agent.role"] == "main"
    assert calls[0].attributes["gen_ai.request.model"] and "gen_ai.usage.output_tokens" in calls[0].attributes
    assert queries[0].attributes is not None and queries[0].attributes["agent.rows"] == 1
    assert DELAY not in str([dict(s.attributes or {}) for s in spans]), "no SQL text in the traces"


async def test_without_a_provider_nothing_is_recorded(make_app, fake_anthropic: FakeAnthropic) -> None:
    fake_anthropic.script(Reply(text="Hello."))
    with recorded_spans() as exporter:
        tracing.use_provider(None)  # as when no OTEL variable asked for traces
        await make_app().runner.run("hi", followups=False)
    assert exporter.get_finished_spans() == ()


@pytest.mark.parametrize(
    ("environ", "names"),
    [
        ({}, []),
        ({"OTEL_SERVICE_NAME": "x"}, []),  # naming the service alone exports nothing
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318"}, ["otlp"]),
        ({"OTEL_TRACES_EXPORTER": "console,otlp"}, ["console", "otlp"]),
        ({"OTEL_TRACES_EXPORTER": "none", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318"}, []),
        ({"OTEL_TRACES_EXPORTER": "console", "OTEL_SDK_DISABLED": "true"}, []),
    ],
)
def test_which_exporters_the_variables_ask_for(environ: dict[str, str], names: list[str]) -> None:
    assert tracing_setup.exporter_names(environ) == names


def test_an_unknown_exporter_is_one_line_naming_the_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OTEL_TRACES_EXPORTER", "zipkin_json")
    with pytest.raises(ConfigError, match=r"^OTEL_TRACES_EXPORTER: no span exporter named 'zipkin_json'"):
        tracing_setup.configure_tracing()
    assert not tracing.active()


def _python(code: str, **env: str) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    return subprocess.run(
        [sys.executable, "-c", code], env={**clean, **env}, cwd=ROOT, capture_output=True, text=True, timeout=60
    )


def test_unset_variables_install_no_provider_and_import_no_sdk() -> None:
    done = _python(
        "import sys\n"
        "from agent import tracing, tracing_setup\n"
        "import agent.pipeline.loop, agent.db.database, agent.llm.client\n"
        "assert tracing_setup.configure_tracing() is None and not tracing.active()\n"
        "with tracing.span('agent.run') as s: s.set(x=1)\n"
        "print(sorted(m for m in sys.modules if m.startswith('opentelemetry.sdk')))\n"
        "from opentelemetry import trace\n"  # the API alone (the anthropic SDK imports it when installed)
        "print(type(trace.get_tracer_provider()).__name__)\n"
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["[]", "ProxyTracerProvider"], "no SDK loaded, no provider installed"


class _Collector(BaseHTTPRequestHandler):
    """An OTLP/HTTP trace receiver: keeps each export request's protobuf body."""

    received: list[bytes]

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers["Content-Length"]))
        if self.path == "/v1/traces":
            self.received.append(body)
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def collector() -> Iterator[tuple[str, list[bytes]]]:
    received: list[bytes] = []
    server = FakeServer(("127.0.0.1", 0), type("Handler", (_Collector,), {"received": received}))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}", received
    server.shutdown()
    server.server_close()


def test_the_otel_variables_export_spans_over_otlp_http(collector: tuple[str, list[bytes]]) -> None:
    """The SDK reads the endpoint and the service name itself; the spans reach the collector at exit."""
    endpoint, received = collector
    done = _python(
        "from agent import tracing, tracing_setup\n"
        "from agent.logs import log_context\n"
        "assert tracing_setup.configure_tracing() is not None\n"
        "with log_context(run_id='run-7'), tracing.span('agent.run'):\n"
        "    with tracing.span('agent.db.query', agent__rows=3): pass\n",
        OTEL_EXPORTER_OTLP_ENDPOINT=endpoint,
        OTEL_SERVICE_NAME="analyst-test",
    )
    assert done.returncode == 0, done.stderr
    request = ExportTraceServiceRequest()
    for body in received:
        request.MergeFromString(body)
    [resource_spans] = request.resource_spans
    service = {a.key: a.value.string_value for a in resource_spans.resource.attributes}["service.name"]
    spans = [s for scope in resource_spans.scope_spans for s in scope.spans]
    by_name = {s.name: s for s in spans}
    assert service == "analyst-test" and set(by_name) == {"agent.run", "agent.db.query"}
    assert by_name["agent.db.query"].parent_span_id == by_name["agent.run"].span_id
    for span in spans:
        assert {a.key: a.value.string_value for a in span.attributes}["agent.run_id"] == "run-7"

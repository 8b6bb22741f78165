"""Traces (OpenTelemetry), off unless the standard OTEL_* variables ask for them.

Spans are recorded where the work happens: a run (agent/pipeline), each model call (agent/llm), each query
(agent/db) and each Slack Web API call (bots/slack), every one carrying the run's id from the log context
(agent/logs.py), so a trace and the run's log lines and audit entry name the same run.

Off by default: with no exporter asked for, nothing is set up and `span` returns at once without importing
the SDK (the Runner contract stays light, and a query pays for no lock). Tracing is on when
`OTEL_TRACES_EXPORTER` names an exporter, or an `OTEL_EXPORTER_OTLP_(TRACES_)ENDPOINT` is set (then OTLP over
HTTP, the exporter installed with the app); `OTEL_SDK_DISABLED=true` turns it off whatever else says. The rest
is the SDK's own reading of its variables: OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES (the resource),
OTEL_TRACES_SAMPLER(_ARG), OTEL_BSP_* (the batch processor), OTEL_EXPORTER_OTLP_* (endpoint, headers,
timeout, compression). Exporters are found by the SDK's entry points (`console`, `otlp_proto_http`, or any
installed), never constructed here by hand.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from importlib.metadata import entry_points
from typing import TYPE_CHECKING, Any

from agent.config import ConfigError
from agent.logs import context_fields

if TYPE_CHECKING:
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.trace import Span, Tracer

RUN_ID = "agent.run_id"
SERVICE = "clickhouse-analyst"  # the service's name when OTEL_SERVICE_NAME does not give one
EXPORTERS = "opentelemetry_traces_exporter"  # the SDK's entry-point group of span exporters
HTTP_OTLP = "otlp_proto_http"

_tracer: Tracer | None = None
_provider: TracerProvider | None = None


class Noted:
    """The span a `with span(...)` block is in, to add what is learnt inside it (a no-op when off); names
    as `span`'s."""

    def __init__(self, current: Span | None = None) -> None:
        self._span = current

    def set(self, **attributes: Any) -> None:
        if self._span is not None:
            self._span.set_attributes(_named(attributes))


_OFF = Noted()


@contextmanager
def span(name: str, **attributes: Any) -> Iterator[Noted]:
    """A span around the block, child of the current one, with the run's id when a run is under way.
    Attribute names may use `__` for a dot (`agent__role` is `agent.role`)."""
    tracer = _tracer
    if tracer is None:
        yield _OFF
        return
    fields = _named(attributes)
    if run_id := context_fields().get("run_id"):
        fields[RUN_ID] = str(run_id)
    with tracer.start_as_current_span(name, attributes=fields) as current:
        yield Noted(current)


def _named(attributes: Mapping[str, Any]) -> dict[str, Any]:
    return {key.replace("__", "."): value for key, value in attributes.items() if value is not None}


def active() -> bool:
    return _tracer is not None


def exporter_names(environ: Mapping[str, str]) -> list[str]:
    """The exporters the variables ask for ([] when tracing stays off)."""
    if environ.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return []
    raw = environ.get("OTEL_TRACES_EXPORTER", "").strip()
    if not raw:  # unlike the SDK's default of `otlp`: an app that exports nobody asked for is not off
        endpoint = environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") or environ.get("OTEL_EXPORTER_OTLP_ENDPOINT")
        return ["otlp"] if endpoint else []
    names = [name.strip() for name in raw.split(",") if name.strip()]
    return [] if names == ["none"] else [name for name in names if name != "none"]


def configure_tracing() -> TracerProvider | None:
    """Set up traces as the OTEL_* variables say, once per process: the provider installed, or None when
    tracing is off (nothing is imported or installed then). A name no exporter has stops start-up with
    one line naming the variable."""
    global _provider
    names = exporter_names(os.environ)
    if not names or _provider is not None:
        return _provider
    from opentelemetry import trace
    from opentelemetry.sdk.resources import SERVICE_NAME, Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    exporters = [_exporter(name, os.environ) for name in names]
    resource = Resource.create()  # the SDK reads OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES
    if str(resource.attributes.get(SERVICE_NAME, "")).startswith("unknown_service"):  # neither names it
        resource = resource.merge(Resource({SERVICE_NAME: SERVICE}))
    provider = TracerProvider(resource=resource)
    for exporter in exporters:
        provider.add_span_processor(BatchSpanProcessor(exporter()))
    trace.set_tracer_provider(provider)  # so a library that traces on its own joins the same traces
    use_provider(provider)
    _provider = provider
    return provider


def use_provider(provider: TracerProvider | None) -> None:
    """Record this process's spans through `provider` (None: stop recording). configure_tracing calls it;
    tests give it a provider with the SDK's in-memory exporter."""
    global _tracer
    _tracer = None if provider is None else provider.get_tracer("agent")


def _exporter(name: str, environ: Mapping[str, str]) -> Any:
    """The exporter class an entry point of that name gives; `otlp` is OTLP over HTTP unless an `otlp`
    exporter is installed (the gRPC one is not shipped)."""
    found = {point.name: point for point in entry_points(group=EXPORTERS)}
    if name == "otlp" and name not in found:
        protocol = environ.get("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL") or environ.get("OTEL_EXPORTER_OTLP_PROTOCOL")
        if protocol not in (None, "", "http/protobuf"):
            raise ConfigError(
                f"OTEL_EXPORTER_OTLP_PROTOCOL: {protocol!r} is not installed; this app ships OTLP over HTTP "
                "(http/protobuf): pip install opentelemetry-exporter-otlp-proto-grpc for gRPC"
            )
        name = HTTP_OTLP
    if name not in found:
        raise ConfigError(
            f"OTEL_TRACES_EXPORTER: no span exporter named {name!r} is installed "
            f"(installed: {', '.join(sorted(found)) or 'none'})"
        )
    return found[name].load()

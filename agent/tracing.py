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
installed), never constructed here by hand. That setup is agent/tracing_setup.py, which only a process
imports: this module, imported wherever work is traced, never names the SDK.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import AbstractContextManager, contextmanager
from typing import TYPE_CHECKING, Any

from agent.logs import context_fields

if TYPE_CHECKING:
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.trace import Span, Tracer

RUN_ID = "agent.run_id"

_tracer: Tracer | None = None


class Noted:
    """The span a `with span(...)` block is in, to add what is learnt inside it (a no-op when off); names
    as `span`'s."""

    def __init__(self, current: Span | None = None) -> None:
        self._span = current

    def set(self, **attributes: Any) -> None:
        if self._span is not None:
            self._span.set_attributes(_named(attributes))


_OFF = Noted()


class _Off:
    """The block of a span when tracing is off: nothing to open, nothing to close."""

    def __enter__(self) -> Noted:
        return _OFF

    def __exit__(self, *_: object) -> None:
        return None


_OFF_BLOCK = _Off()


def span(name: str, **attributes: Any) -> AbstractContextManager[Noted]:
    """A span around the block, child of the current one, with the run's id when a run is under way.
    Attribute names may use `__` for a dot (`agent__role` is `agent.role`)."""
    tracer = _tracer
    return _OFF_BLOCK if tracer is None else _recorded(tracer, name, attributes)


@contextmanager
def _recorded(tracer: Tracer, name: str, attributes: Mapping[str, Any]) -> Iterator[Noted]:
    fields = _named(attributes)
    if run_id := context_fields().get("run_id"):
        fields[RUN_ID] = str(run_id)
    with tracer.start_as_current_span(name, attributes=fields) as current:
        yield Noted(current)


def _named(attributes: Mapping[str, Any]) -> dict[str, Any]:
    return {key.replace("__", "."): value for key, value in attributes.items() if value is not None}


def active() -> bool:
    return _tracer is not None


def use_provider(provider: TracerProvider | None) -> None:
    """Record this process's spans through `provider` (None: stop recording). configure_tracing
    (agent/tracing_setup.py) calls it; tests give it a provider with the SDK's in-memory exporter."""
    global _tracer
    _tracer = None if provider is None else provider.get_tracer("agent")

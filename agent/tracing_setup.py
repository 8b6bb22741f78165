"""Traces set up from the standard OTEL_* variables, once per process, by the process that starts
(process/cli.py, a worker of `agent serve`): what agent/tracing.py's docstring says, done with the SDK's own
reading of its variables and its exporters' entry points. Kept apart from agent/tracing.py so the modules
that record spans never import the SDK (the Runner contract stays light: pyproject.toml's contract)."""

from __future__ import annotations

import os
from collections.abc import Mapping
from importlib.metadata import entry_points
from typing import TYPE_CHECKING, Any

from agent.config import ConfigError
from agent.tracing import use_provider

if TYPE_CHECKING:
    from opentelemetry.sdk.trace import TracerProvider

SERVICE = "clickhouse-analyst"  # the service's name when OTEL_SERVICE_NAME does not give one
EXPORTERS = "opentelemetry_traces_exporter"  # the SDK's entry-point group of span exporters
HTTP_OTLP = "otlp_proto_http"

_provider: TracerProvider | None = None


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

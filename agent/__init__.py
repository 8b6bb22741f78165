"""The library: a question in, typed events and a `RunResult` out.

This is its face, what the layers above (the kit `chats`, the adapters `web`, `bots`, `evals`, the
processes `process`) use. `AgentApp` builds everything from `Settings`; its `runner` answers questions.
An adapter that needs the engine or the model for something that is not a run goes through a named call
here (the stored query's CSV export and the readiness ping are `AgentApp` methods), never around the
Runner: `make lint` keeps the web, Slack and the kit from importing `agent.db`, `agent.llm` or
`agent.pipeline`. The evals are the one adapter that reaches them on purpose: a case's gold SQL runs on
the `Database` and a judge model grades the answer, and neither is a run.

Names load when first used (PEP 562), so `import agent.runner` (the Runner contract) loads no model SDK
and no engine.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from agent.app import AgentApp
    from agent.charts import Chart
    from agent.config import ConfigError, Settings
    from agent.db import Database, DatabaseUnavailable, EngineError, Export, QueryRefused, QueryResult, csv_chunks
    from agent.llm import LLMClient, LLMConfigError
    from agent.metrics import Metrics
    from agent.runner import (
        AnswerEvent,
        ChartEvent,
        Checkpoint,
        CheckpointSink,
        Classification,
        ErrorEvent,
        Event,
        ExecutedQuery,
        ExecutingEvent,
        FallbackEvent,
        FinalAnswer,
        FinishedEvent,
        FollowupsEvent,
        Outcome,
        ResultEvent,
        Runner,
        RunResult,
        ThinkingEvent,
        Turn,
        TurnQuery,
        WireEvent,
    )

_FACE = {
    "app": ("AgentApp",),
    "charts": ("Chart",),
    "config": ("ConfigError", "Settings"),
    "db": ("Database", "DatabaseUnavailable", "EngineError", "Export", "QueryRefused", "QueryResult", "csv_chunks"),
    "llm": ("LLMClient", "LLMConfigError"),
    "metrics": ("Metrics",),
    "runner": (
        "AnswerEvent",
        "ChartEvent",
        "Checkpoint",
        "CheckpointSink",
        "Classification",
        "ErrorEvent",
        "Event",
        "ExecutedQuery",
        "ExecutingEvent",
        "FallbackEvent",
        "FinalAnswer",
        "FinishedEvent",
        "FollowupsEvent",
        "Outcome",
        "ResultEvent",
        "RunResult",
        "Runner",
        "ThinkingEvent",
        "Turn",
        "TurnQuery",
        "WireEvent",
    ),
}
_MODULE_OF = {name: module for module, names in _FACE.items() for name in names}

__all__ = [
    "AgentApp",
    "AnswerEvent",
    "Chart",
    "ChartEvent",
    "Checkpoint",
    "CheckpointSink",
    "Classification",
    "ConfigError",
    "Database",
    "DatabaseUnavailable",
    "EngineError",
    "ErrorEvent",
    "Event",
    "ExecutedQuery",
    "ExecutingEvent",
    "Export",
    "FallbackEvent",
    "FinalAnswer",
    "FinishedEvent",
    "FollowupsEvent",
    "LLMClient",
    "LLMConfigError",
    "Metrics",
    "Outcome",
    "QueryRefused",
    "QueryResult",
    "ResultEvent",
    "RunResult",
    "Runner",
    "Settings",
    "ThinkingEvent",
    "Turn",
    "TurnQuery",
    "WireEvent",
    "csv_chunks",
]


def __getattr__(name: str) -> Any:
    module = _MODULE_OF.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value
    return value

"""Pipelines behind the Runner interface (agent.pipeline.runner). v3 is the only one."""

from __future__ import annotations

from agent.config import Settings
from agent.db import Database
from agent.followups import FollowupGenerator
from agent.limits import Limits
from agent.llm import LLMClient
from agent.metrics import Metrics
from agent.pipeline.runner import Runner
from agent.pipeline.v3 import LoopSettings, Pipeline
from agent.pipeline.v3.charting import ChartMaker
from agent.pipeline.v3.prompt import RequestPrefix
from agent.pipeline.v3.tools import SqlExecutor
from agent.prompts import prompt_library
from agent.schema import SchemaCache


def build_runner(settings: Settings, *, db: Database, llm: LLMClient, metrics: Metrics, schema: SchemaCache) -> Runner:
    prompts = prompt_library(settings.agent_prompts_dir)
    limits = Limits.of(settings)
    return Pipeline(
        llm=llm,
        prefix=RequestPrefix(prompts, schema, max_rows=settings.max_rows, chart_max_rows=limits.chart_max_rows),
        sql=SqlExecutor(db, prompts, settings.max_result_chars, limits),
        prompts=prompts,
        settings=LoopSettings(
            model=settings.agent_model,
            max_tokens=settings.agent_max_tokens,
            max_rounds=settings.agent_max_rounds,
            context_tokens=settings.agent_context_tokens,
            history_turns=settings.agent_history_turns,
            history_full_turns=settings.agent_history_full_turns,
            history_chars=settings.agent_history_chars,
            temperature=settings.agent_temperature,
        ),
        metrics=metrics,
        followups=FollowupGenerator(llm, prompts, settings.agent_followup_model, metrics),
        charts=ChartMaker(db, limits),
    )

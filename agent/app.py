"""The composition root: builds the database, model client, schema cache and runner from settings.
Adapters (CLI, web, Slack) start one `AgentApp` and use its runner; tests pass their own pieces."""

from __future__ import annotations

from dataclasses import dataclass

from agent.config import Settings
from agent.db import Database, open_database
from agent.examples import ExampleQuestions
from agent.llm import LLMClient, MissingKeyLLM
from agent.metrics import Metrics, default_metrics
from agent.pipeline import build_runner
from agent.pipeline.runner import Runner
from agent.prompts import prompt_library
from agent.schema import SchemaCache


@dataclass
class AgentApp:
    settings: Settings
    db: Database
    llm: LLMClient
    runner: Runner
    metrics: Metrics
    examples: ExampleQuestions
    schema: SchemaCache

    @classmethod
    def start(
        cls,
        settings: Settings,
        *,
        llm: LLMClient | None = None,
        db: Database | None = None,
        metrics: Metrics | None = None,
    ) -> AgentApp:
        if llm is None:
            llm = LLMClient.from_settings(settings) if settings.anthropic_api_key else MissingKeyLLM()
        db = db or open_database(settings)
        metrics = metrics or default_metrics()
        schema = SchemaCache(db, settings.schema_max_chars, settings.schema_ttl_s)
        runner = build_runner(settings, db=db, llm=llm, metrics=metrics, schema=schema)
        prompts = prompt_library(settings.agent_prompts_dir)
        examples = ExampleQuestions(settings, llm=llm, schema=schema, prompts=prompts, metrics=metrics)
        return cls(settings=settings, db=db, llm=llm, runner=runner, metrics=metrics, examples=examples, schema=schema)

    async def close(self) -> None:
        await self.examples.close()
        await self.llm.close()
        await self.db.close()

"""The composition root: builds the database, model client, schema cache and runner from settings.
Adapters (CLI, web, Slack, evals) start one `AgentApp` and use its runner; tests pass their own pieces.
Nothing else in the project builds a pipeline."""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial

from agent.access.check import problems_of
from agent.access.files import AccessFileError, PolicyFile, load_policy_file
from agent.access.policy import Asker, Policies, Policy
from agent.config import Settings
from agent.db import Database, Export, QueryResult, open_database, started
from agent.db.row_filter import row_filter_problem
from agent.knowledge import KnowledgeBase
from agent.knowledge.agents_schema import AgentsSchema
from agent.limits import Limits
from agent.llm import LLMClient
from agent.metrics import Metrics, default_metrics
from agent.pipeline import LoopSettings, Pipeline
from agent.pipeline.charting import ChartMaker
from agent.pipeline.preflight import Preflight
from agent.pipeline.question_budget import QuestionBudget
from agent.pipeline.request import RequestPrefix
from agent.pipeline.tools import SchemaLookup, SqlExecutor
from agent.pricing import load_pricing
from agent.prompts import prompt_library
from agent.runner import Runner
from agent.schema import SchemaCache
from agent.suggestions import ExampleQuestions, FollowupGenerator


@dataclass
class AgentApp:
    settings: Settings
    db: Database
    llm: LLMClient
    runner: Runner
    metrics: Metrics
    examples: ExampleQuestions
    schema: SchemaCache
    knowledge: KnowledgeBase | None = None
    access: PolicyFile | None = None  # AGENT_ACCESS_FILE's policies; None: everyone reads all of the scope

    @classmethod
    def start(
        cls,
        settings: Settings,
        *,
        llm: LLMClient | None = None,
        db: Database | None = None,
        metrics: Metrics | None = None,
    ) -> AgentApp:
        access = load_policy_file(settings.access_file) if settings.access_file else None  # before anything starts
        if llm is None:
            llm = LLMClient.from_settings(settings)
        db = db or open_database(settings, row_filters=access is not None)
        metrics = metrics or default_metrics()
        schema = SchemaCache(db, settings.schema_max_chars, settings.schema_ttl_s, settings.schema_catalogue_max_chars)
        knowledge = KnowledgeBase.of(settings)
        if knowledge is None and settings.agent_knowledge_dir.strip().lower() != "none":
            knowledge = KnowledgeBase([], settings.agent_knowledge_max_chars)  # the warehouse's may join it
        runner = build_runner(settings, db=db, llm=llm, metrics=metrics, schema=schema, knowledge=knowledge)
        prompts = prompt_library(settings.agent_prompts_dir)
        examples = ExampleQuestions(settings, llm=llm, schema=schema, prompts=prompts, metrics=metrics)
        return cls(
            settings=settings,
            db=db,
            llm=llm,
            runner=runner,
            metrics=metrics,
            examples=examples,
            schema=schema,
            knowledge=knowledge,
            access=access,
        )

    @property
    def policies(self) -> Policies | None:
        """Who reads which rows (None without a policy file: everyone, every table in scope)."""
        return self.access.policies if self.access is not None else None

    def policy_for(self, asker: Asker | None = None, *, channel: str | None = None) -> Policy | None:
        """The policy a question runs under: a Slack channel's when asked in one (everyone there reads the
        answer), else the asker's; whoever the file does not name gets its default. None without a policy
        file: every table in scope."""
        if self.access is None:
            return None
        policies = self.access.policies
        return policies.for_channel(channel) if channel else policies.for_asker(asker or Asker())

    def policy_named(self, name: str | None) -> Policy | None:
        """The policy a stored run was asked under, by its name (`RunResult.policy`), for running one of its
        queries again: a name the file no longer has (or none recorded) gets the default, which reads
        nothing. None without a policy file: every table in scope."""
        if self.access is None:
            return None
        policies = self.access.policies
        return (policies.named(name) if name else None) or policies.default

    async def check_access(self) -> None:
        """At start-up: the policy file's tables exist and its filters are safe (AccessFileError otherwise)."""
        if self.access is not None and (problems := await check_policy_file(self.access, self.db)):
            raise AccessFileError(problems)

    @property
    def sandbox_status(self) -> str:
        """How the engine is confined (the liveness probe reports it)."""
        return self.db.backend.sandbox_status

    async def ping(self) -> None:
        """The readiness probe's question to the engine: raises `DatabaseUnavailable` when it does not answer."""
        await self.db.ping()

    async def export(self, sql: str, *, max_rows: int, policy: Policy | None = None) -> Export:
        """A stored query's whole result for a download, checked again as every statement is, under the
        policy it was asked under (`RunResult.policy`, found again by name in the policy file), and
        started: a refusal or an engine error raises here, before any byte is sent."""
        return await started(await self.db.export(sql, max_rows=max_rows, policy=policy))

    async def rerun(self, sql: str, *, label: str, policy: Policy | None = None) -> QueryResult:
        """A stored query run again (a schedule's fire, an alert's check), checked again as every statement
        is, under `policy`: at most the usual preview rows. A refusal or an engine error comes back in the
        result, as for the model's queries."""
        return await self.db.execute(sql, query_id=label, policy=policy)

    async def close(self) -> None:
        await self.examples.close()
        await self.llm.close()
        await self.db.close()


async def check_policy_file(policy_file: PolicyFile, db: Database) -> list[str]:
    """The policy file's problems against the warehouse: unknown tables, unsafe or broken row filters."""
    tables, _ = await db.known_names(refresh=True)
    return await problems_of(policy_file, tables, partial(row_filter_problem, db))


def build_runner(
    settings: Settings,
    *,
    db: Database,
    llm: LLMClient,
    metrics: Metrics,
    schema: SchemaCache,
    knowledge: KnowledgeBase | None = None,
) -> Runner:
    prompts = prompt_library(settings.agent_prompts_dir)
    limits = Limits.of(settings)
    return Pipeline(
        llm=llm,
        prefix=RequestPrefix(
            prompts,
            schema,
            max_rows=settings.max_rows,
            chart_max_rows=limits.chart_max_rows,
            knowledge=knowledge,
            agents_schema=AgentsSchema(db, knowledge) if knowledge is not None else None,
        ),
        sql=SqlExecutor(
            db, prompts, settings.max_result_chars, limits, Preflight(db, prompts, settings.preflight_max_rows)
        ),
        prompts=prompts,
        settings=LoopSettings(
            model=settings.models("main"),
            max_tokens=settings.agent_max_tokens,
            max_rounds=settings.agent_max_rounds,
            context_tokens=settings.agent_context_tokens,
            history_turns=settings.agent_history_turns,
            history_full_turns=settings.agent_history_full_turns,
            history_chars=settings.agent_history_chars,
            temperature=settings.agent_temperature,
            thinking_budget=settings.agent_thinking_budget,
        ),
        metrics=metrics,
        followups=FollowupGenerator(llm, prompts, settings.models("followup"), metrics),
        charts=ChartMaker(db, limits),
        lookup=SchemaLookup(schema, settings.max_result_chars),
        prices=load_pricing(),
        budget=QuestionBudget(settings.agent_question_max_tokens, settings.agent_question_max_rows_read),
    )

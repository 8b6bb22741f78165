"""The tools: `think` (recorded and shown), `execute_sql` (queries run concurrently) and, for a
warehouse too large for the prompt, `lookup_schema` (reads the introspected schema, never SQL).

Tool input from a model is not always well formed. Input that has one clear meaning is repaired
(a JSON string where an array belongs, a single object, SQL in code fences or tags); anything else
is answered with an `is_error` result that says what was wrong.
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass
from typing import Any

from agent import linear_re
from agent.db import Database, QueryResult, format_for_model, new_query_id
from agent.limits import Limits, cut_text
from agent.pipeline.preflight import Preflight
from agent.pipeline.state import RunState
from agent.prompts import PromptLibrary
from agent.runner import ExecutedQuery, ExecutingEvent, ResultEvent, ThinkingEvent
from agent.schema import SchemaCache

# Tool input is the model's to write: linear-time patterns (RE2). The first two are used with .match.
_FENCE = linear_re.compile(r"\s*```(?:sql|clickhouse)?\s*\n?(.*?)\n?```\s*\z", ignore_case=True, dot_all=True)
_TAG = linear_re.compile(r"\s*(?:<sql>(.*?)</sql>|<query>(.*?)</query>)\s*\z", ignore_case=True, dot_all=True)
_STRAY_MARKUP = linear_re.compile(r"</?(?:parameter|invoke|antml:[a-z_]+)[^>]*>\s*\z", ignore_case=True)


class ToolInputError(Exception):
    """Tool input that cannot be repaired unambiguously; the message goes back to the model."""


@dataclass(frozen=True)
class QueryRequest:
    question: str
    sql: str


@dataclass(frozen=True)
class ToolOutcome:
    content: str
    is_error: bool = False
    repaired: bool = False


def parse_think(raw: Any) -> tuple[str, bool]:
    if isinstance(raw, dict) and isinstance(raw.get("content"), str) and raw["content"].strip():
        return raw["content"].strip(), False
    if isinstance(raw, dict):
        texts = [v for v in raw.values() if isinstance(v, str) and v.strip()]
        if len(texts) == 1:
            return texts[0].strip(), True
    if isinstance(raw, str) and raw.strip():
        return raw.strip(), True
    raise ToolInputError('think needs {"content": "<your reasoning>"}.')


def parse_queries(raw: Any) -> tuple[list[QueryRequest], bool]:
    """The queries in execute_sql input, and whether anything had to be repaired."""
    repaired = False
    queries = raw.get("queries") if isinstance(raw, dict) else raw
    if queries is None and isinstance(raw, dict) and "sql" in raw:
        queries, repaired = [raw], True
    if isinstance(queries, str):
        try:
            queries, repaired = json.loads(queries), True
        except json.JSONDecodeError:
            raise ToolInputError(
                'execute_sql needs "queries" to be an array of {"question", "sql"} objects; got a string '
                "that is not JSON."
            ) from None
    if isinstance(queries, dict):
        queries, repaired = [queries], True
    if not isinstance(queries, list) or not queries:
        raise ToolInputError('execute_sql needs {"queries": [{"question": "...", "sql": "SELECT ..."}]}.')
    parsed = []
    for index, item in enumerate(queries, start=1):
        if not isinstance(item, dict) or not isinstance(item.get("sql"), str) or not item["sql"].strip():
            raise ToolInputError(f'Query {index} in execute_sql has no "sql" string.')
        sql, cleaned = clean_sql(item["sql"])
        question = item.get("question")
        if not isinstance(question, str) or not question.strip():
            question, cleaned = sql.splitlines()[0][:120], True
        parsed.append(QueryRequest(question.strip(), sql))
        repaired = repaired or cleaned
    return parsed, repaired


def clean_sql(sql: str) -> tuple[str, bool]:
    """Strip code fences, <sql> tags and stray tool markup around SQL."""
    original = sql
    if fenced := _FENCE.match(sql):
        sql = fenced.group(1)
    if tagged := _TAG.match(sql):
        sql = tagged.group(1) if tagged.group(1) is not None else tagged.group(2)
    sql = _STRAY_MARKUP.sub("", sql).strip()
    return sql, sql != original.strip()


def normalized(sql: str) -> str:
    return " ".join(sql.split()).rstrip(";").strip()


class SqlExecutor:
    def __init__(
        self,
        db: Database,
        prompts: PromptLibrary,
        max_result_chars: int,
        limits: Limits,
        preflight: Preflight | None = None,
    ) -> None:
        self._db = db
        self._prompts = prompts
        self._max_result_chars = max_result_chars
        self._limits = limits
        self._preflight = preflight

    @property
    def result_chars(self) -> int:
        """The cap each result's text is sent to the model at (agent/db/result.py `format_for_model`)."""
        return self._max_result_chars

    async def run(self, requests: list[QueryRequest], state: RunState) -> str:
        """Run the queries concurrently (within the call's and the run's caps), emitting events as each
        starts and finishes. They share the run's slots of the engine with its other work."""
        planned = self._plan(requests, state)
        for _, query_id, request in planned:
            await state.emit(ExecutingEvent(query_id=query_id, question=request.question, sql=request.sql))
        done = await asyncio.gather(*(self._one(reused, qid, req, state) for reused, qid, req in planned))
        for query in done:
            state.record_query(query)
        parts = [self._format(query) for query in done]
        if skipped := len(requests) - len(planned):
            state.record_guard("query_cap")
            parts.append(self._skipped_note(skipped, state))
        return "\n\n".join(parts)

    def _plan(
        self, requests: list[QueryRequest], state: RunState
    ) -> list[tuple[ExecutedQuery | None, str, QueryRequest]]:
        """Which requests run (or reuse an earlier identical query's result), under their Q ids: at most
        max_queries_per_call of them, and new executions only while the run's budget lasts."""
        # Synchronous from here to the return: the calls of one round run side by side, and each takes
        # its ids and its part of the run's budget before any of them awaits.
        planned: list[tuple[ExecutedQuery | None, str, QueryRequest]] = []
        by_sql = {normalized(q.sql): q for q in state.queries if not q.reused_from}
        most = self._per_run(state)
        for request in requests[: self._limits.max_queries_per_call]:
            if state.query_ids_taken >= 2 * most:
                break  # reused results cost no engine time, but each is one more result to send and store
            earlier = by_sql.get(normalized(request.sql))
            if earlier is None and not state.claim_execution(most):
                continue
            query_id = state.take_query_id()
            reused = None
            if earlier is not None:
                reused = ExecutedQuery(
                    id=query_id,
                    question=request.question,
                    sql=request.sql,
                    result=earlier.result,
                    reused_from=earlier.id,
                )
            planned.append((reused, query_id, request))
        return planned

    def _per_run(self, state: RunState) -> int:
        """Queries the run may execute: a report's own budget, else MAX_QUERIES_PER_RUN."""
        return state.max_queries if state.max_queries is not None else self._limits.max_queries_per_run

    def _skipped_note(self, skipped: int, state: RunState) -> str:
        most = self._per_run(state)
        return self._prompts.render(
            "loop/queries_skipped.md",
            skipped=skipped,
            per_call=self._limits.max_queries_per_call,
            per_run=most,
            run_spent=state.executions_claimed >= most or state.query_ids_taken >= 2 * most,
        )

    async def _one(
        self, reused: ExecutedQuery | None, query_id: str, request: QueryRequest, state: RunState
    ) -> ExecutedQuery:
        if reused is not None:
            state.record_guard("duplicate_sql")
            query = reused
        else:
            result = await self._stopped(request.sql, state) or await self._db.execute(
                request.sql, owner=state.run_id, policy=state.policy
            )
            query = ExecutedQuery(id=query_id, question=request.question, sql=request.sql, result=result)
        await state.emit(ResultEvent.of(query, max_bytes=self._limits.preview_bytes))
        return query

    async def _stopped(self, sql: str, state: RunState) -> QueryResult | None:
        """The preflight's result instead of running `sql`, when it estimates too large a read."""
        if self._preflight is None:
            return None
        return await self._preflight.stopped(sql, new_query_id(), state.run_id, state.metrics, state.policy)

    def _format(self, query: ExecutedQuery) -> str:
        body = format_for_model(query.result, self._max_result_chars)
        note = ""
        if query.reused_from:
            note = self._prompts.render("loop/duplicate.md", original=query.reused_from) + "\n"
        return f"{query.id}: {query.question}\n{note}{body}"


async def run_think(raw: Any, state: RunState) -> ToolOutcome:
    text, repaired = parse_think(raw)
    state.record_think(text)
    await state.emit(ThinkingEvent(text=text))
    return ToolOutcome("Noted.", repaired=repaired)


MAX_LOOKUP_NAME_CHARS, MAX_LOOKUP_SEARCH_CHARS = 300, 1_000


@dataclass(frozen=True)
class LookupColumns:
    """Which of a wide table's columns lookup_schema shows: those matching `words`, and which page."""

    words: str = ""
    page: int = 1


def parse_lookup_columns(raw: dict[str, Any]) -> LookupColumns:
    words, page = raw.get("columns") or "", raw.get("page", 1)
    page = 1 if page is None else page
    if not isinstance(words, str):
        raise ToolInputError('lookup_schema "columns" must be a string of words.')
    if isinstance(page, bool) or not isinstance(page, int) or page < 1:
        raise ToolInputError('lookup_schema "page" must be a whole number from 1.')
    return LookupColumns(words.strip()[:MAX_LOOKUP_SEARCH_CHARS], page)


def parse_lookup(raw: Any) -> tuple[list[str], str]:
    """The table names and search words in lookup_schema input (each cut to a sane length: they are
    the model's to write)."""
    if isinstance(raw, str):
        raw = {"search": raw}
    if not isinstance(raw, dict):
        raise ToolInputError('lookup_schema needs {"tables": ["database.table"]} or {"search": "words"}.')
    tables = raw.get("tables") or []
    if isinstance(tables, str):
        tables = [name for name in tables.replace(",", " ").split() if name]
    if not isinstance(tables, list) or not all(isinstance(name, str) for name in tables):
        raise ToolInputError('lookup_schema "tables" must be an array of table names.')
    search = raw.get("search") or ""
    if not isinstance(search, str):
        raise ToolInputError('lookup_schema "search" must be a string of words.')
    if not tables and not search.strip():
        raise ToolInputError('lookup_schema needs {"tables": ["database.table"]} or {"search": "words"}.')
    names = [name.strip()[:MAX_LOOKUP_NAME_CHARS] for name in tables if name.strip()]
    return names, search.strip()[:MAX_LOOKUP_SEARCH_CHARS]


class SchemaLookup:
    """`lookup_schema`: what introspection found about the tables in scope and the run's policy, and
    nothing else."""

    def __init__(self, schema: SchemaCache, max_chars: int) -> None:
        self._schema = schema
        self._max_chars = max_chars

    async def run(self, raw: Any, state: RunState) -> ToolOutcome:
        tables, search = parse_lookup(raw)
        columns = parse_lookup_columns(raw) if isinstance(raw, dict) else LookupColumns()
        view = await self._schema.for_policy(state.policy).view()  # another policy's table: as if missing
        if view.catalog is None:
            return ToolOutcome("Every table is described in full in the system prompt; read it there.")
        shown = ", ".join(tables[:10]) + (", …" if len(tables) > 10 else "")
        steps = ([f"reading {shown}"] if tables else []) + ([f"searching for {search!r}"] if search else [])
        await state.emit(ThinkingEvent(text=f"Looking up the schema: {'; '.join(steps)}."))
        parts = []
        if tables:
            state.metrics.schema_lookups.labels("details").inc()
            # Its share of the answer (half, beside a search's), so the loop's cut never takes a column.
            budget = (self._max_chars // 2 if search else self._max_chars) - 100
            parts.append(view.catalog.details(tables, max_chars=budget, columns=columns.words, page=columns.page))
        if search:
            state.metrics.schema_lookups.labels("search").inc()
            parts.append(f"Tables matching {search!r}, best first:\n{view.catalog.search_text(search)}")
        return ToolOutcome(cut_text("\n\n".join(parts), self._max_chars))


MAX_OPTIONS, MAX_QUESTION_CHARS, MAX_OPTION_CHARS = 5, 1_000, 200


def parse_clarification(raw: Any) -> tuple[str, list[str]]:
    """The question and the likely options in ask_clarification input."""
    if not isinstance(raw, dict) or not isinstance(raw.get("question"), str) or not raw["question"].strip():
        raise ToolInputError('ask_clarification needs {"question": "...", "options": ["...", "..."]}.')
    options = raw.get("options") or []
    if not isinstance(options, list) or not all(isinstance(o, str) for o in options):
        raise ToolInputError('ask_clarification "options" must be an array of short answers.')
    question = cut_text(" ".join(raw["question"].split()), MAX_QUESTION_CHARS)
    return question, [cut_text(" ".join(o.split()), MAX_OPTION_CHARS) for o in options if o.strip()][:MAX_OPTIONS]


def ask_clarification(raw: Any, state: RunState) -> ToolOutcome:
    """Note the question asked back; the loop ends the run with it (its options become suggestions)."""
    state.clarification, state.followups = parse_clarification(raw)
    return ToolOutcome("Asked; the person's next message answers it.")

"""Example questions, from one place for every adapter: the web page's empty state and Slack's
suggested prompts.

AGENT_EXAMPLE_QUESTIONS when it is set and there is no policy file (AGENT_ACCESS_FILE: an operator's
fixed questions could name any policy's data). Otherwise questions the follow-up model writes from the
schema the asker's policy sees, none naming a table it may not read, once per schema version (a hash of
the rendered schema), cached on disk under
AGENT_DATA_DIR/examples so a restart does not ask again. Until they exist, or when they cannot be
made (no API key, the model or the database is down), a generic few that fit any data.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import time
from pathlib import Path

from agent.access.policy import Policy
from agent.config import Settings
from agent.llm import Fallback, LLMClient, LLMError
from agent.metrics import Metrics
from agent.prompts import PromptError, PromptLibrary
from agent.schema import SchemaCache
from agent.schema.redaction import mentions
from agent.suggestions.replies import json_strings, listed_items

log = logging.getLogger(__name__)

GENERIC = (
    "What tables are there, and what does each one hold?",
    "How many rows does each table have?",
    "What do the most recent records look like?",
)
COUNT = 3
MAX_CHARS = 150
RETRY_AFTER_S = 600.0  # after a failed generation, how long the generic questions stand before trying again
GENERATION_TIMEOUT_S = 60.0


def schema_version(schema_text: str) -> str:
    return hashlib.sha256(schema_text.encode()).hexdigest()[:16]


class ExampleQuestions:
    def __init__(
        self, settings: Settings, *, llm: LLMClient, schema: SchemaCache, prompts: PromptLibrary, metrics: Metrics
    ) -> None:
        # An operator's fixed questions could name any policy's data: only where there are no policies.
        self._policies = settings.access_file is not None
        self._configured = [] if self._policies else list(settings.agent_example_questions)
        self._model = settings.models("followup")
        self._dir = settings.agent_data_dir / "examples"
        self._llm, self._schema, self._prompts, self._metrics = llm, schema, prompts, metrics
        self._known: dict[str, list[str]] = {}
        self._failed_at: dict[str, float] = {}
        self._task: asyncio.Task[None] | None = None
        self._task_version = ""

    async def get(self, *, wait_s: float = 0.0, policy: Policy | None = None) -> list[str]:
        """The questions to show now, for `policy`'s people (none for a policy that reads nothing, nor for no
        policy when there is a policy file). Never
        raises. With `wait_s`, a generation this call starts (or finds running) may take that long before
        the generic questions are returned instead."""
        if (policy is not None and policy.reads_nothing) or (policy is None and self._policies):
            return []  # under a policy file, no policy named is no data: never the whole schema
        if self._configured and policy is None:
            return list(self._configured)
        try:
            schema_text = await self._schema.for_policy(policy).get()
            hidden = await self._hidden_tables(policy)
        except Exception as exc:  # the page and Slack must work with the database down
            log.warning("example questions: could not read the schema (%s)", exc)
            return list(GENERIC)
        if not schema_text.strip():
            return list(GENERIC)
        version = schema_version(schema_text)
        if cached := self._cached(version):
            return _not_naming(cached, hidden)
        task = self._start(version, schema_text)
        if task is not None and wait_s > 0:
            await asyncio.wait([task], timeout=wait_s)
            if cached := self._cached(version):
                return _not_naming(cached, hidden)
        return list(GENERIC)

    async def _hidden_tables(self, policy: Policy | None) -> list[str]:
        """The tables in scope `policy` may not read: a question the model wrote naming one (from its own
        knowledge of such data, say) is not offered."""
        if policy is None:
            return []
        return [table for table in await self._schema.tables_in_scope() if table not in policy.tables]

    def _path(self, version: str) -> Path:
        return self._dir / f"{version}.json"

    def _cached(self, version: str) -> list[str] | None:
        if version not in self._known:
            try:
                loaded = json.loads(self._path(version).read_text())
            except (OSError, ValueError):
                return None
            if not isinstance(loaded, list) or not loaded or not all(isinstance(q, str) for q in loaded):
                return None
            self._known[version] = loaded
        return list(self._known[version])

    def _start(self, version: str, schema_text: str) -> asyncio.Task[None] | None:
        if self._task is not None and not self._task.done():
            return self._task if self._task_version == version else None
        failed_at = self._failed_at.get(version)
        if failed_at is not None and time.monotonic() - failed_at < RETRY_AFTER_S:
            return None
        self._task_version = version
        self._task = asyncio.create_task(self._generate(version, schema_text), name="example-questions")
        return self._task

    async def _generate(self, version: str, schema_text: str) -> None:
        try:
            turn = await asyncio.wait_for(
                self._llm.complete(
                    model=self._model,
                    system=self._prompts.render("EXAMPLES.md"),
                    prompt=self._prompts.render("EXAMPLES_REQUEST.md", schema=schema_text),
                    max_tokens=400,
                    on_fallback=self._fell_back,
                    role="examples",
                ),
                GENERATION_TIMEOUT_S,
            )
        except (LLMError, PromptError, TimeoutError) as exc:
            self._metrics.llm_calls.labels("examples", "error").inc()
            self._failed_at[version] = time.monotonic()
            log.warning("example questions: generic ones stand, generation failed (%s)", exc)
            return
        self._metrics.llm_calls.labels("examples", "ok").inc()
        self._metrics.count_tokens(turn.usage)
        questions = parse_questions(turn.text)
        if not questions:
            self._failed_at[version] = time.monotonic()
            log.warning("example questions: the model's reply held no questions")
            return
        self._known[version] = questions
        try:
            self._dir.mkdir(parents=True, exist_ok=True)
            partial = self._path(version).with_suffix(".tmp")
            partial.write_text(json.dumps(questions, ensure_ascii=False))
            partial.replace(self._path(version))
        except OSError as exc:  # kept in memory; asked again after a restart
            log.warning("example questions: could not cache them on disk (%s)", exc)

    async def _fell_back(self, fallback: Fallback) -> None:
        self._metrics.count_fallback(fallback.role, fallback.reason)

    async def close(self) -> None:
        if self._task is not None and not self._task.done():
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)


def _not_naming(questions: list[str], hidden_tables: list[str]) -> list[str]:
    mention = mentions(hidden_tables, ())
    return [q for q in questions if mention is None or not mention.search(q)]


def parse_questions(text: str) -> list[str]:
    """Up to COUNT distinct questions from a JSON array of strings, or failing that a bulleted list."""
    candidates = json_strings(text) or listed_items(text)
    seen: set[str] = set()
    questions: list[str] = []
    for candidate in candidates:
        cleaned = " ".join(candidate.strip().strip('"').split())
        if 8 <= len(cleaned) <= MAX_CHARS and cleaned.lower() not in seen:
            seen.add(cleaned.lower())
            questions.append(cleaned)
            if len(questions) == COUNT:
                break
    return questions

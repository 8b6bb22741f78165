"""The request prefix: tools, then the system prompt (static rules, then the schema and the team's
knowledge within its budget) with a cache breakpoint, then what changes per request (date, platform
format) after it. What is retrieved for one question (the tables a large warehouse's catalogue leaves
out, knowledge past its budget) goes with the question itself, after every cached block, so neither
the prefix nor an earlier turn's cache changes.

Each policy has a prefix of its own: its tables' schema (agent/schema/cache.py), the knowledge that names
none of the tables it may not read, and the lookup tool over its tables only; each is byte-identical
between that policy's questions, so each is cached on its own."""

from __future__ import annotations

import datetime as dt
from typing import Any

from agent.access.policy import Policy
from agent.knowledge import KnowledgeBase
from agent.pipeline.context import EPHEMERAL
from agent.prompts import PromptLibrary
from agent.runner import Platform
from agent.schema import SchemaCache

RETRIEVED_TABLES = 8


class RequestPrefix:
    def __init__(
        self,
        prompts: PromptLibrary,
        schema: SchemaCache,
        *,
        max_rows: int,
        chart_max_rows: int,
        knowledge: KnowledgeBase | None = None,
    ) -> None:
        self._prompts = prompts
        self._schema = schema
        self._knowledge = knowledge
        self._tools = {
            lookup: prompts.tools(max_rows=max_rows, chart_max_rows=chart_max_rows, lookup=lookup)
            for lookup in (False, True)
        }
        self._static = prompts.render("SYSTEM.md", max_rows=max_rows)
        self._knowledge_seen: dict[frozenset[str], KnowledgeBase] = {}  # by the tables it may not name

    async def parts(
        self, platform: Platform, today: dt.date | None = None, *, policy: Policy | None = None
    ) -> dict[str, Any]:
        """`tools` and `system` of a request: the lookup tool only when the schema is a catalogue."""
        view = await self._schema.for_policy(policy).view()
        return {
            "tools": self._tools[view.catalog is not None],
            "system": await self.system(platform, today, policy=policy),
        }

    async def system(
        self, platform: Platform, today: dt.date | None = None, *, policy: Policy | None = None
    ) -> list[dict[str, Any]]:
        view = await self._schema.for_policy(policy).view()
        base = await self.knowledge(policy)
        schema = self._prompts.render(
            "SCHEMA.md",
            schema=view.text,
            catalogue=view.catalog is not None,
            complete=view.complete,
            tables=view.tables,
        )
        if base is not None and base.entries:
            prefixed = base.prefix
            knowledge = self._prompts.render("KNOWLEDGE.md", knowledge=prefixed.text, left_out=prefixed.left_out)
            schema = f"{schema}\n\n{knowledge}"
        context = self._prompts.render(
            "CONTEXT.md",
            today=(today or dt.date.today()).isoformat(),
            format_guidance=self._prompts.format_guidance(platform),
        )
        return [
            {"type": "text", "text": self._static},
            {"type": "text", "text": schema, "cache_control": EPHEMERAL},
            {"type": "text", "text": context},
        ]

    async def retrieved(self, question: str, *, policy: Policy | None = None) -> str:
        """What goes beside the question: the tables its words match when the catalogue leaves some out,
        and the knowledge entries it matches that the prefix had no room for."""
        view = await self._schema.for_policy(policy).view()
        base = await self.knowledge(policy)
        tables = ""
        if view.catalog is not None and not view.complete:
            words = question
            if base is not None:
                words = f"{question} {base.expansion(question)}"  # the team's words for it
            tables = view.catalog.matches(words, RETRIEVED_TABLES)
        knowledge = base.retrieve(question) if base is not None else ""
        return self._prompts.render("RETRIEVED.md", tables=tables, knowledge=knowledge)

    async def knowledge(self, policy: Policy | None) -> KnowledgeBase | None:
        """The knowledge `policy`'s people see: none of it that names a table in scope they may not read."""
        if self._knowledge is None or policy is None:
            return self._knowledge
        in_scope = await self._schema.tables_in_scope()
        hidden = frozenset(table for table in in_scope if table not in policy.tables)
        if (seen := self._knowledge_seen.get(hidden)) is None:
            seen = self._knowledge_seen[hidden] = self._knowledge.without_tables(hidden)
        return seen

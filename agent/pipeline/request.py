"""The request prefix: tools, then the system prompt (static rules, then the schema and the team's
knowledge within its budget) with a cache breakpoint, then what changes per request (date, platform
format) after it. What is retrieved for one question (the tables a large warehouse's catalogue leaves
out, knowledge past its budget) goes with the question itself, after every cached block, so neither
the prefix nor an earlier turn's cache changes."""

from __future__ import annotations

import datetime as dt
from typing import Any

from agent.knowledge import KnowledgeBase
from agent.knowledge.agents_schema import AgentsSchema
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
        agents_schema: AgentsSchema | None = None,
    ) -> None:
        self._prompts = prompts
        self._schema = schema
        self._knowledge = knowledge
        self._agents_schema = agents_schema  # joins the warehouse's own descriptions into `knowledge`, once
        self._tools = {
            lookup: prompts.tools(max_rows=max_rows, chart_max_rows=chart_max_rows, lookup=lookup)
            for lookup in (False, True)
        }
        self._static = prompts.render("SYSTEM.md", max_rows=max_rows)

    async def parts(self, platform: Platform, today: dt.date | None = None) -> dict[str, Any]:
        """`tools` and `system` of a request: the lookup tool only when the schema is a catalogue."""
        view = await self._schema.view()
        return {"tools": self._tools[view.catalog is not None], "system": await self.system(platform, today)}

    async def system(self, platform: Platform, today: dt.date | None = None) -> list[dict[str, Any]]:
        view = await self._schema.view()
        if self._agents_schema is not None:
            await self._agents_schema.join()
        schema = self._prompts.render(
            "SCHEMA.md",
            schema=view.text,
            catalogue=view.catalog is not None,
            complete=view.complete,
            tables=view.tables,
        )
        if self._knowledge is not None and self._knowledge.entries:
            prefixed = self._knowledge.prefix
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

    async def retrieved(self, question: str) -> str:
        """What goes beside the question: the tables its words match when the catalogue leaves some out,
        and the knowledge entries it matches that the prefix had no room for."""
        view = await self._schema.view()
        if self._agents_schema is not None:
            await self._agents_schema.join()
        tables = ""
        if view.catalog is not None and not view.complete:
            words = question
            if self._knowledge is not None:
                words = f"{question} {self._knowledge.expansion(question)}"  # the team's words for it
            tables = view.catalog.matches(words, RETRIEVED_TABLES)
        knowledge = self._knowledge.retrieve(question) if self._knowledge is not None else ""
        return self._prompts.render("RETRIEVED.md", tables=tables, knowledge=knowledge)

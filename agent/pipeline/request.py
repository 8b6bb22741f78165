"""The request prefix: tools, then the system prompt (static rules, then the schema) with a cache
breakpoint, then what changes per request (date, platform format) after it."""

from __future__ import annotations

import datetime as dt
from typing import Any

from agent.pipeline.context import EPHEMERAL
from agent.prompts import PromptLibrary
from agent.runner import Platform
from agent.schema import SchemaCache


class RequestPrefix:
    def __init__(self, prompts: PromptLibrary, schema: SchemaCache, *, max_rows: int, chart_max_rows: int) -> None:
        self._prompts = prompts
        self._schema = schema
        self.tools = prompts.tools(max_rows=max_rows, chart_max_rows=chart_max_rows)
        self._static = prompts.render("SYSTEM.md", max_rows=max_rows)

    async def system(self, platform: Platform, today: dt.date | None = None) -> list[dict[str, Any]]:
        schema = self._prompts.render("SCHEMA.md", schema=await self._schema.get())
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

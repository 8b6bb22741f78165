"""The Slack Web API client the bot posts with: slack_sdk's own, with each API call a span (agent/tracing.py)
named by its method (`chat.postMessage`: bounded), carrying the run's id. With tracing off the span costs a
check of one variable."""

from __future__ import annotations

from typing import Any

from slack_sdk.web.async_client import AsyncWebClient
from slack_sdk.web.async_slack_response import AsyncSlackResponse

from agent.tracing import span


class TracedWebClient(AsyncWebClient):
    async def api_call(self, api_method: str, **kwargs: Any) -> AsyncSlackResponse:  # type: ignore[override]
        with span(f"slack {api_method}", slack__method=api_method) as traced:
            response = await super().api_call(api_method, **kwargs)
            traced.set(slack__ok=bool(response.get("ok")))
            return response

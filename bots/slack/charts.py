"""Charts in Slack: each chart the answer drew is rendered to PNG on the server (vl-convert, no
browser) and uploaded in the thread with files.uploadV2, its alt text saying what it shows."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_client import AsyncWebClient

from agent.charts import Chart, render_png
from agent.metrics import Metrics

log = logging.getLogger(__name__)


async def upload_charts(
    client: AsyncWebClient, metrics: Metrics, *, channel: str, thread_ts: str, charts: list[dict[str, Any]]
) -> int:
    """Upload every chart; a chart that fails is logged and counted, never a failed answer."""
    uploaded = 0
    for raw in charts:
        chart = Chart.model_validate(raw)
        try:
            png = await asyncio.to_thread(render_png, chart.spec)
            await client.files_upload_v2(
                channel=channel,
                thread_ts=thread_ts,
                content=png,
                filename=f"{chart.id}-{chart.query_id}.png",
                title=chart.title or chart.describe(),
                alt_txt=chart.describe()[:1000],
            )
            uploaded += 1
        except (SlackApiError, ValueError, RuntimeError):
            log.warning("chart %s could not be posted to %s", chart.id, channel, exc_info=True)
            metrics.chart_errors.labels("render").inc()
    return uploaded

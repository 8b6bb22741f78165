"""Charts in Slack: each chart the answer drew is rendered to PNG on the server (vl-convert, no
browser, in a process of its own with a time limit: agent/chart_images.py) and uploaded in the thread
with files.uploadV2, its alt text saying what it shows."""

from __future__ import annotations

import logging

from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_client import AsyncWebClient

from agent.chart_images import ChartRenderError, render_png
from agent.charts import Chart
from agent.metrics import Metrics
from bots.slack import refusals

log = logging.getLogger(__name__)


async def upload_charts(
    client: AsyncWebClient,
    metrics: Metrics,
    *,
    channel: str,
    thread_ts: str,
    charts: list[Chart],
    timeout_s: float,
    rendered: dict[str, bytes] | None = None,
) -> int:
    """Upload every chart; a chart that fails is logged and counted, never a failed answer. Slack's
    routine refusals (bots/slack/refusals.py: a missing scope, rate limiting) are raised, for the caller
    to tell the person. `rendered` gets each chart's PNG by its id (a report's PDF draws them again)."""
    uploaded = 0
    for chart in charts:
        try:
            png = await render_png(chart.spec, timeout_s=timeout_s)
            if rendered is not None:
                rendered[chart.id] = png
            await client.files_upload_v2(
                channel=channel,
                thread_ts=thread_ts,
                content=png,
                filename=f"{chart.id}-{chart.query_id}.png",
                title=chart.title or chart.describe(),
                alt_txt=chart.describe()[:1000],
            )
            uploaded += 1
        except SlackApiError as exc:
            metrics.chart_errors.labels("render").inc()
            if refusals.routine(exc):
                raise  # the next chart would be refused too; the caller says why
            refusals.log_refusal(log, f"post chart {chart.id} to {channel}", exc)
        except ChartRenderError:
            log.warning("chart %s could not be rendered", chart.id, exc_info=True)
            metrics.chart_errors.labels("render").inc()
    return uploaded

"""The Grafana dashboard, kept as code: `python deploy/grafana/generate.py` writes
deploy/grafana/dashboards/agent.json, which Grafana provisions. Edit here, not in Grafana.

Generated rather than hand-written because PromQL cannot read agent/pricing.yaml: the cost panels carry
the default model's prices, read from that file at generation time. A test fails when the committed JSON
differs from what this script writes, so a price change means running it again.

Every query reads only metrics the app exposes (agent/metrics.py); tests/end_to_end/test_dashboards.py evaluates each
one against a real Prometheus scraping the app. Every labelled counter has its
series from start-up (agent/metrics.py); sums still end in `or on() vector(0)`, so a filter that matches no
series (a target not scraped yet) shows 0 rather than "No data".
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from agent.config import DEFAULT_MODEL
from agent.metrics import TOKEN_TYPES
from agent.pricing import load_pricing

OUTPUT = Path(__file__).resolve().parent / "dashboards" / "agent.json"
UID = "clickhouse-analyst"
DATASOURCE = {"type": "prometheus", "uid": "${datasource}"}
RATE = "$__rate_interval"
RANGE = "$__range"
ZERO = " or on() vector(0)"  # a filter that matches no series reads as 0


def target(expr: str, legend: str = "", *, instant: bool = False) -> dict[str, Any]:
    return {"expr": expr, "legendFormat": legend or "__auto", "instant": instant, "range": not instant}


def quantiles(metric: str, by: str = "", legend: str = "") -> list[dict[str, Any]]:
    labels = f"le, {by}" if by else "le"
    return [
        target(
            f"histogram_quantile({q}, sum by ({labels}) (rate({metric}_bucket[{RATE}])))", f"p{round(q * 100)}{legend}"
        )
        for q in (0.5, 0.95)
    ]


def panel(kind: str, title: str, description: str, targets: list[dict[str, Any]], **field: Any) -> dict[str, Any]:
    """`field` sets fieldConfig.defaults (unit, decimals, ...); `overrides` and `options` pass through."""
    overrides = field.pop("overrides", [])
    options = field.pop("options", {})
    for ref, item in zip("ABCDEFGH", targets, strict=False):
        item.update(refId=ref, datasource=DATASOURCE)
    return {
        "type": kind,
        "title": title,
        "description": description,
        "datasource": DATASOURCE,
        "targets": targets,
        "fieldConfig": {"defaults": field, "overrides": overrides},
        "options": options,
    }


def timeseries(title: str, description: str, targets: list[dict[str, Any]], unit: str = "short") -> dict[str, Any]:
    options = {"legend": {"displayMode": "list", "placement": "bottom"}, "tooltip": {"mode": "multi"}}
    return panel("timeseries", title, description, targets, unit=unit, min=0, options=options)


def per_minute(expr: str) -> str:
    return f"{expr} * 60"


def cost_expr(window: str, *, per_hour: bool) -> str:
    """Dollars: each token type's count times its price per million, for the default model."""
    price = load_pricing().price(DEFAULT_MODEL)
    if price is None:
        raise SystemExit(f"agent/pricing.yaml has no price for the default model {DEFAULT_MODEL}")
    fn = "rate" if per_hour else "increase"
    parts = "\n  or ".join(
        f'{fn}(agent_llm_tokens_total{{type="{kind}"}}[{window}]) * {getattr(price, kind):g}' for kind in TOKEN_TYPES
    )
    scale = " * 3600" if per_hour else ""
    return f"sum(\n  {parts}\n){scale} / 1e6"


def price_note() -> str:
    price = load_pricing().price(DEFAULT_MODEL)
    assert price is not None
    figures = ", ".join(f"{kind} ${getattr(price, kind):g}" for kind in TOKEN_TYPES)
    return (
        f"Prices are {DEFAULT_MODEL}'s from agent/pricing.yaml ({figures} per million tokens), baked in when "
        "deploy/grafana/generate.py ran: tokens are not labelled by model, so follow-ups (a cheaper model) are "
        "priced as the main model and this reads a little high. Check pricing.yaml against Anthropic's price "
        "list before relying on it."
    )


def runs_row() -> Iterator[dict[str, Any]]:
    yield timeseries(
        "Runs per minute, by interface and outcome",
        "Questions finished per minute. Healthy: it follows traffic and nearly all are `answered`; `no_data` "
        "(the model cited queries it never ran) is rare; `error` (model or ClickHouse unreachable) and `capped` "
        "stay near zero; `cancelled` is a person leaving the page.",
        [
            target(
                per_minute(f"sum by (interface, outcome) (rate(agent_runs_total[{RATE}]))"), "{{interface}} {{outcome}}"
            )
        ],
    )
    yield timeseries(
        "Web requests per minute, by status",
        "Requests to the web app by route template and status class. Healthy: 2xx throughout (Prometheus's "
        "own /metrics scrapes are a steady few per minute); 4xx are bad input, a missing token or the rate "
        "limit, a few are normal; any 5xx is a server fault to look up in the log. `unmatched` is a path no "
        "route serves.",
        [
            target(
                per_minute(f"sum by (status, route) (rate(agent_web_requests_total[{RATE}]))"), "{{status}} {{route}}"
            )
        ],
    )
    yield timeseries(
        "Time to first event (p50 / p95)",
        "From a question's start to the first thing the person sees after `started`: streamed text, a "
        "thinking step, a query starting, or an error. It is mostly the model's first reply. Healthy: p50 a "
        "few seconds, p95 under about 15 s; a rise with answer time flat means the model is slow to start.",
        quantiles("agent_run_first_event_seconds", "interface", " {{interface}}"),
        unit="s",
    )
    yield timeseries(
        "Time to answer (p50 / p95)",
        "Wall time of a whole question, follow-ups included. Healthy: p50 10–30 s, p95 under a minute; the "
        "AgentSlowAnswers alert fires when p95 stays over two minutes.",
        quantiles("agent_run_duration_seconds"),
        unit="s",
    )
    yield timeseries(
        "Event-loop lag (worst of 30 s, p99)",
        "How much later than asked the server's event loop woke up. Every request of a process waits on its "
        "loop, so lag is everyone's delay: /healthz, streams, Slack. Healthy: under 50 ms; the "
        "AgentEventLoopStalled alert fires when the worst stays over half a second. Look in the log for what "
        "ran then (a large chart, a download, a slow disk).",
        [
            target("max(agent_event_loop_lag_max_seconds)", "worst"),
            target(f"histogram_quantile(0.99, sum by (le) (rate(agent_event_loop_lag_seconds_bucket[{RATE}])))", "p99"),
        ],
        unit="s",
    )


def loop_row() -> Iterator[dict[str, Any]]:
    yield timeseries(
        "Rounds per run",
        "Model round-trips per question (the cap is AGENT_MAX_ROUNDS, 10 by default). Healthy: 2–4, a query "
        "round then the answer; a rising p95 means the model wanders or keeps fixing SQL.",
        [
            *quantiles("agent_run_rounds"),
            target(f"sum(rate(agent_run_rounds_sum[{RATE}])) / sum(rate(agent_run_rounds_count[{RATE}]))", "mean"),
        ],
    )
    yield panel(
        "stat",
        "Runs hitting the round cap",
        "Runs that used every round and were answered by the synthesis call, over the dashboard's range, and "
        "their share of all runs. Healthy: 0, at most a percent or two; more means questions the schema cannot "
        "answer directly, or a prompt that lets the model wander.",
        [
            target(f"sum(increase(agent_runs_capped_total[{RANGE}]))", "capped runs", instant=True),
            target(
                f"sum(increase(agent_runs_capped_total[{RANGE}])) / sum(increase(agent_runs_total[{RANGE}]))",
                "share of runs",
                instant=True,
            ),
        ],
        unit="short",
        decimals=0,
        overrides=[
            {
                "matcher": {"id": "byFrameRefID", "options": "B"},
                "properties": [{"id": "unit", "value": "percentunit"}, {"id": "decimals", "value": 1}],
            }
        ],
    )
    yield timeseries(
        "Guard interventions per hour, by guard",
        "Times a loop guard stepped in: duplicate_sql (identical SQL reused), citation_without_query and "
        "no_data_answer (citations of queries never run), think_only_rounds, empty_answer, repaired and "
        "malformed_tool_input, context_compaction. Healthy: a few duplicate_sql and repaired_tool_input; "
        "citation or malformed spikes usually follow a prompt or model change.",
        [target(f"sum by (guard) (rate(agent_guard_interventions_total[{RATE}])) * 3600{ZERO}", "{{guard}}")],
    )


def model_row() -> Iterator[dict[str, Any]]:
    yield timeseries(
        "Model calls per minute, by role and status",
        "Calls to the model: main (the loop), synthesis (at the round cap), followup (suggested questions, a "
        "cheaper model). `error` is a call that failed after the client's retries. Healthy: no `error` at all; "
        "the AgentModelErrors alert fires above 10%.",
        [target(per_minute(f"sum by (role, status) (rate(agent_llm_calls_total[{RATE}]))"), "{{role}} {{status}}")],
    )
    yield timeseries(
        "Model fallbacks per hour, by role and reason",
        "Calls that moved on to the next model of their role's list (AGENT_MODEL, AGENT_FOLLOWUP_MODEL) because "
        "the one before was overloaded, rate limited past its retries or unreachable. Each costs a cold prompt "
        "cache on the next model. Healthy: none; a steady rate means the first model is short of capacity.",
        [
            target(
                f"sum by (role, reason) (rate(agent_llm_fallbacks_total[{RATE}])) * 3600{ZERO}", "{{role}} {{reason}}"
            )
        ],
    )
    yield timeseries(
        "Tokens per minute, by type",
        "Model tokens: input (uncached prompt), cache_read (prompt served from the cache), cache_creation "
        "(prompt written to the cache), output. Healthy: cache_read the largest by far once warm; output "
        "small; uncached input only the newest part of each conversation.",
        [target(per_minute(f"sum by (type) (rate(agent_llm_tokens_total[{RATE}]))"), "{{type}}")],
    )
    yield timeseries(
        "Cache-read share of prompt tokens",
        "Prompt tokens served from the cache, out of all prompt tokens (input, cache_read, cache_creation). "
        "Healthy: above about 70% under steady traffic, since the system prompt, tools and schema are a cached "
        "prefix; a drop means the prefix changed between calls (a schema refresh, a prompt edit) or traffic "
        "too sparse for the 5-minute cache.",
        [
            target(
                f'sum(rate(agent_llm_tokens_total{{type="cache_read"}}[{RATE}]))\n'
                f'/ sum(rate(agent_llm_tokens_total{{type=~"input|cache_read|cache_creation"}}[{RATE}]))',
                "cache-read share",
            )
        ],
        unit="percentunit",
    )
    yield timeseries(
        "Estimated model cost, $ per hour",
        f"Spend rate from token counts. {price_note()} Healthy: it moves with runs per minute; cost per run "
        "rising on its own means longer conversations or a colder cache.",
        [target(cost_expr(RATE, per_hour=True), "$ per hour")],
        unit="currencyUSD",
    )
    yield panel(
        "stat",
        "Estimated model cost over the range",
        f"Dollars spent on the model over the dashboard's time range. {price_note()} Healthy: about the runs "
        "in the range times a typical run's cost; a jump without more runs is worth a look.",
        [target(cost_expr(RANGE, per_hour=False), "$", instant=True)],
        unit="currencyUSD",
        decimals=2,
    )


def sql_row() -> Iterator[dict[str, Any]]:
    yield timeseries(
        "SQL queries per minute, by status",
        "Queries the model asked for: ok, error (refused by the statement check, or ClickHouse failed it) and "
        "reused (identical SQL already ran in the run; not run again). Healthy: errors well under a quarter of "
        "ok + error, since the model fixes its own mistakes; the AgentSqlErrorRatio alert fires above 40%.",
        [target(per_minute(f"sum by (status) (rate(agent_sql_queries_total[{RATE}]))"), "{{status}}")],
    )
    yield panel(
        "bargauge",
        "Top SQL error codes over the range",
        "Failed queries by ClickHouse error code. Healthy: a few 47 (unknown identifier), 46 (unknown "
        "function) or 62 (syntax), which the model fixes from the hint. `none` is a query the statement check "
        "refused (the model reached outside the allowed tables or functions). 159, 241, 307, 158 are time, "
        "memory, bytes and rows limits: questions too heavy for the limits. 60 and 81 after a schema change.",
        [
            target(
                f"topk(10, sum by (code) (increase(agent_sql_errors_total[{RANGE}]))){ZERO}", "{{code}}", instant=True
            )
        ],
        unit="short",
        decimals=0,
        options={"displayMode": "basic", "orientation": "horizontal", "reduceOptions": {"calcs": ["lastNotNull"]}},
    )
    yield timeseries(
        "SQL latency (p50 / p95)",
        "Wall time of one query, from the statement check to the last row. Healthy on the demo data: p50 well "
        "under a second, p95 a few seconds; queries stop at MAX_EXECUTION_TIME (30 s by default).",
        quantiles("agent_sql_duration_seconds"),
        unit="s",
    )


def slack_row() -> Iterator[dict[str, Any]]:
    yield timeseries(
        "Slack events per minute, by type",
        "Events and button clicks Slack delivered: app_mention, message (DMs and threads), block_actions "
        "(buttons), assistant_thread_* (the assistant pane), other. Healthy: it follows use in Slack; flat "
        "zero while people are asking means the bot is not receiving (token, Socket Mode or the request URL).",
        [target(per_minute(f"sum by (type) (rate(agent_slack_events_total[{RATE}]))") + ZERO, "{{type}}")],
    )
    yield timeseries(
        "Slack duplicates and ignored messages per hour",
        "Deliveries dropped as already handled (event: Slack retried an event; message: the same message came "
        "as app_mention and message) and messages not answered, by reason (edits, bots, messages not addressed "
        "to the bot, ...). Healthy: duplicates a small fraction of events (Slack retries when the ack is late); "
        "not_addressed is normal in busy channels.",
        [
            target(f"sum by (kind) (rate(agent_slack_duplicates_total[{RATE}])) * 3600{ZERO}", "duplicate {{kind}}"),
            target(
                f"sum by (reason) (rate(agent_slack_events_ignored_total[{RATE}])) * 3600{ZERO}",
                "ignored {{reason}}",
            ),
        ],
    )
    yield panel(
        "stat",
        "Slack feedback over the range",
        "Thumbs up and down people clicked under Slack answers in the dashboard's range. Healthy: mostly up; "
        "read the thumbs-down conversations (the store keeps the feedback per run) before changing prompts.",
        [target(f"sum by (value) (increase(agent_slack_feedback_total[{RANGE}])){ZERO}", "{{value}}", instant=True)],
        unit="short",
        decimals=0,
    )


# The eval runs' figures (evals/metrics.py) are the same on every host that serves them: `max by` keeps one.
RECENT = "7d"  # the recent level the AgentEvalPassRateDrop alert compares with (deploy/prometheus/alerts.yml)


def evals_row() -> Iterator[dict[str, Any]]:
    yield timeseries(
        "Eval pass rate by suite, and its recent level",
        "Share of each suite's cases the latest `agent evals` run passed (a scheduled run, or one after the "
        f"team's knowledge changed: process/evals_job.py), and its {RECENT} average. The line steps at each "
        "run. Healthy: flat or rising and close to its average; a step down after a prompt, model or knowledge "
        "change is what the AgentEvalPassRateDrop alert catches (more than 10 points under the average). "
        "Compare the runs' reports (results.json) with `agent evals compare`.",
        [
            target("max by (suite) (agent_eval_pass_rate)", "{{suite}}"),
            target(
                f"max by (suite) (avg_over_time(agent_eval_pass_rate[{RECENT}]))", f"{{{{suite}}}} {RECENT} average"
            ),
        ],
        unit="percentunit",
    )
    yield timeseries(
        "Eval pass rate by tag",
        "The latest run's pass rate per tag of each suite (tags come from the suite files). Healthy: every tag "
        "near its suite's rate; one tag falling alone points at that kind of question (a knowledge entry, a "
        "table, a guard).",
        [target("max by (suite, tag) (agent_eval_tag_pass_rate)", "{{suite}} {{tag}}")],
        unit="percentunit",
    )
    yield timeseries(
        "Eval dollars per case, by suite",
        "The model's mean price of one case in the latest run (agent/pricing.yaml, at the answering model's "
        "price). Healthy: steady from run to run; a rise means more rounds or a colder cache per question.",
        [target("max by (suite) (agent_eval_case_cost_usd)", "{{suite}}")],
        unit="currencyUSD",
    )
    yield timeseries(
        "Eval p95 time per case, by suite",
        "The 95th percentile of one case's time to answer in the latest run. Healthy: under a minute and "
        "steady; it rises with the model's latency or with questions that need more rounds.",
        [target("max by (suite) (agent_eval_case_p95_seconds)", "{{suite}}")],
        unit="s",
    )


ROWS = [
    ("Runs and latency", runs_row),
    ("The loop", loop_row),
    ("The model", model_row),
    ("SQL", sql_row),
    ("Slack", slack_row),
    ("Evals", evals_row),
]


def laid_out() -> list[dict[str, Any]]:
    """Rows of panels, two or three abreast, eight units high."""
    panels: list[dict[str, Any]] = []
    y = 0
    for title, row in ROWS:
        panels.append({"type": "row", "title": title, "collapsed": False, "panels": [], "gridPos": _grid(0, y, 24, 1)})
        y += 1
        items = list(row())
        per_line = 3 if len(items) % 3 == 0 else 2
        width = 24 // per_line
        for index, item in enumerate(items):
            item["gridPos"] = _grid((index % per_line) * width, y + (index // per_line) * 8, width, 8)
        y += 8 * -(-len(items) // per_line)
        panels += items
    for number, item in enumerate(panels, start=1):
        item["id"] = number
    return panels


def _grid(x: int, y: int, w: int, h: int) -> dict[str, int]:
    return {"x": x, "y": y, "w": w, "h": h}


def dashboard() -> dict[str, Any]:
    return {
        "uid": UID,
        "title": "ClickHouse analyst",
        "description": "Runs, latency, the model, SQL, Slack and the evals' trend. What each panel answers: "
        "docs/operations.md.",
        "tags": ["clickhouse-analyst"],
        "timezone": "browser",
        "editable": False,
        "graphTooltip": 1,
        "refresh": "30s",
        "time": {"from": "now-6h", "to": "now"},
        "schemaVersion": 39,
        "version": 1,
        "templating": {
            "list": [
                {
                    "name": "datasource",
                    "label": "Data source",
                    "type": "datasource",
                    "query": "prometheus",
                    "current": {"text": "Prometheus", "value": "prometheus"},
                    "hide": 0,
                }
            ]
        },
        "annotations": {"list": []},
        "panels": laid_out(),
    }


def render() -> str:
    return json.dumps(dashboard(), indent=2, ensure_ascii=False) + "\n"


def main(argv: list[str]) -> int:
    """Write the dashboard; with --check, only say whether the committed file is current (exit 1 if not)."""
    text = render()
    if "--check" in argv:
        current = OUTPUT.exists() and OUTPUT.read_text() == text
        print(f"{OUTPUT} is {'up to date' if current else 'stale: run python deploy/grafana/generate.py'}")
        return 0 if current else 1
    OUTPUT.write_text(text)
    print(f"wrote {OUTPUT}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

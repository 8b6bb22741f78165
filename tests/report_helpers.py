"""A report the scripted model writes, for the Slack, web and browser tests of reports: three steps (two
queries and a chart), the report under its headings with one figure its query holds (21.7) and one it does not
(9.2, marked), its figure correction round (the wrong figure stays), and follow-ups."""

from __future__ import annotations

from typing import Any

from tests.fakes.anthropic_api import Reply
from tests.slack_helpers import sql_call

MONTHLY = (
    "SELECT month, round(avg(dep_delay), 1) AS avg_dep_delay FROM nycflights13.flights GROUP BY month ORDER BY month"
)
JULY_BY_ORIGIN = (
    "SELECT origin, round(avg(dep_delay), 1) AS avg_dep_delay FROM nycflights13.flights WHERE month = 7 "
    "GROUP BY origin ORDER BY origin"
)
CHART = {"query_id": "Q1", "kind": "line", "x": "month", "y": "avg_dep_delay", "title": "Delay by month"}
# 21.7 is July's cell of Q1 (verified); 9.2 is no cell nor derivation of Q1: marked as unverified.
REPORT = """## Summary
Departure delays peaked in July at 21.7 minutes on average [Q1].

## Findings
- July had the highest average departure delay, 21.7 minutes [Q1] (chart C1)
- Every origin airport was late in July, EWR most of all [Q2]
- Delays were 9.2 minutes lower in the spring [Q1]

## How this was found
Q1 averaged the departure delay per month; Q2 split July by origin airport.

## Caveats
The data covers flights from New York in 2013 only.

## What could not be answered
Nothing."""


def report_script(text: str = REPORT) -> list[Any]:
    """Three steps (two queries and a chart), the report, its figure correction round (the wrong figure stays),
    and follow-ups."""
    return [
        Reply(tool_calls=[sql_call("Average departure delay per month", MONTHLY)]),
        Reply(tool_calls=[sql_call("July's delays per origin airport", JULY_BY_ORIGIN)]),
        Reply(tool_calls=[("chart", CHART)]),
        Reply(text=text),
        Reply(text=text),
        Reply(text="[]"),
    ]


RAIN = (
    "SELECT month, round(avg(precip), 3) AS precip FROM nycflights13.weather WHERE month IN (6, 7) "
    "GROUP BY month ORDER BY month"
)
PARTIAL = """## Summary
Departure delays peaked in July at 21.7 minutes on average [Q1].

## Findings
- Every origin airport was late in July, EWR most of all [Q2]

## How this was found
Q1 averaged the delay per month; Q2 split July by origin airport.

## What remains
Whether the weather explains it: precipitation in June and July."""


def partial_then_resumed_script() -> tuple[list[Any], list[Any]]:
    """With a budget of two queries: three asked at once, two run, the third refused; the one call with no tools
    writes the partial report. Resumed (one more budget): the third query, then the whole report."""
    first = [
        Reply(
            tool_calls=[
                (
                    "execute_sql",
                    {
                        "queries": [
                            {"question": "Average departure delay per month", "sql": MONTHLY},
                            {"question": "July's delays per origin airport", "sql": JULY_BY_ORIGIN},
                            {"question": "Precipitation in June and July", "sql": RAIN},
                        ]
                    },
                )
            ]
        ),
        Reply(text=PARTIAL),
        Reply(text="[]"),
    ]
    whole = REPORT.replace(" (chart C1)", "").replace("- Delays were 9.2 minutes lower in the spring [Q1]\n", "")
    resumed = [Reply(tool_calls=[sql_call("Precipitation in June and July", RAIN)]), Reply(text=whole)]
    return first, resumed

"""Attacks on a report in Slack from hostile text (the asker's question, the model steered by data): no part
of the thread may ping anyone or hide a link's target, in any section, the query list or the fallback text."""

from __future__ import annotations

import re

from agent.reports.model import Finding, Report, ReportOutcome, ReportQuery
from bots.slack.report import report_parts
from tests.fakes.slack_rules import check_blocks

HOSTILE = "<!channel> <!here> <@U0ADMIN01> <!subteam^S123> <https://evil.example|https://bank.example> [bank](https://evil.example)"
MRKDWN_LIVE = re.compile(r"<[!@#]|<https?://")
LIVE = re.compile(r"<[!@#]|<https?://|\]\(https?://evil")


def hostile_report() -> Report:
    return Report(
        id="a" * 32,
        question=f"why? {HOSTILE}",
        outcome=ReportOutcome.PARTIAL,
        stopped_by="steps",
        summary=f"Summary {HOSTILE} [Q1]",
        findings=[Finding(text=f"Finding {HOSTILE} [Q1]", citations=["Q1"])],
        method=f"Method {HOSTILE}",
        caveats=f"Caveat {HOSTILE}",
        unanswered=f"Unanswered {HOSTILE}",
        remaining=f"Remaining {HOSTILE}",
        queries=[ReportQuery(id="Q1", question=f"Query {HOSTILE}", sql="SELECT 1", row_count=1)],
        runs=["a" * 32],
    )


def test_no_section_of_a_report_pings_or_disguises_a_link_in_slack() -> None:
    for web_url in (None, "https://analyst.example"):
        parts = report_parts(hostile_report(), web_url)
        for part in parts:
            check_blocks(part.blocks)
            # the fallback `text` is mrkdwn, whose links are `<url|label>` only
            assert not MRKDWN_LIVE.search(part.text), part.text
            for text in [b.get("text", "") for b in part.blocks if b["type"] == "markdown"]:
                assert not LIVE.search(text), text

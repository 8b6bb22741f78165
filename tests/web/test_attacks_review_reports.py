"""Attacks on reports in the web: Resume under a policy other than the one the report was asked under, and
the downloads' headers for a hostile question."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from agent.app import AgentApp
from tests.fakes.anthropic_api import FakeAnthropic
from tests.report_helpers import partial_then_resumed_script
from tests.web.people_helpers import PROXY_MODE, Served
from tests.web.test_web_reports import ask_report

ANA = "ana@example.com"
ASKED_UNDER = """
policies:
  - name: everything
    members:
      - email: ana@example.com
    tables:
      nycflights13.flights:
      nycflights13.weather:
"""
NOW_UNDER = """
policies:
  - name: jfk
    members:
      - email: ana@example.com
    tables:
      nycflights13.flights: origin = 'JFK'
      nycflights13.weather: origin = 'JFK'
"""


async def test_resume_under_another_policy_is_refused_before_anything_runs_or_is_charged(
    make_app: Callable[..., AgentApp], tmp_path: Path, fake_anthropic: FakeAnthropic
) -> None:
    """Ana's report was asked under `everything` (its checkpoint holds every airport's rows); her policy is now
    `jfk`. Resume must not go on under `jfk` with rows `jfk` may not read, nor start a run that can only fail:
    a clear 409 before any model call, and the report stays partial (resumable once the policy is hers again)."""
    access = tmp_path / "access.yaml"
    access.write_text(ASKED_UNDER, encoding="utf-8")
    first, resumed = partial_then_resumed_script()
    fake_anthropic.script(*first)
    async with Served(make_app, tmp_path, agent_access_file=str(access), agent_report_max_queries=2, **PROXY_MODE) as s:
        report = (await ask_report(s.client(email=ANA), "why did delays rise in July?"))[-1].data["result"]["report"]
        assert report["outcome"] == "partial"
    access.write_text(NOW_UNDER, encoding="utf-8")
    fake_anthropic.reset()
    fake_anthropic.script(*resumed)
    async with Served(make_app, tmp_path, agent_access_file=str(access), agent_report_max_queries=2, **PROXY_MODE) as s:
        ana = s.client(email=ANA)
        assert (await ana.get("/api/me")).json()["policy"] == "jfk"
        response = await ana.post("/api/reports", json={"resume": report["id"]})
        body = response.text
        stored = (await ana.get(f"/api/reports/{report['id']}")).json()
    assert fake_anthropic.requests == [], "no model call under a policy the checkpoint was not taken under"
    assert stored["state"] == "partial", stored["state"]
    assert response.status_code == 409, body
    assert "Traceback" not in body and "checkpoint was taken under policy" not in body


async def test_downloads_of_a_hostile_question_are_attachments_with_a_safe_name(
    make_app: Callable[..., AgentApp], tmp_path: Path, fake_anthropic: FakeAnthropic
) -> None:
    """Held: the file name is a slug of the question (no quote, slash, CR/LF), and the Markdown is an attachment
    the browser does not sniff into HTML."""
    from tests.report_helpers import report_script

    fake_anthropic.script(*report_script())
    question = 'x"; filename="evil.html\r\nSet-Cookie: a=b <script>alert(1)</script> ../../etc/passwd'
    async with Served(make_app, tmp_path, **PROXY_MODE) as s:
        ana = s.client(email=ANA)
        report_id = (await ask_report(ana, question))[-1].data["result"]["report"]["id"]
        for kind in ("md", "pdf"):
            got = await ana.get(f"/api/reports/{report_id}.{kind}")
            disposition = got.headers["content-disposition"]
            assert got.status_code == 200 and disposition.startswith("attachment;")
            name = disposition.split('filename="', 1)[1].split('"', 1)[0]
            assert name.endswith(f".{kind}") and not set(name) & set('"/\\\r\n;<>'), name
            assert "set-cookie" not in {k.lower() for k in got.headers}
            assert got.headers.get("x-content-type-options") == "nosniff"

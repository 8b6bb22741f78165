"""The prompt cache per policy: each policy's people share one cached prefix of its own.

The demo's policy file (deploy/access/nycflights13.yaml: `jfk` and `newark`, the same tables, each
through its own row filters) drives 10 questions per policy, alternating between the policies, through
the real SDK against the fake Messages API (whose caching follows the API's rules: prefix match at the
cache_control breakpoint, 1,024-token minimum, one cache per model). Each question is two rounds: one
query, then the answer. Per policy:

- hit rate: the share of its input tokens served from the cache, cache_read / (input + cache_read +
  cache_creation), over all its questions and over all but its first (when its prefix is written);
- prefixes: distinct (tools, system up to the breakpoint) it sent, which should be one.

And the same 20 questions without a policy file (one prefix for everyone), as the baseline.

    python -m benchmarks.bench_policies
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import tempfile
from pathlib import Path
from typing import Any

from prometheus_client import CollectorRegistry

from agent.app import AgentApp
from agent.config import Settings
from agent.metrics import Metrics
from agent.runner import RunResult
from benchmarks.demo_data import load_demo_elsewhere

QUESTIONS = 10
POLICY_FILE = Path(__file__).resolve().parent.parent / "deploy" / "access" / "nycflights13.yaml"
POLICIES = ("jfk", "newark")


def _prefix_hash(request: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps([request["tools"], request["system"][:2]], sort_keys=True).encode()).hexdigest()


def _hit_rate(results: list[RunResult]) -> float:
    read = sum(r.metrics.cache_read_tokens for r in results)
    total = sum(r.metrics.input_tokens + r.metrics.cache_read_tokens + r.metrics.cache_creation_tokens for r in results)
    return read / total if total else 0.0


async def _measure(settings: Settings) -> dict[str, dict[str, float]]:
    from tests.fakes.anthropic_api import FakeAnthropic, Reply
    from tests.fakes.clients import make_llm

    fake = FakeAnthropic().start()
    app = AgentApp.start(settings, llm=make_llm(fake), metrics=Metrics(CollectorRegistry()))
    names = POLICIES if app.policies is not None else ("no policy",)
    results: dict[str, list[RunResult]] = {name: [] for name in names}
    prefixes: dict[str, set[str]] = {name: set() for name in names}
    try:
        await app.check_access()
        for index in range(QUESTIONS):
            for name in POLICIES:  # without a policy file, the same questions all under no policy
                policy = app.policies.named(name) if app.policies is not None else None
                name = name if policy is not None else "no policy"
                sql = f"SELECT count() AS n FROM nycflights13.flights WHERE month = {index + 1}"
                fake.script(
                    Reply(tool_calls=[("execute_sql", {"queries": [{"question": "Flights that month", "sql": sql}]})]),
                    Reply(text="That month had the flights the query counted [Q1]."),
                )
                seen = len(fake.requests)
                result = await app.runner.run(f"How many flights in month {index + 1}?", policy=policy, followups=False)
                assert not result.error and result.queries and result.queries[0].result.ok, result.error
                results[name].append(result)
                prefixes[name] |= {_prefix_hash(request) for request in fake.requests[seen:]}
    finally:
        await app.close()
        fake.stop()
    return {
        name: {
            "hit_rate": _hit_rate(results[name]),
            "hit_rate_after_first": _hit_rate(results[name][1:]),
            "prefixes": len(prefixes[name]),
        }
        for name in names
    }


def run() -> dict[str, dict[str, float]]:
    with tempfile.TemporaryDirectory() as scratch:
        data = Path(scratch)
        load_demo_elsewhere(data)
        settings = Settings(  # type: ignore[call-arg]
            _env_file=None, agent_data_dir=data, anthropic_api_key="unused", agent_access_file=str(POLICY_FILE)
        )
        figures = asyncio.run(_measure(settings))
        baseline = asyncio.run(_measure(settings.model_copy(update={"agent_access_file": ""})))
        return {**figures, "no policy": baseline["no policy"]}


def report(figures: dict[str, dict[str, float]]) -> None:
    print(f"\nPrompt cache per policy, {QUESTIONS} two-round questions each, alternating ({', '.join(POLICIES)}):")
    print("  (no policy: the same questions without a policy file, one prefix for all)")
    for name, values in figures.items():
        after_first = values["hit_rate_after_first"]
        print(
            f"  {name:9} hit rate {values['hit_rate']:6.1%} (after its first question {after_first:6.1%}),"
            f" {values['prefixes']:.0f} prefix(es)"
        )


if __name__ == "__main__":
    report(run())

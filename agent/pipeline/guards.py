"""Loop guards that real deployments needed, each a small check the loop calls."""

from __future__ import annotations

from agent import linear_re
from agent.pipeline.state import RunState

CITATION = linear_re.compile(r"\[Q(\d+)\]")  # over the model's answer
THINK_ONLY_ROUNDS_BEFORE_NUDGE = 2


def dangling_citations(answer: str, state: RunState) -> list[str]:
    """Citations like [Q7] in an answer that name no query that ran in this run and returned a result
    (a query that failed is no evidence; one that returned no rows is: it shows there are none)."""
    answered = {query.id for query in state.queries if query.result.ok}
    cited = {f"[Q{n}]" for n in CITATION.findall(answer)}
    return sorted((c for c in cited if c[1:-1] not in answered), key=_numeric_order)


def _numeric_order(citation: str) -> tuple[int, str, str]:
    """[Q2] before [Q10], without int(): an answer may cite [Q<thousands of digits>]."""
    number = citation[2:-1].lstrip("0")
    return len(number), number, citation


def note_round_tools(state: RunState, tool_names: list[str]) -> bool:
    """Track think-only rounds; True when the model should be nudged to run SQL."""
    if tool_names and all(name == "think" for name in tool_names):
        state.think_only_rounds += 1
    else:
        state.think_only_rounds = 0
    return state.think_only_rounds >= THINK_ONLY_ROUNDS_BEFORE_NUDGE

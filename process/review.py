"""`agent knowledge review`: the proposals people's thumbs made, and the answers that went wrong without a
thumb (figures left unverified, a clarification nobody answered, a failed run), one at a time, for a person
to decide.

For a thumbs-up, each query that ran is checked again through the model's own SQL path and shown
(question, the rows the person saw, and the entry it would become, byte for byte, its SQL ClickHouse's
canonical text: no comments); if the reviewer accepts it, that entry is appended to the knowledge
folder as a verified query. For a thumbs-down and the others, the question and what went wrong become an
eval case in a suite file.
Decisions are kept, so each proposal is shown once; a skipped one comes back next time."""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agent.db import Database
from agent.knowledge import KnowledgeError
from agent.knowledge.check import canonical_sql
from agent.knowledge.writer import append_verified_query, as_yaml, target_file, verified_query
from chats.proposals import Decision, Proposal, ProposalStore, ProposedQuery
from evals.suite import append_case
from process.untrusted import safe

PREVIEW_ROWS = 5
MAX_ANSWER_CHARS = 400


class Quit(Exception):
    """The reviewer stopped; what was decided so far stays."""


@dataclass
class Reviewed:
    verified: int = 0
    eval_cases: int = 0
    rejected: int = 0
    skipped: int = 0


@dataclass(frozen=True)
class Reviewer:
    name: str
    ask: Callable[[str], str]  # a prompt in, the reviewer's reply out
    say: Callable[[str], None]


async def review(
    store: ProposalStore, db: Database, reviewer: Reviewer, *, knowledge_dir: Path, suite: Path, dataset: str
) -> Reviewed:
    counts = Reviewed()
    pending = await store.pending()
    if not pending:
        reviewer.say("Nothing to review: no thumbs up or down since the last review.")
    try:
        for number, proposal in enumerate(pending, start=1):
            reviewer.say(_header(proposal, number, len(pending)))
            if proposal.kind == "up":
                decision = await _verified(proposal, db, reviewer, knowledge_dir, counts)
            else:
                decision = _eval_case(proposal, reviewer, suite, dataset, counts)
            if decision is None:
                counts.skipped += 1
            else:
                await store.decide(proposal.run_id, decision)
    except Quit:
        pass
    return counts


def _choice(reviewer: Reviewer, prompt: str) -> str:
    reply = reviewer.ask(f"{prompt} [y]es, [n]o, [s]kip, [q]uit: ").strip().lower()[:1]
    if reply == "q":
        raise Quit
    return reply if reply in ("y", "n") else "s"


async def _verified(
    proposal: Proposal, db: Database, reviewer: Reviewer, knowledge_dir: Path, counts: Reviewed
) -> Decision | None:
    if not proposal.queries:
        reviewer.say("  No query ran for this answer; nothing to verify.")
        counts.rejected += 1
        return "rejected"
    replies = []
    for query in proposal.queries:
        question = proposal.question if len(proposal.queries) == 1 else query.question
        replies.append(await _verify_one(db, reviewer, knowledge_dir, question, query, proposal.run_id, counts))
    if "y" in replies:
        return "approved"
    if replies and all(reply == "n" for reply in replies):
        counts.rejected += 1
        return "rejected"
    return None


async def _verify_one(
    db: Database,
    reviewer: Reviewer,
    directory: Path,
    question: str,
    query: ProposedQuery,
    run_id: str,
    counts: Reviewed,
) -> str:
    """Shows the query and the entry it would become, byte for byte, then asks: the reply ("s" when it
    cannot be added). What is written is ClickHouse's canonical text of the SQL, checked again through
    the model's own path, never the model's text with its comments."""
    reviewer.say(_query(query))
    sql, problem = await canonical_sql(db, query.sql)
    try:
        if sql is None:
            written = "".join(f"\n    {line}" for line in query.sql.splitlines())
            raise ValueError(f"the SQL no longer passes the check: {problem}{written}")
        entry = verified_query(
            directory,
            question=question,
            sql=sql,
            verified_by=reviewer.name,
            verified_at=dt.date.today().isoformat(),
            source=f"run {run_id} {query.label}",
        )
        reviewer.say(_entry(entry, target_file(directory)))
        reply = _choice(reviewer, f"Add {query.label} to the knowledge as a verified query?")
        if reply == "y":
            path = append_verified_query(directory, entry)
            reviewer.say(safe(f"  Added to {path} as [verified: {entry['id']}]."))
            counts.verified += 1
        return reply
    except (ValueError, OSError, KnowledgeError) as exc:  # a file that cannot be read or added to
        reviewer.say(safe(f"  Not added: {exc}"))
        return "s"


def _eval_case(proposal: Proposal, reviewer: Reviewer, suite: Path, dataset: str, counts: Reviewed) -> Decision | None:
    reply = _choice(reviewer, f"Add this question as an eval case to {suite}?")
    if reply == "s":
        return None
    if reply == "n":
        counts.rejected += 1
        return "rejected"
    case = eval_case(proposal)
    append_case(suite, case, dataset=dataset)
    reviewer.say(f"  Added to {suite} as {case['id']}.")
    counts.eval_cases += 1
    return "approved"


# What went wrong, for the rubric: the judge passes the new answer only if it does not go wrong the same way.
_WHAT_WENT_WRONG = {
    "down": "A person marked an earlier answer to this question as wrong ({reason}).",
    "unverified": "An earlier answer to this question stated figures its own queries did not give.",
    "unanswered": "An earlier answer asked a clarifying question back that nobody answered.",
    "failed": "An earlier run of this question failed before it answered.",
}
_HEADERS = {
    "up": "thumbs up",
    "down": "thumbs down",
    "unverified": "figures left unverified",
    "unanswered": "a clarification nobody answered",
    "failed": "a failed run",
}


def eval_case(proposal: Proposal) -> dict[str, Any]:
    """The eval case a proposal becomes: its question, a tag saying why (bounded: one per kind), a rubric
    for the judge, and for figures left unverified the deterministic check that every figure verifies."""
    answer = " ".join(proposal.answer.split())[:MAX_ANSWER_CHARS]
    wrong = _WHAT_WENT_WRONG[proposal.kind].format(reason=proposal.reason or "no reason given")
    rubric = f"{wrong} That answer was: {answer!r}. Pass only if this answer does not make the same mistake."
    prefix = "feedback" if proposal.kind == "down" else proposal.kind
    case: dict[str, Any] = {"id": f"{prefix}-{proposal.run_id[:12]}", "question": proposal.question, "tags": [prefix]}
    if proposal.kind == "unverified":
        case["expect"] = {"figures_verified": True}
    return {**case, "judge": rubric}


def _header(proposal: Proposal, number: int, total: int) -> str:
    thumb = _HEADERS[proposal.kind]
    when = dt.datetime.fromtimestamp(proposal.created_at, dt.UTC).strftime("%Y-%m-%d %H:%M UTC")
    lines = [f"\n[{number}/{total}] {thumb}, {when}, run {proposal.run_id}", f"Question: {proposal.question}"]
    if proposal.reason:
        lines.append(f"Reason: {proposal.reason}")
    lines.append(f"Answer: {' '.join(proposal.answer.split())[:MAX_ANSWER_CHARS]}")
    return safe("\n".join(lines))  # a chat user wrote the question and reason: nothing may drive the terminal


def _query(query: ProposedQuery) -> str:
    """What the query asked and the rows the person saw (its SQL as it would be written follows)."""
    lines = [f"  {query.label}: {query.question}"]
    if query.columns:
        lines.append("    | " + " | ".join(query.columns) + " |")
        lines += ["    | " + " | ".join(map(str, row)) + " |" for row in query.rows[:PREVIEW_ROWS]]
        more = query.row_count - min(len(query.rows), PREVIEW_ROWS)
        if more > 0:
            lines.append(f"    ({more:,} more rows)")
    return safe("\n".join(lines))  # the model's SQL and the data's cells: shown, never obeyed by the terminal


def _entry(entry: dict[str, str], path: Path) -> str:
    """The text that would be appended to the file, as it is."""
    lines = [f"  To be added to {path}:", *(f"    {line}" for line in as_yaml(entry).splitlines())]
    return safe("\n".join(lines))  # the question is a chat user's: shown, never obeyed by the terminal

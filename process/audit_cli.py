"""`agent audit`: the audit entries (chats/audit.py) of the state file in AGENT_DATA_DIR, printed for a
person or exported as JSON lines, filtered by person, policy, interface and time. Registered in
process/cli.py by `add_audit_command`; exit codes as there (0 printed, 2 usage)."""

from __future__ import annotations

import argparse
import json
import re
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING

from process.errors import EXIT_OK, UsageError
from process.untrusted import safe

if TYPE_CHECKING:  # `agent --help` stays light: the kit is imported when the command runs
    from agent.config import Settings
    from chats.audit import AuditEntry

DURATION = re.compile(r"(\d+(?:\.\d+)?)\s*([smhdw])")
UNIT_S = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}
SQL_CHARS = 200  # of each query, in the readable listing (--json has it whole)


def add_audit_command(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    audit = commands.add_parser("audit", help="print or export who asked what, under which policy, and what it read")
    audit.add_argument("--json", action="store_true", help="one JSON object a line, every field, for export")
    audit.add_argument("--person", metavar="WHO", help="an email, a person id (slack:T:U) or an owner string")
    audit.add_argument("--policy", metavar="NAME", help="only questions asked under this access policy")
    audit.add_argument("--interface", choices=("web", "slack", "cli"), help="only questions asked there")
    audit.add_argument(
        "--since", metavar="WHEN", help="from a date (2026-05-01), a time (ISO 8601) or a while ago (7d)"
    )
    audit.add_argument("--until", metavar="WHEN", help="before a date, a time or a while ago, likewise")
    audit.set_defaults(handler=_audit)


def _audit(args: argparse.Namespace, settings: Settings) -> int:
    from chats.audit import AuditFilter, read_entries
    from chats.state import ChatState, state_path
    from chats.state_postgres import is_postgres_url

    now = time.time()
    which = AuditFilter(
        person=owner_of(args.person) if args.person else None,
        policy=args.policy,
        interface=args.interface,
        since=moment(args.since, now) if args.since else None,
        until=moment(args.until, now) if args.until else None,
    )
    where = settings.agent_state_url or state_path(settings.agent_data_dir)
    if not is_postgres_url(where) and not Path(where).exists():
        raise UsageError(f"No state file at {where}: nothing has been asked here yet (or set AGENT_DATA_DIR).")
    state = ChatState(where)
    try:
        entries = state.file.now(lambda c: read_entries(c, which))
    finally:
        state.close()
    for entry in entries:
        # JSON lines in ASCII: a question's terminal controls (C1, bidi overrides) travel escaped, never raw.
        print(json.dumps(entry.as_json(), ensure_ascii=True) if args.json else readable(entry))
    print(f"{len(entries)} audit entr{'y' if len(entries) == 1 else 'ies'}.", file=sys.stderr)
    return EXIT_OK


def owner_of(who: str) -> str:
    """What a person types, as entries keep it: an email is `person:email:<it>`; a person id
    (`slack:T1:U1`, `local`) gains `person:`; an owner string is taken as it is."""
    who = who.strip()
    if who.startswith(("person:", "slack-channel:")):
        return who
    if "@" in who and ":" not in who:
        from chats.people import email_key

        return f"person:email:{email_key(who)}"
    return f"person:{who}"


def moment(text: str, now: float) -> float:
    """A date or time (UTC unless it says), or a duration before `now` (`7d`, `12h`, `2w`, `1d12h`)."""
    text = text.strip()
    if re.fullmatch(rf"(?:{DURATION.pattern})+", text):
        return now - sum(float(n) * UNIT_S[unit] for n, unit in DURATION.findall(text))
    try:
        when = datetime.fromisoformat(text)
    except ValueError:
        raise UsageError(
            f"{text!r} is neither a date (2026-05-01), a time (2026-05-01T09:30) nor a while ago (7d, 12h, 30m)."
        ) from None
    return (when if when.tzinfo else when.replace(tzinfo=UTC)).timestamp()


def readable(entry: AuditEntry) -> str:
    """An entry for a person at a terminal: a header line, the question, one line per query."""
    when = datetime.fromtimestamp(entry.at, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
    where = entry.interface + (f" {entry.channel}" if entry.channel else "")
    policy = entry.policy or "(no policy)"
    lines = [
        f"{when}  {entry.person or '(unknown)'}  {where}  policy {policy}  {entry.outcome}  "
        f"{_read(entry.rows_read, entry.bytes_read)}  run {entry.run_id}",
        f"  asked: {' '.join(entry.question.split())}",
    ]
    for query in entry.queries:
        sql = " ".join(query.sql.split())
        sql = sql if len(sql) <= SQL_CHARS else sql[: SQL_CHARS - 1] + "…"
        status = f"reused {query.reused_from}" if query.reused_from else _read(query.rows_read, query.bytes_read)
        lines.append(f"  {query.label}  {status}{'  failed' if query.error else ''}  {sql}")
    return safe("\n".join(lines))


def _read(rows: int | None, read_bytes: int | None) -> str:
    if rows is None:
        return "read not reported"
    return f"{rows:,} rows, {_bytes(read_bytes or 0)} read"


def _bytes(count: int) -> str:
    size, unit = float(count), "B"
    for unit in ("B", "KB", "MB", "GB", "TB"):
        if size < 1000 or unit == "TB":
            break
        size /= 1000
    return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"

"""The engine behind the fake ClickHouse server (tests/fakes/clickhouse_http.py): users, settings
profiles and grants as a server keeps them, and every query run by chdb on a connection of its own.

chdb is clickhouse-local: no users, no caller-chosen query ids, no HTTP. This module supplies them.
- Connections get a server's defaults where clickhouse-local's differ (implicit_select=0,
  allow_introspection_functions=0).
- A user's settings profile is the settings of the connection its query runs on, so chdb itself
  enforces `readonly=1` and the limits (codes 164, 158, 159, ...). Setting changes sent with a
  request are checked first, as the server checks them: unknown (115), or any change under
  readonly=1, or `readonly` under readonly=2 (164); a value equal to the current one is no change.
- Every query gets a fresh connection whose `log_comment` carries the HTTP query_id and the user.
  chdb's own `system.processes` shows chdb's query ids, so a query that names `system.processes`
  reads a view of it instead whose `query_id`, `initial_query_id`, `user` and `initial_user` are the
  HTTP ones (and whose `Settings` hide that `log_comment`); queries the fake runs for itself are
  not in it. `KILL QUERY WHERE ...` selects from that view and kills by `log_comment`; a user kills
  its own queries only, unless its grants are `ALL ON *.*` (ACCESS_DENIED, 497, as on a server).
- `SHOW GRANTS [FOR ...]` answers the configured grant lines, as given (a server prints privileges
  in its own canonical order). Grants are otherwise not enforced, except SOURCES: a query calling
  file(), url(), s3(), remote(), mysql(), executable(), ... is refused (497) for a user without
  `ALL ON *.*` or a SOURCES grant (a server may report 164 first for a read-only user); for anyone,
  the ones that reach the network or run programs are 48. That check is lexical, and so are the few
  others the server makes before running a query (an empty query: 62; `INTO OUTFILE`: 358, not
  allowed over HTTP). The process confines itself with Landlock (agent/db/sandbox.py), so what chdb
  would read outside its data directory (scalar file(), a file() inside a structure string) fails
  with EACCES (76) where a server refuses files outside user_files_path.
- A function can be hidden to play an older server (`hidden_functions`): calling it is 46 and
  `system.functions` does not list it; `version` changes what `version()` and error texts say.
"""

from __future__ import annotations

import hmac
import json
import re
import threading
import xml.etree.ElementTree as ElementTree
from collections.abc import Iterator, Mapping, Sequence
from contextlib import suppress
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

# Codes the fake raises itself; everything else carries chdb's own "(NAME)".
_ERROR_NAMES = {
    46: "UNKNOWN_FUNCTION",
    48: "NOT_IMPLEMENTED",
    62: "SYNTAX_ERROR",
    81: "UNKNOWN_DATABASE",
    115: "UNKNOWN_SETTING",
    164: "READONLY",
    192: "UNKNOWN_USER",
    216: "QUERY_WITH_SAME_ID_IS_ALREADY_RUNNING",
    358: "INTO_OUTFILE_NOT_ALLOWED",
    372: "SESSION_NOT_FOUND",
    373: "SESSION_IS_LOCKED",
    374: "INVALID_SESSION_TIMEOUT",
    452: "SETTING_CONSTRAINT_VIOLATION",
    381: "HTTP_LENGTH_REQUIRED",
    497: "ACCESS_DENIED",
    516: "AUTHENTICATION_FAILED",
    1001: "STD_EXCEPTION",
}
_TAG = "fakech"
# Where clickhouse-local's defaults differ from a server's in ways a client can see: implicit_select=1
# would let formatQuery('1+1') parse, which a server refuses.
_SERVER_DEFAULTS = {"implicit_select": 0, "allow_introspection_functions": 0}
_STATS = ("read_rows", "read_bytes", "written_rows", "written_bytes", "result_rows", "result_bytes")
# Formats whose output is a plain concatenation of per-block outputs, so chdb's streaming result
# can be sent as it comes. Whole-document formats (JSON, JSONCompact, Pretty, *WithNames, Parquet)
# are produced in one piece: chdb's stream would repeat their header in every block.
_STREAMABLE = {
    f.lower()
    for f in (
        "TabSeparated", "TSV", "TabSeparatedRaw", "TSVRaw", "Raw", "CSV", "Native", "RowBinary", "Values",
        "JSONEachRow", "JSONLines", "NDJSON", "JSONCompactEachRow", "JSONStringsEachRow",
        "JSONCompactStringsEachRow", "LineAsString", "RawBLOB",
    )
}  # fmt: skip
_RESULT_STATEMENTS = {"SELECT", "WITH", "SHOW", "DESCRIBE", "DESC", "EXPLAIN", "EXISTS", "KILL", "CHECK", "FROM"}
_SOURCES = re.compile(
    r"\b(file|url|urlCluster|s3|s3Cluster|gcs|hdfs|azureBlobStorage|remote|remoteSecure|cluster|clusterAllReplicas"
    r"|mysql|postgresql|sqlite|mongodb|redis|jdbc|odbc|executable|iceberg|deltaLake|hudi)\s*\(",
    re.IGNORECASE,
)
_FORMAT = re.compile(r"\bFORMAT\s+([A-Za-z_]\w*)(?:\s+SETTINGS\b[^;]*)?\s*;?\s*$", re.IGNORECASE)
_OUTFILE = re.compile(r"\bINTO\s+OUTFILE\b", re.IGNORECASE)
_KILL = re.compile(
    r"^\s*KILL\s+QUERY\s+(?:ON\s+CLUSTER\s+\S+\s+)?WHERE\s+(?P<where>.+?)(?:\s+(?P<mode>SYNC|ASYNC|TEST))?"
    r"(?:\s+FORMAT\s+(?P<format>\w+))?\s*;?\s*$",
    re.IGNORECASE | re.DOTALL,
)
_SHOW_GRANTS = re.compile(
    r"^\s*SHOW\s+GRANTS\b(?:\s+FOR\s+(?P<who>.+?))?(?:\s+WITH\s+IMPLICIT)?(?:\s+FINAL)?"
    r"(?:\s+FORMAT\s+(?P<format>\w+))?\s*;?\s*$",
    re.IGNORECASE | re.DOTALL,
)
_PROCESSES = re.compile(r"""(?<![\w.`"])[`"]?system[`"]?\s*\.\s*[`"]?processes[`"]?(?![\w`"])""")
_SETTINGS = re.compile(r"""(?<![\w.`"])[`"]?system[`"]?\s*\.\s*[`"]?settings[`"]?(?![\w`"])""")
_FUNCTIONS = re.compile(r"""(?<![\w.`"])[`"]?system[`"]?\s*\.\s*[`"]?functions[`"]?(?![\w`"])""")
_VERSION_CALL = re.compile(r"(?<![\w.])version\s*\(\s*\)", re.IGNORECASE)
_FIELD = "splitByChar(':', _fakech_comment)"
# Subqueries keep the aliases apart: an alias defined in a SELECT is visible in its WHERE.
PROCESSES_VIEW = (
    "(SELECT * EXCEPT (_fakech_comment) REPLACE ("
    f"unhex({_FIELD}[2]) AS query_id, unhex({_FIELD}[2]) AS initial_query_id, "
    f"unhex({_FIELD}[3]) AS user, unhex({_FIELD}[3]) AS initial_user, "
    "mapFilter((k, v) -> k != 'log_comment', Settings) AS Settings) "
    "FROM (SELECT *, Settings['log_comment'] AS _fakech_comment FROM system.processes "
    f"WHERE startsWith(Settings['log_comment'], '{_TAG}:')))"
)


class ClickHouseError(Exception):
    """An exception as the server reports it: its code and `Code: N. DB::Exception: ... (NAME)`."""

    def __init__(self, code: int, text: str) -> None:
        super().__init__(text)
        self.code = code
        self.text = text

    @classmethod
    def of(cls, code: int, message: str) -> ClickHouseError:
        return cls(code, f"Code: {code}. DB::Exception: {message}. ({_ERROR_NAMES[code]})")

    @classmethod
    def from_chdb(cls, exc: BaseException) -> ClickHouseError:
        text = str(exc).strip().removeprefix("Streaming query failed: ")
        # chdb wraps some errors twice: "Code: N. DB::Exception: Code: N. DB::Exception: msg (version V). (NAME)"
        wrapped = re.match(
            r"Code: (\d+)\. DB::Exception: Code: \1\. (DB::\w*Exception: .*) \(version [^)]*\)\. \(\w+\)$", text, re.S
        )
        if wrapped:
            text = f"Code: {wrapped[1]}. {wrapped[2]}"
        text = re.sub(r" \(version [\d.]+(?: \(official build\))?\)$", "", text)
        code = re.match(r"Code: (\d+)\.", text)
        return cls(int(code[1]), text) if code else cls.of(1001, text)

    @property
    def name(self) -> str:
        found = re.search(r"\((\w+)\)$", self.text)
        return found[1] if found else ""

    def body(self, version: str) -> str:
        return f"{self.text} (version {version} (official build))\n"


@dataclass
class User:
    """A user as a server keeps one: a password, the settings of its profile (in order), and the
    lines `SHOW GRANTS` prints for it."""

    password: str
    profile: dict[str, Any] = field(default_factory=dict)
    grants: list[str] = field(default_factory=list)
    # The profile's constraints, as <constraints> holds them: {"max_result_rows": {"max": "1000"}}, and
    # {"readonly": ""} for one this user may not change (CONST). `system.settings` shows them (min, max,
    # readonly) and a change past them is refused with 452, as on a server.
    constraints: dict[str, dict[str, str]] = field(default_factory=dict)

    @property
    def is_admin(self) -> bool:
        return any(re.match(r"GRANT ALL ON \*\.\* TO ", grant) for grant in self.grants)

    @property
    def may_read_sources(self) -> bool:
        return self.is_admin or any(re.search(r"\bSOURCES\b", grant) for grant in self.grants)


@dataclass
class Config:
    users: dict[str, User]
    hidden_functions: list[str] = field(default_factory=list)
    version: str | None = None  # what the server says it is; chdb's own version when None
    display_name: str = "fake-clickhouse"

    def dumps(self) -> str:
        return json.dumps(asdict(self))

    @classmethod
    def loads(cls, text: str) -> Config:
        data = json.loads(text)
        data["users"] = {name: User(**user) for name, user in data["users"].items()}
        return cls(**data)


def users_from_xml(path: Path, passwords: Mapping[str, str]) -> dict[str, User]:
    """Users from a server's users.xml (profiles, users, `<grants><query>`), with these passwords."""
    root = ElementTree.parse(path).getroot()
    profiles = {p.tag: {s.tag: (s.text or "").strip() for s in p} for p in root.iterfind("profiles/*")}
    users: dict[str, User] = {}
    for user in root.iterfind("users/*"):
        grants = [f"{(q.text or '').strip()} TO {user.tag}" for q in user.iterfind("grants/query")]
        profile = dict(profiles.get(user.findtext("profile", "default"), {}))
        users[user.tag] = User(passwords[user.tag], profile, grants)
    return users


@dataclass
class Query:
    """One HTTP request's query, authenticated and with its settings checked."""

    user: str
    sql: str
    query_id: str
    settings: dict[str, Any]  # of the connection it runs on: the profile, then the request's changes
    effective: dict[str, str]  # every setting's value for this query
    default_format: str = "TabSeparated"
    database: str = ""
    params: dict[str, str] = field(default_factory=dict)

    @property
    def tag(self) -> str:
        return f"{_TAG}:{self.query_id.encode().hex()}:{self.user.encode().hex()}"


@dataclass
class Run:
    """A query being run: its output format (None for a statement without a result), its output in
    chunks (raising ClickHouseError, also after the first chunk), and what it read so far."""

    format: str | None
    chunks: Iterator[bytes]
    stats: dict[str, int]


class Engine:
    def __init__(self, data_dir: Path, config: Config) -> None:
        import chdb

        self._chdb = chdb
        self._path = str(data_dir)
        self.config = config
        self._connect_lock = threading.Lock()
        self._lock = threading.Lock()
        self._settings_cache: dict[tuple[tuple[str, str], ...], dict[str, str]] = {}
        self._databases: set[str] = set()
        self._busy_sessions: set[tuple[str, str]] = set()
        self._sessions: set[tuple[str, str]] = set()
        self._running: set[str] = set()  # query ids
        # chdb starts its engine afresh (tens of ms) when a connection opens while none is open
        self._anchor = self._connect({})
        version, self.timezone = self._scalar("SELECT version(), timezone()").split("\t")
        self._engine_version = version
        self.version = config.version or version

    def close(self) -> None:
        self._anchor.close()

    # --- connections ---

    def _connect(self, settings: Mapping[str, Any]) -> Any:
        """A connection with the server's defaults and these settings, `readonly` last: once it is 1
        no later one applies."""
        settings = {**_SERVER_DEFAULTS, **settings}
        items = [(k, _text(v)) for k, v in settings.items() if k != "readonly"]
        items += [("readonly", _text(settings["readonly"]))] if "readonly" in settings else []
        with self._connect_lock:
            return self._chdb.connect(f"{self._path}?{urlencode(items)}" if items else self._path)

    def _scalar(self, sql: str, settings: Mapping[str, Any] | None = None) -> str:
        conn = self._connect(settings or {})
        try:
            return bytes(conn.query(sql, "TSVRaw").bytes()).decode().rstrip("\n")
        finally:
            conn.close()

    # --- users and settings ---

    def authenticate(self, name: str, password: str) -> User:
        user = self.config.users.get(name)
        if user is None or not hmac.compare_digest(user.password.encode(), password.encode()):
            raise ClickHouseError.of(
                516, f"{name}: Authentication failed: password is incorrect, or there is no user with such name."
            )
        return user

    def current_settings(self, profile: Mapping[str, Any]) -> dict[str, str]:
        """Every setting's value on a connection with this profile (system.settings)."""
        key = tuple((k, _text(v)) for k, v in profile.items())
        with self._lock:
            cached = self._settings_cache.get(key)
        if cached is None:
            rows = self._scalar("SELECT name, value FROM system.settings FORMAT JSONCompactEachRow", profile)
            cached = dict(json.loads(line) for line in rows.splitlines())
            with self._lock:
                self._settings_cache[key] = cached
        return cached

    def request_settings(
        self, user: User, changes: Sequence[tuple[str, str]], *, get: bool
    ) -> tuple[dict[str, Any], dict[str, str]]:
        """The connection settings of a request and every setting's value, as the HTTP handler sets
        them: the profile; readonly=2 for a GET by a user who is not read-only; then the request's
        changes, each checked against the settings before any is applied."""
        settings = dict(user.profile)
        current = self.current_settings(user.profile)
        readonly = int(current.get("readonly", "0"))
        if get and readonly == 0:
            settings["readonly"] = readonly = 2
        before = {**current, **{k: _text(v) for k, v in settings.items()}}
        for name, value in changes:
            if name not in current:
                raise ClickHouseError.of(115, f"Unknown setting '{name}'")
            if _same(value, before[name]):
                continue
            if readonly == 1 or (readonly > 1 and name == "readonly"):
                raise ClickHouseError.of(164, f"Cannot modify '{name}' setting in readonly mode")
            _check_constraint(name, value, user.constraints.get(name))
            settings[name] = value
        return settings, {**before, **{k: _text(v) for k, v in settings.items()}}

    def check_database(self, name: str) -> None:
        if name in self._databases:
            return
        if self._scalar(f"EXISTS DATABASE `{name.replace('`', '')}`") != "1":
            raise ClickHouseError.of(81, f"Database {name} does not exist")
        with self._lock:
            self._databases.add(name)

    def hold_session(self, user: str, session_id: str, check: bool) -> None:
        key = (user, session_id)
        with self._lock:
            if check and key not in self._sessions:
                raise ClickHouseError.of(372, f"Session {session_id} not found")
            if key in self._busy_sessions:
                raise ClickHouseError.of(373, f"Session {session_id} is locked by a concurrent client")
            self._busy_sessions.add(key)
            self._sessions.add(key)

    def release_session(self, user: str, session_id: str, close: bool) -> None:
        with self._lock:
            self._busy_sessions.discard((user, session_id))
            if close:
                self._sessions.discard((user, session_id))

    # --- queries ---

    def execute(self, query: Query) -> Run:
        """Start `query`; errors the server finds before running it are raised here."""
        user = self.config.users[query.user]
        code = code_only(query.sql)
        self._refuse_early(query, user, code)
        if grants := _SHOW_GRANTS.match(code):
            return self._show_grants(query, user, grants)
        if kill := _KILL.match(code):
            return self._kill_query(query, user, query.sql[kill.start("where") : kill.end("where")], kill)
        found = _FORMAT.search(code)
        fmt = found[1] if found else query.default_format
        first = re.match(r"[\s(]*(\w+)", code)
        kind = first[1].upper() if first else ""
        # chdb streams SELECTs only; what it cannot stream comes in one piece
        streamable = kind in ("SELECT", "WITH", "FROM") and fmt.lower() in _STREAMABLE
        stats = dict.fromkeys(_STATS, 0)
        chunks = self._chunks(query, self._rewrite(query.sql, code, user), fmt, streamable, stats)
        return Run(fmt if kind in _RESULT_STATEMENTS else None, chunks, stats)

    def _refuse_early(self, query: Query, user: User, code: str) -> None:
        """What the server refuses before running a query (found lexically here)."""
        if not code.strip():
            raise ClickHouseError.of(62, "Empty query")
        if _OUTFILE.search(code):
            raise ClickHouseError.of(358, "INTO OUTFILE is not allowed")
        if (source := _SOURCES.search(code)) and not user.may_read_sources:
            raise ClickHouseError.of(
                497,
                f"{query.user}: Not enough privileges. To execute this query, it's necessary to have the grant "
                f"{source[1].upper()} ON *.*",
            )
        if source and source[1].lower() not in ("file", "sqlite"):  # the sandbox would leave it retrying
            raise ClickHouseError.of(48, f"The fake ClickHouse server reaches no network or program: {source[1]}()")
        for name in self.config.hidden_functions:
            if re.search(rf"(?<![\w.]){re.escape(name)}\s*\(", code):
                raise ClickHouseError.of(46, f"Function with name `{name}` does not exist")

    def _rewrite(self, sql: str, code: str, user: User) -> str:
        replacements = [(m.span(), PROCESSES_VIEW) for m in _PROCESSES.finditer(code)]
        if user.constraints:
            replacements += [(m.span(), _settings_view(user.constraints)) for m in _SETTINGS.finditer(code)]
        if self.config.hidden_functions:
            hidden = ", ".join(_quote(name) for name in self.config.hidden_functions)
            view = f"(SELECT * FROM system.functions WHERE name NOT IN ({hidden}))"
            replacements += [(m.span(), view) for m in _FUNCTIONS.finditer(code)]
        if self.version != self._engine_version:
            replacements += [
                (m.span(), f"({_quote(self.version)} AS `version()`)") for m in _VERSION_CALL.finditer(code)
            ]
        for (start, end), text in sorted(replacements, reverse=True):
            sql = sql[:start] + text + sql[end:]
        return sql

    def _chunks(self, query: Query, sql: str, fmt: str, streamable: bool, stats: dict[str, int]) -> Iterator[bytes]:
        with self._lock:
            if query.query_id in self._running:  # replace_running_query=0, the default
                raise ClickHouseError.of(216, f"Query with id = {query.query_id} is already running")
            self._running.add(query.query_id)
        settings = {**query.settings, "log_comment": query.tag}
        if query.database:
            settings["database"] = query.database
        conn = stream = None
        try:
            conn = self._call(self._connect, settings)
            if not streamable:
                result = self._call(conn.query, sql, fmt, params=query.params or None)
                _count(stats, result)
                yield bytes(result.bytes())
                return
            stream = self._call(conn.send_query, sql, fmt, params=query.params or None)
            while (chunk := self._call(stream.fetch)) is not None:
                _count(stats, chunk)
                yield bytes(chunk.bytes())
        finally:
            if stream is not None:
                with suppress(Exception):
                    stream.close()
            if conn is not None:
                conn.close()
            with self._lock:
                self._running.discard(query.query_id)

    @staticmethod
    def _call(function: Any, *args: Any, **kwargs: Any) -> Any:
        try:
            return function(*args, **kwargs)
        except Exception as exc:
            raise ClickHouseError.from_chdb(exc) from None

    def kill(self, tags: Sequence[str], *, sync: bool = True) -> None:
        """Stop the queries carrying these tags (as KILL QUERY does; their callers get code 394)."""
        if tags:
            listed = ", ".join(_quote(tag) for tag in tags)
            self._scalar(f"KILL QUERY WHERE Settings['log_comment'] IN ({listed}) {'SYNC' if sync else 'ASYNC'}")

    def progress(self, tag: str) -> dict[str, int]:
        """What a running query has read so far (for X-ClickHouse-Progress)."""
        raw = self._scalar(
            "SELECT read_rows, read_bytes, written_rows, written_bytes, total_rows_approx AS total_rows_to_read "
            "FROM system.processes "
            f"WHERE Settings['log_comment'] = {_quote(tag)} FORMAT JSONEachRow"
        )
        found = json.loads(raw) if raw else {}
        return {k: int(v) for k, v in found.items()}

    def _show_grants(self, query: Query, user: User, match: re.Match[str]) -> Run:
        who = (match["who"] or "").strip()
        names = [n.strip().strip("`'\"") for n in who.split(",")] if who else [query.user]
        names = [query.user if n.upper() == "CURRENT_USER" else n for n in names]
        if [n.upper() for n in names] == ["ALL"]:
            names = sorted(self.config.users) if user.is_admin else [query.user]
        lines: list[list[str]] = []
        for name in sorted(set(names)):
            if name not in self.config.users:
                raise ClickHouseError.of(192, f"There is no user `{name}` in user directories")
            if name != query.user and not user.is_admin:
                raise ClickHouseError.of(
                    497,
                    f"{query.user}: Not enough privileges. To execute this query, it's necessary to have the grant "
                    "SHOW USERS ON *.*",
                )
            lines += [[grant] for grant in self.config.users[name].grants]
        column = "GRANTS" + (f" FOR {', '.join(names)}" if who else "")
        return self._literal([column], lines, match["format"] or query.default_format)

    def _kill_query(self, query: Query, user: User, where: str, match: re.Match[str]) -> Run:
        conn = self._connect(query.settings)
        try:
            select = f"SELECT query_id, user, query FROM {PROCESSES_VIEW} WHERE {where}"
            raw = self._call(conn.query, select, "JSONCompactEachRow")
            found = [json.loads(line) for line in bytes(raw.bytes()).decode().splitlines() if line]
        finally:
            conn.close()
        allowed = [row for row in found if row[1] == query.user or user.is_admin]
        if found and not allowed:
            raise ClickHouseError.of(497, f"User {query.user} attempts to kill query created by {found[0][1]}")
        mode = (match["mode"] or "ASYNC").upper()
        if mode != "TEST":
            self.kill([Query(row[1], "", row[0], {}, {}).tag for row in allowed], sync=mode == "SYNC")
        status = "finished" if mode == "SYNC" else "waiting"
        rows = [[status, *row] for row in allowed]
        return self._literal(
            ["kill_status", "query_id", "user", "query"], rows, match["format"] or query.default_format
        )

    def _literal(self, columns: list[str], rows: list[list[str]], fmt: str) -> Run:
        """A result of strings, formatted by the engine in `fmt` as the server would format it."""
        types = ", ".join(["String"] * len(columns))
        tuples = ", ".join(f"tuple({', '.join(_quote(v) for v in row)})" for row in rows)
        names = ", ".join(f"t.{i} AS `{c.replace('`', '')}`" for i, c in enumerate(columns, 1))
        sql = f"SELECT {names} FROM (SELECT arrayJoin(CAST([{tuples}], 'Array(Tuple({types}))')) AS t)"

        def chunks() -> Iterator[bytes]:
            conn = self._connect({})
            try:
                yield bytes(self._call(conn.query, sql, fmt).bytes())
            finally:
                conn.close()

        return Run(fmt, chunks(), dict.fromkeys(_STATS, 0))


def code_only(sql: str) -> str:
    """`sql` with comments and the insides of string literals and heredocs blanked out (same length,
    the quotes kept), so that keyword searches see only code. Quoted identifiers are kept."""
    out = list(sql)
    i, n = 0, len(sql)

    def blank(start: int, end: int) -> int:
        out[start:end] = " " * (end - start)
        return end

    while i < n:
        c = sql[i]
        if c == "'":
            j = i + 1
            while j < n and sql[j] != "'":
                j += 2 if sql[j] == "\\" else 1
            i = blank(i + 1, min(j, n)) + 1
        elif c in '`"':
            j = i + 1
            while j < n and sql[j] != c:
                j += 2 if sql[j] == "\\" else 1
            i = min(j + 1, n)
        elif sql.startswith("--", i) or sql.startswith("#!", i) or sql.startswith("# ", i):
            end = sql.find("\n", i)
            i = blank(i, n if end < 0 else end)
        elif sql.startswith("/*", i):
            depth, j = 1, i + 2
            while j < n and depth:
                if sql.startswith("/*", j):
                    depth, j = depth + 1, j + 2
                elif sql.startswith("*/", j):
                    depth, j = depth - 1, j + 2
                else:
                    j += 1
            i = blank(i, j)
        elif c == "$" and (heredoc := re.match(r"\$(\w*)\$", sql[i:])) and not heredoc[1][:1].isdigit():
            end = sql.find(heredoc[0], i + len(heredoc[0]))
            i = blank(i + len(heredoc[0]), n if end < 0 else end) + len(heredoc[0])
        else:
            i += 1
    return "".join(out)


def _count(stats: dict[str, int], result: Any) -> None:
    """Add what one chdb result reports (its rows_read() counts result rows; storage_* what was read)."""
    stats["read_rows"] += int(result.storage_rows_read())
    stats["read_bytes"] += int(result.storage_bytes_read())
    stats["result_rows"] += int(result.rows_read())
    stats["result_bytes"] += int(result.bytes_read())


def _text(value: Any) -> str:
    if isinstance(value, bool):
        return "1" if value else "0"
    return str(value)


def _check_constraint(name: str, value: str, constraint: Mapping[str, str] | None) -> None:
    """A change past the profile's constraint, refused as a server refuses it (452)."""
    if constraint is None:
        return
    if "readonly" in constraint or "const" in constraint:
        raise ClickHouseError.of(452, f"Setting {name} should not be changed")
    number = float(value)
    if "max" in constraint and number > float(constraint["max"]):
        raise ClickHouseError.of(452, f"Setting {name} shouldn't be greater than {constraint['max']}")
    if "min" in constraint and number < float(constraint["min"]):
        raise ClickHouseError.of(452, f"Setting {name} shouldn't be less than {constraint['min']}")


def _settings_view(constraints: Mapping[str, Mapping[str, str]]) -> str:
    """system.settings with this user's constraints in its min, max and readonly columns."""

    def column(key: str, cast: str) -> str:
        cases = [
            f"name = {_quote(name)}, {cast}({_quote(bounds[key])})"
            for name, bounds in constraints.items()
            if key in bounds
        ]
        return f"multiIf({', '.join(cases)}, {key})" if cases else key

    fixed = [_quote(name) for name, bounds in constraints.items() if "readonly" in bounds or "const" in bounds]
    readonly = f"if(name IN ({', '.join(fixed)}), toUInt8(1), readonly)" if fixed else "readonly"
    return (
        f"(SELECT * REPLACE ({column('min', 'toNullable')} AS min, {column('max', 'toNullable')} AS max, "
        f"{readonly} AS readonly) FROM system.settings)"
    )


def _same(new: str, current: str) -> bool:
    """Whether a setting change leaves the value as it is (the server casts both and compares)."""
    words = {"true": "1", "false": "0"}
    new, current = words.get(new.lower(), new), words.get(current.lower(), current)
    if new == current:
        return True
    try:
        return float(new) == float(current)
    except ValueError:
        return False


def _quote(text: str) -> str:
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"

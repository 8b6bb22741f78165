"""The statement check scopes CTEs exactly as the engine does, proven statement by statement: each one runs
through the check and through the engine's own analysis (EXPLAIN QUERY TREE names every table and table
function it resolved), and the two must agree. Allowed iff the engine resolves it to allowed tables only; and
when allowed, every table the engine reads is one the check saw as a table (a CTE name never stands for a
real table the check did not check). The scope excludes nycflights13.planes."""

from __future__ import annotations

import re

import pytest

from agent.db import Database, EngineError, QueryRefused, Scope, engine_settings, new_query_id
from agent.db.scope import ALWAYS_READABLE
from agent.db.statement import StatementPolicy, decode_parse, parse_request
from tests.conftest import make_settings

EXCLUDED = "nycflights13.planes"
IN_SCOPE = {f"nycflights13.{name}" for name in ("airlines", "airports", "flights", "weather")}
GENERATORS = {"numbers", "values", "generate_series", "generateSeries"}
PLANE = "('N10156', 2004, 'x', 'x', 'x', 2, 55, NULL, 'x')"  # a row shaped like nycflights13.planes
M = "WITH m AS (SELECT toMonth(time_hour) AS mo, count() AS n FROM flights GROUP BY mo) "

AGREE = [
    # the statement, and the "compare two periods" shape it stands for
    "WITH t AS (SELECT 1 AS x) SELECT x FROM t UNION ALL SELECT x FROM t",
    M + "SELECT 'jan', n FROM m WHERE mo = 1 UNION ALL SELECT 'feb', n FROM m WHERE mo = 2",
    M + "SELECT n FROM m WHERE mo = 1 UNION DISTINCT SELECT n FROM m WHERE mo = 2 UNION ALL SELECT n FROM m",
    # INTERSECT, EXCEPT, and mixed with UNION
    M + "SELECT mo FROM m INTERSECT SELECT mo FROM m WHERE n > 0",
    M + "SELECT mo FROM m EXCEPT SELECT mo FROM m WHERE mo > 6",
    M + "SELECT mo FROM m UNION ALL SELECT mo FROM m INTERSECT SELECT mo FROM m EXCEPT SELECT 13",
    # nested and parenthesised unions
    M + "SELECT n FROM m UNION ALL (SELECT n FROM m UNION ALL SELECT n FROM m)",
    M + "SELECT n FROM m INTERSECT (SELECT n FROM m UNION ALL SELECT n FROM m)",
    "(WITH t AS (SELECT 1 AS x) SELECT x FROM t) UNION ALL SELECT x FROM t",
    "(WITH t AS (SELECT 1 AS x) SELECT x FROM t UNION ALL SELECT x FROM t) UNION ALL SELECT 3",
    "(WITH t AS (SELECT 1 AS x) SELECT x FROM t UNION ALL SELECT x FROM t) UNION ALL SELECT x FROM t",
    "WITH t AS (SELECT 1 AS x) SELECT x FROM t UNION ALL (WITH u AS (SELECT 2 AS x) SELECT x FROM u "
    "UNION ALL SELECT x FROM t)",
    "WITH t AS (SELECT 1 AS x) SELECT x FROM t UNION ALL (WITH u AS (SELECT 2 AS x) SELECT x FROM u "
    "UNION ALL SELECT x FROM u)",
    # subqueries inside a later branch see the CTE
    M + "SELECT n FROM m UNION ALL SELECT n FROM (SELECT n FROM m)",
    M + "SELECT n FROM m UNION ALL SELECT (SELECT max(n) FROM m)",
    "WITH t AS (SELECT 1 AS x) SELECT x FROM t UNION ALL SELECT count() FROM flights WHERE month IN t",
    M + "SELECT n FROM m UNION ALL SELECT a.n FROM m AS a JOIN m AS b USING mo",
    # unions with a WITH inside subqueries, CTE definitions and IN
    "SELECT * FROM (WITH t AS (SELECT 1 AS x) SELECT x FROM t UNION ALL SELECT x FROM t)",
    "SELECT * FROM (WITH t AS (SELECT 1 AS x) SELECT x FROM t) UNION ALL SELECT x FROM t",
    "WITH r AS (WITH t AS (SELECT 1 AS x) SELECT x FROM t UNION ALL SELECT x FROM t) SELECT * FROM r",
    "SELECT count() FROM airlines WHERE 1 IN (WITH t AS (SELECT 1 AS x) SELECT x FROM t UNION ALL SELECT x FROM t)",
    # a WITH of a later branch's own: the first SELECT's CTEs are not visible there, its own are
    "SELECT 1 AS x UNION ALL WITH t AS (SELECT 2 AS x) SELECT x FROM t",
    "SELECT x FROM t UNION ALL WITH t AS (SELECT 2 AS x) SELECT x FROM t",
    "WITH t AS (SELECT 1 AS x) SELECT x FROM t UNION ALL WITH u AS (SELECT 2 AS x) SELECT x FROM t",
    "WITH t AS (SELECT 1 AS x) SELECT x FROM t UNION ALL WITH t AS (SELECT 2 AS x) SELECT x FROM t",
    "SELECT 1 AS x UNION ALL WITH t AS (SELECT 2 AS x) SELECT x FROM t UNION ALL SELECT x FROM t",
    # CTE referencing CTE, across branches
    "WITH a AS (SELECT 1 AS x), b AS (SELECT x + 1 AS x FROM a) SELECT x FROM b UNION ALL SELECT x FROM a",
    "WITH t AS (SELECT carrier FROM flights) SELECT count() FROM t UNION ALL WITH u AS (SELECT * FROM t) "
    "SELECT count() FROM u",
    # a CTE shadowing a real table: a CTE where the engine sees the CTE, the table where it sees the table
    "WITH flights AS (SELECT 1 AS x) SELECT x FROM flights UNION ALL SELECT count() FROM flights",
    "WITH flights AS (SELECT 1 AS x) SELECT x FROM flights UNION ALL WITH 2 AS y SELECT count() FROM flights",
    "WITH airlines AS (SELECT 'x' AS carrier) SELECT count() FROM flights WHERE carrier IN airlines "
    "UNION ALL WITH 1 AS z SELECT count() FROM flights WHERE carrier IN (SELECT carrier FROM airlines)",
    "WITH t AS (SELECT count() AS x FROM t) SELECT x FROM t",
    "WITH airlines AS (SELECT count() AS x FROM airlines) SELECT x FROM airlines",
    # the first SELECT's scalar aliases are evaluated again in a later branch with a WITH of its own, where
    # the CTE they name is not visible: there the name is the real table
    "WITH airlines AS (SELECT 'x' AS c), (SELECT count() FROM airlines) AS n SELECT n UNION ALL WITH 1 AS z SELECT n",
    "WITH airlines AS (SELECT 'x' AS c), (SELECT count() FROM airlines) AS n SELECT n UNION ALL SELECT n",
    # inline rows and generated rows in branches
    "WITH v AS (SELECT * FROM values('c UInt32', 1, 2, 3)) SELECT c FROM v UNION ALL SELECT number FROM numbers(2)",
    # refused by both: a CTE that is not visible where it is named, or a table out of scope
    "SELECT * FROM (WITH t AS (SELECT 1 AS x) SELECT x FROM t) UNION ALL SELECT x FROM t",
    "SELECT x FROM t UNION ALL (WITH t AS (SELECT 1 AS x) SELECT x FROM t)",
    "WITH planes AS (SELECT 1 AS x), (SELECT count() FROM planes) AS n SELECT n UNION ALL WITH 1 AS z SELECT n",
    "WITH planes AS (SELECT 1 AS x) SELECT x FROM planes UNION ALL WITH 2 AS y SELECT count() FROM planes",
    "SELECT 1 AS x UNION ALL WITH q AS (SELECT count() AS x FROM planes) SELECT x FROM q",
    "WITH q AS (SELECT 1 AS x) SELECT x FROM q UNION ALL SELECT count() FROM system.users",
    "WITH users AS (SELECT 1 AS x) SELECT x FROM users UNION ALL SELECT count() FROM system.users",
    "WITH `system.users` AS (SELECT 1 AS x) SELECT x FROM `system.users`",
    "SELECT * FROM `system.users`",
    "WITH one AS (SELECT 7 AS x) SELECT * FROM one UNION ALL SELECT dummy FROM system.one",
    "WITH system.users AS (SELECT 1 AS x) SELECT * FROM system.users",
    "WITH system.users AS x SELECT 1 IN x",
    "WITH system.users AS x SELECT 1 UNION ALL SELECT 2 IN x",
    # `x IN a`, `a` an alias of an identifier: the engine reads the aliased table, even where `a` is a table
    f"WITH planes AS airlines SELECT {PLANE} IN airlines",
    f"WITH planes AS a SELECT {PLANE} IN a",
    f"WITH planes AS a, a AS b SELECT {PLANE} IN b",
    f"SELECT {PLANE} IN (planes AS a), {PLANE} IN a",
    "WITH airlines AS a SELECT count() FROM airlines WHERE (carrier, name) IN airlines",
]

# Refused though the engine would run them on allowed tables only: the check stays on the safe side.
CONSERVATIVE = [
    # a CTE never borrows the name of a table configured out of scope
    "WITH planes AS (SELECT 1 AS x) SELECT x FROM planes UNION ALL SELECT x FROM planes",
    # a CTE named before its definition: the engine resolves it, and inside it resolves the CTEs it is
    # expanding as tables; that chain is refused rather than followed
    "WITH b AS (SELECT x FROM a), a AS (SELECT 5 AS x) SELECT x FROM b",
    "WITH airlines AS (SELECT carrier FROM flights), flights AS (SELECT carrier FROM airlines) SELECT * FROM airlines",
    # every CTE is checked, used or not
    "WITH q AS (SELECT count() FROM planes) SELECT 1 UNION ALL SELECT 2",
    # an alias of an identifier used as an IN set: its name is checked as a table too
    "WITH airlines AS a SELECT count() FROM airlines WHERE (carrier, name) IN a",
    # a CTE named like a table of another database, named with its dot: the engine reads the CTE
    "WITH `system.users` AS (SELECT 1 AS x) SELECT x FROM system.users",
]


@pytest.fixture
def scoped(db: Database) -> Database:
    return Database(db.backend, scope=Scope.of(["nycflights13"], [EXCLUDED]), functions=db.functions)


async def _canonical(db: Database, sql: str) -> str:
    raw = await db.backend.query(parse_request(sql), "TSVRaw", new_query_id())
    canonical_hex, ast_hex = raw.decode().rstrip("\n").split("\t")
    return decode_parse(canonical_hex, ast_hex)[0]


async def engine_reads(db: Database, sql: str) -> set[str] | None:
    """What the engine's analysis of `sql` reads: `db.table` names and `name()` table functions; None when
    it cannot resolve the statement."""
    try:
        tree = await db.backend.query(f"EXPLAIN QUERY TREE {await _canonical(db, sql)}", "TSVRaw", new_query_id())
    except EngineError:
        return None
    text = tree.decode()
    return set(re.findall(r"\btable_name: ([^\s,]+)", text)) | {
        f"{name}()" for name in re.findall(r"\btable_function_name: ([^\s,]+)", text)
    }


def engine_allows(reads: set[str] | None) -> bool:
    allowed = IN_SCOPE | ALWAYS_READABLE | {f"{name}()" for name in GENERATORS}
    return reads is not None and reads <= allowed


async def check_reads(db: Database, sql: str) -> set[str] | None:
    try:
        return set((await db.check(sql)).tables)
    except (QueryRefused, EngineError):  # refused, or not even SQL the engine parses
        return None


@pytest.mark.parametrize("sql", AGREE)
async def test_the_check_agrees_with_the_engine(scoped: Database, sql: str) -> None:
    engine, checked = await engine_reads(scoped, sql), await check_reads(scoped, sql)
    assert (checked is not None) == engine_allows(engine), f"engine reads {engine}, check {checked}: {sql}"
    if checked is not None and engine is not None:
        assert engine - {"system.one"} <= checked, f"the engine reads more than the check saw: {sql}"


@pytest.mark.parametrize("sql", CONSERVATIVE)
async def test_the_check_refuses_what_it_does_not_follow(scoped: Database, sql: str) -> None:
    assert engine_allows(await engine_reads(scoped, sql)), f"the engine does not run it: {sql}"
    assert await check_reads(scoped, sql) is None


async def test_allowed_unions_run_and_return_both_periods(scoped: Database) -> None:
    result = await scoped.execute(
        M + "SELECT 'jan' AS p, n FROM m WHERE mo = 1 UNION ALL SELECT 'feb', n FROM m WHERE mo = 2"
    )
    assert result.ok, result.error
    assert sorted(row[0] for row in result.rows) == ["feb", "jan"]


def test_the_corpus_covers_each_verdict() -> None:
    assert len(AGREE) >= 45 and len(CONSERVATIVE) >= 5


async def test_a_scalar_alias_is_checked_where_the_engine_evaluates_it_again(db: Database) -> None:
    """Unqualified names resolve in a current database outside the scope (several databases configured): the
    first SELECT's `(SELECT count() FROM users) AS n`, evaluated again in a later branch with a WITH of its
    own, reads the real table `users` there (the engine's reading of the same shape on airlines is in AGREE)."""
    policy = StatementPolicy(Scope.of(["nycflights13", "other"]), db.functions)
    assert policy.scope.current_database == "default"
    sql = "WITH users AS (SELECT 1 AS x), (SELECT count() FROM users) AS n SELECT n UNION ALL WITH 1 AS z SELECT n"
    canonical = await _canonical(db, sql)
    raw = await db.backend.query(parse_request(sql), "TSVRaw", new_query_id())
    ast = decode_parse(*raw.decode().rstrip("\n").split("\t"))[1]
    with pytest.raises(QueryRefused, match="users is a CTE that this part of the statement cannot see"):
        policy.check(canonical, ast, frozenset())
    same_branch = "WITH users AS (SELECT 1 AS x), (SELECT count() FROM users) AS n SELECT n UNION ALL SELECT n"
    raw = await db.backend.query(parse_request(same_branch), "TSVRaw", new_query_id())
    canonical, ast = decode_parse(*raw.decode().rstrip("\n").split("\t"))
    assert policy.check(canonical, ast, frozenset()).tables == frozenset()


async def test_re_checking_scalar_aliases_in_later_branches_is_bounded(scoped: Database) -> None:
    """Each later branch with a WITH of its own checks the first SELECT's scalar aliases again: a statement made of
    nothing else is refused as too complex, where a union as long with the CTE copied whole is checked."""
    scalar = "(SELECT tuple(" + ", ".join(str(i) for i in range(2000)) + ")) AS s"
    hostile = f"WITH {scalar} SELECT s UNION ALL " + " UNION ALL ".join(f"WITH {i} AS z SELECT s" for i in range(900))
    refused = await scoped.execute(hostile)
    assert not refused.ok and "too complex" in (refused.error or ""), refused.error
    plain = f"WITH {scalar} SELECT s UNION ALL " + " UNION ALL ".join("SELECT s" for _ in range(2000))
    assert len(plain) > len(hostile) * 0.9
    assert (await scoped.check(plain)).tables == frozenset()


async def test_the_scoping_the_check_models_is_pinned_on_every_connection(db: Database) -> None:
    """A profile cannot turn off what union_with.py models: the agent's connections set it (a read-only server
    profile must carry it, as it must the limits), and this engine's connections have it."""
    settings = engine_settings(make_settings(), Scope.of(["nycflights13"]))
    assert settings["enable_global_with_statement"] == 1 and settings["enable_analyzer"] == 1
    assert list(settings)[-1] == "readonly"
    rows = await db.backend.query(
        "SELECT name, value FROM system.settings WHERE name IN ('enable_global_with_statement', 'enable_analyzer') "
        "ORDER BY name",
        "TSV",
        new_query_id(),
    )
    assert rows.decode().split() == ["enable_analyzer", "1", "enable_global_with_statement", "1"]


@pytest.mark.parametrize(
    "sql",
    [
        "WITH t AS (SELECT 1 AS x) SELECT x FROM t UNION ALL WITH u AS (SELECT 2 AS x) SELECT x FROM t",
        "SELECT * FROM (WITH t AS (SELECT 1 AS x) SELECT x FROM t) UNION ALL SELECT x FROM t",
        "SELECT x FROM t UNION ALL (WITH t AS (SELECT 1 AS x) SELECT x FROM t)",
    ],
)
async def test_a_cte_named_where_it_is_not_visible_is_refused_with_why(scoped: Database, sql: str) -> None:
    result = await scoped.execute(sql)
    assert not result.ok
    assert "t is a CTE that this part of the statement cannot see" in (result.error or ""), result.error
    assert "qualify" not in (result.error or "") + (result.hint or "")

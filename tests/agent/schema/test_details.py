"""`lookup_schema`'s details of a table too wide for one answer: pages, a filter, and what was left out."""

from __future__ import annotations

from agent.schema import Catalog, Column, Table

WIDTH = 900


def sensors() -> Table:
    """A telemetry table as devices export it: hundreds of readings, one column each."""
    columns = [Column("device_id", "UInt64", "The device"), Column("read_at", "DateTime", "When it was read")]
    columns += [
        Column(f"reading_{n:04d}", "Nullable(Float64)", f"Sensor channel {n} reading") for n in range(WIDTH - 3)
    ]
    columns.append(Column("battery_voltage", "Nullable(Float64)", "Battery voltage, in volts"))
    return Table("iot", "readings", "MergeTree", "Device telemetry", "device_id, read_at", 10**9, "", columns)


def rows(text: str) -> list[str]:
    return [line.split(" | ")[0][2:] for line in text.splitlines() if line.startswith("| ") and "---" not in line][1:]


def test_a_wide_table_pages_within_the_answer_and_says_what_was_left_out() -> None:
    catalog = Catalog([sensors()], "iot")
    first = catalog.details(["iot.readings"], max_chars=10_000)
    assert len(first) <= 10_000
    shown = rows(first)
    assert shown[:2] == ["device_id", "read_at"] and "battery_voltage" not in shown
    pages = int(first.split("(page 1 of ")[1].split(")")[0])
    assert f"Columns 1-{len(shown)} of {WIDTH} shown (page 1 of {pages}); {WIDTH - len(shown)} left out." in first
    assert 'Ask again with "page": 2' in first
    seen = []
    for page in range(1, pages + 1):
        text = catalog.details(["iot.readings"], max_chars=10_000, page=page)
        assert len(text) <= 10_000
        seen += rows(text)
    assert seen == [c.name for c in sensors().columns]  # every column once, in order, over the pages
    assert "This is the last page" in catalog.details(["iot.readings"], max_chars=10_000, page=pages)


def test_a_filter_shows_the_matching_columns_and_says_how_many_were_left_out() -> None:
    text = Catalog([sensors()], "iot").details(["iot.readings"], max_chars=10_000, columns="battery volts")
    assert rows(text) == ["battery_voltage"]
    assert f"(1 of {WIDTH} columns match 'battery volts'; the other {WIDTH - 1} are left out.)" in text
    none = Catalog([sensors()], "iot").details(["iot.readings"], columns="humidity")
    assert f"No column of its {WIDTH} matches 'humidity'" in none and rows(none) == []


def test_a_table_that_fits_is_shown_whole_as_before() -> None:
    narrow = Table("iot", "devices", "MergeTree", "", "", 10, "", [Column("device_id", "UInt64", "The device")])
    text = Catalog([narrow], "iot").details(["iot.devices"])
    assert text.endswith("| device_id | UInt64 | The device |")


def test_narrow_tables_asked_with_a_wide_one_are_shown_whole_and_the_wide_one_takes_the_rest() -> None:
    narrow = [
        Table("iot", f"lookup_{n}", "MergeTree", "", "", 10, "", [Column(f"code_{n}", "String", "A code")])
        for n in range(6)
    ]
    catalog = Catalog([sensors(), *narrow], "iot")
    text = catalog.details(["iot.readings", *(t.qualified for t in narrow)], max_chars=10_000)
    assert len(text) <= 10_000
    assert all(f"| code_{n} | String | A code |" in text for n in range(6))
    assert "left out" in text and len(rows(text)) > 100  # the wide one has most of the answer

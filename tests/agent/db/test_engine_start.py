"""The embedded engine's start-up limit grows with the table definitions it must read first."""

from __future__ import annotations

from pathlib import Path

from agent.db.embedded import start_timeout


def data_folder(root: Path, tables: int, columns: int) -> Path:
    """A data folder laid out as chdb lays out an Atomic database: `metadata/<db>.sql`, and
    `metadata/<db>` a link to the folder of its tables' definitions."""
    store = root / "store" / "abc" / "abc12345"
    store.mkdir(parents=True)
    (root / "metadata").mkdir()
    (root / "metadata" / "warehouse.sql").write_text("ATTACH DATABASE warehouse ENGINE = Atomic\n")
    (root / "metadata" / "warehouse").symlink_to(store)
    body = ",\n".join(f"    `reading_{n:05d}` Nullable(Float64) COMMENT 'Sensor channel {n}'" for n in range(columns))
    for n in range(tables):
        (store / f"table_{n:03d}.sql").write_text(f"ATTACH TABLE _ UUID '{n}'\n(\n{body}\n)\nENGINE = MergeTree\n")
    return root


def test_a_folder_of_hundreds_of_wide_tables_gets_more_than_the_fixed_minute(tmp_path: Path) -> None:
    small = start_timeout(data_folder(tmp_path / "small", tables=5, columns=10))
    large = start_timeout(data_folder(tmp_path / "large", tables=366, columns=300))  # 110,000 columns
    assert start_timeout(tmp_path / "new") == 60.0  # a folder the engine has not written yet
    assert 60.0 <= small < 62.0
    assert large > 2.5 * 60.0

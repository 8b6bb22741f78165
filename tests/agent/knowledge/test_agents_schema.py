"""A warehouse that publishes the Agents Schema (an `agents` database of dbt and OSI descriptions):
its descriptions of tables in scope join the team's knowledge as notes, after the files' own."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from agent.db import Database, open_database
from agent.knowledge import KnowledgeBase
from agent.knowledge.agents_schema import AgentsSchema, read_agents_schema
from agent.knowledge.files import Entry
from tests.conftest import make_settings
from tests.fakes.anthropic_api import FakeAnthropic, Reply

# The tables as the agents-schema package writes them on ClickHouse (database `agents`, lower-case names).
WAREHOUSE = """
CREATE DATABASE shop;
CREATE DATABASE hidden;
CREATE TABLE shop.orders (id UInt64, amount Decimal(12, 2), status String) ENGINE = MergeTree ORDER BY id;
CREATE TABLE shop.customers (id UInt64, region String) ENGINE = MergeTree ORDER BY id;
CREATE TABLE hidden.salaries (person String, pay UInt32) ENGINE = MergeTree ORDER BY person;
CREATE DATABASE agents;
CREATE TABLE agents.root (provider String, key String, content String) ENGINE = MergeTree ORDER BY (provider, key);
CREATE TABLE agents.dbt_model (unique_id String, name String, database_name Nullable(String),
    schema_name Nullable(String), materialization Nullable(String), description Nullable(String),
    file_path Nullable(String), tags Array(String), meta String) ENGINE = MergeTree ORDER BY unique_id;
CREATE TABLE agents.dbt_column (model_id String, column_name String, data_type Nullable(String),
    description Nullable(String), meta String) ENGINE = MergeTree ORDER BY (model_id, column_name);
CREATE TABLE agents.osi_dataset (model_name String, name String, source String, primary_key Array(String),
    unique_keys Array(String), description Nullable(String), synonyms Array(String), ai_context Array(String),
    custom_extensions Array(String)) ENGINE = MergeTree ORDER BY (model_name, name);
CREATE TABLE agents.osi_field (dataset_name String, name String, label Nullable(String),
    description Nullable(String), is_time_dimension Bool, expressions Array(String), synonyms Array(String),
    ai_context Array(String), custom_extensions Array(String)) ENGINE = MergeTree ORDER BY (dataset_name, name);
INSERT INTO agents.dbt_model VALUES
    ('model.shop.orders', 'orders', '', 'shop', 'table',
     'One row per order; refunds are separate orders with a negative amount.', 'models/orders.sql', [], '{}'),
    ('model.shop.salaries', 'salaries', '', 'hidden', 'table', 'Pay of every person.', 'models/salaries.sql', [], '{}'),
    ('model.shop.gone', 'gone', '', 'shop', 'table', 'A model never built.', 'models/gone.sql', [], '{}');
INSERT INTO agents.dbt_column VALUES
    ('model.shop.orders', 'amount', 'Decimal', 'Order total in EUR, VAT included.', '{}'),
    ('model.shop.orders', 'status', 'String', '', '{}'),
    ('model.shop.orders', 'no_such_column', 'String', 'Dropped last year.', '{}'),
    ('model.shop.salaries', 'pay', 'UInt32', 'Monthly pay.', '{}');
INSERT INTO agents.osi_dataset VALUES
    ('shop', 'customers', 'warehouse.shop.customers', ['id'], [], 'Customers, one row each.', [], [], []);
INSERT INTO agents.osi_field VALUES
    ('customers', 'region', 'Region', 'Sales region: EMEA, AMER or APAC.', false, [], [], [], []);
"""


@pytest.fixture(scope="module")
async def warehouse(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Database]:
    path = tmp_path_factory.mktemp("agents-schema") / "clickhouse"
    script = (
        "import sys, chdb\n"
        "connection = chdb.connect(sys.argv[1])\n"
        "for statement in sys.stdin.read().split(';' + chr(10)):\n"
        "    if statement.strip():\n"
        "        connection.query(statement)\n"
        "connection.close()\n"
    )
    subprocess.run([sys.executable, "-c", script, str(path)], input=WAREHOUSE, text=True, check=True, timeout=120)
    database = open_database(make_settings(clickhouse_url=f"chdb://{path}", clickhouse_databases=["shop"]))
    yield database
    await database.close()


async def test_descriptions_of_tables_in_scope_become_notes(warehouse: Database) -> None:
    entries = await read_agents_schema(warehouse)
    notes = {entry.name: entry.text("note") for entry in entries}
    assert notes == {
        "shop.orders": "One row per order; refunds are separate orders with a negative amount.",
        "shop.orders.amount": "Order total in EUR, VAT included.",
        "shop.customers": "Customers, one row each.",
        "shop.customers.region": "Sales region: EMEA, AMER or APAC.",
    }  # nothing on hidden.salaries (out of scope), a model never built, a column that is gone, or an empty one
    assert all(entry.kind == "notes" for entry in entries)
    assert {str(entry.path) for entry in entries} == {"agents.dbt_model", "agents.dbt_column", "agents.osi_dataset",
                                                     "agents.osi_field"}  # fmt: skip


async def test_a_warehouse_without_the_agents_schema_has_nothing_to_join(db: Database) -> None:
    assert await read_agents_schema(db) == []


def note(table: str, text: str, column: str = "") -> Entry:
    fields = {"table": table, "note": text, **({"column": column} if column else {})}
    return Entry("notes", f"{table}.{column}" if column else table, fields, Path("notes.yaml"), 1)


async def test_they_join_after_the_files_own_and_the_files_win(warehouse: Database) -> None:
    base = KnowledgeBase([note("shop.orders", "Use status = 'paid' for revenue.")], max_chars=8_000)
    await AgentsSchema(warehouse, base).join()
    assert [entry.name for entry in base.entries] == [
        "shop.orders",  # the team's file, not the warehouse's description of the same table
        "shop.orders.amount",
        "shop.customers",
        "shop.customers.region",
    ]
    assert "Use status = 'paid' for revenue." in base.prefix.text and "refunds are separate" not in base.prefix.text
    assert "- **shop.orders.amount** [note: shop.orders.amount]: Order total in EUR, VAT included." in base.prefix.text
    described = {entry["tag"]: entry["source"] for entry in base.described()}
    assert described["[note: shop.orders.amount]"] == "agents.dbt_column:1"
    await AgentsSchema(warehouse, base).join()  # joining again adds nothing twice
    assert len(base.entries) == 4


async def test_the_model_sees_them_in_the_prompt(make_app, fake_anthropic: FakeAnthropic, warehouse: Database) -> None:
    fake_anthropic.script(Reply(text="ok"))
    app = make_app(warehouse, clickhouse_databases=["shop"])
    await app.runner.run("What is an order's amount?", followups=False)
    system = fake_anthropic.requests[0]["system"][1]["text"]
    assert "# What this team knows" in system and "Order total in EUR, VAT included." in system
    assert "Monthly pay" not in system and "salaries" not in system
    assert app.knowledge is not None and any(
        e["tag"] == "[note: shop.customers.region]" for e in app.knowledge.described()
    )

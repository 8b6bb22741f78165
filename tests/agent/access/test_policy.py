"""What two policies read together (`Policy.narrowed`), and whether one reads all another does
(`Policy.covers`): a stored answer read again runs under the policy it was asked under narrowed by its
audience's policy now, so access taken away applies at once."""

from __future__ import annotations

from types import MappingProxyType

from agent.access.policy import Policies, Policy
from agent.db import Database

FLIGHTS, AIRPORTS, PLANES = "nycflights13.flights", "nycflights13.airports", "nycflights13.planes"


def policy(name: str, **tables: str | None) -> Policy:
    return Policy(name, MappingProxyType({f"nycflights13.{t}": rows for t, rows in tables.items()}))


def test_narrowed_keeps_the_tables_both_read_with_both_filters() -> None:
    jfk = policy("jfk", flights="origin = 'JFK'", airports=None, planes=None)
    united = policy("united", flights="carrier = 'UA'", airports=None)
    both = jfk.narrowed(united)
    assert dict(both.tables) == {FLIGHTS: "(origin = 'JFK') AND (carrier = 'UA')", AIRPORTS: None}
    assert both.name == "jfk&united" and PLANES not in both.tables


def test_narrowed_by_a_policy_that_reads_as_much_is_itself_and_by_nothing_reads_nothing() -> None:
    jfk = policy("jfk", flights="origin = 'JFK'", airports=None)
    assert jfk.narrowed(policy("wider", flights=None, airports=None, planes=None)) is jfk
    assert jfk.narrowed(policy("same", flights="origin = 'JFK'", airports=None)) is jfk
    assert jfk.narrowed(Policy("no-data")).reads_nothing


def test_covers_means_every_table_with_no_filter_or_the_same_one() -> None:
    jfk = policy("jfk", flights="origin = 'JFK'", airports=None)
    assert policy("all", flights=None, airports=None).covers(jfk)
    assert policy("jfk-again", flights="origin = 'JFK'", airports=None, planes=None).covers(jfk)
    assert not policy("ewr", flights="origin = 'EWR'", airports=None).covers(jfk)
    assert not policy("no-airports", flights=None).covers(jfk)
    assert not Policy("no-data").covers(jfk)


async def test_the_engine_applies_both_filters_of_a_narrowed_policy(db: Database) -> None:
    jfk = policy("jfk", flights="origin = 'JFK'")
    united = policy("united", flights="carrier = 'UA'")
    sql = "SELECT origin, carrier, count() FROM nycflights13.flights GROUP BY origin, carrier ORDER BY origin, carrier"
    result = await db.execute(sql, policy=jfk.narrowed(united))
    assert result.ok and result.rows == [["JFK", "UA", "4534"]]


def test_a_stored_answers_policy_is_covered_only_when_the_file_still_names_it() -> None:
    """`Policies.covers_asked`: a name renamed or removed, or none recorded, is not known, so no reader covers
    it, not even one reading everything (the default it once resolved to reads nothing, which all cover)."""
    jfk = policy("jfk", flights="origin = 'JFK'")
    everything = policy("everything", flights=None)
    policies = Policies((jfk, everything), Policy("no-data"))
    assert policies.covers_asked(everything, "jfk") and policies.covers_asked(jfk, "jfk")
    assert not policies.covers_asked(jfk, "everything")
    assert policies.covers_asked(jfk, "no-data"), "the default, named, is known (it reads nothing)"
    assert not policies.covers_asked(everything, "newark"), "a name the file no longer has"
    assert not policies.covers_asked(everything, ""), "no name recorded"

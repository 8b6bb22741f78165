"""Comments under a policy: what mentions a hidden table or a hidden value goes, sentence by sentence."""

from __future__ import annotations

import pytest

from agent.schema.redaction import mentions, scrub

HIDDEN = mentions(["nycflights13.planes", "nycflights13.weather"], ["LGA", "EWR"])


@pytest.mark.parametrize(
    ("comment", "shown"),
    [
        ("Departures. Hourly conditions live in the weather table.", "Departures."),
        ("Tail number; look it up in planes", "Tail number"),
        ("Tail number (joins planes.tailnum)", "Tail number"),
        ("Joins `nycflights13`.`planes` by tail. Scheduled hour.", "Scheduled hour."),
        ("See NYCFLIGHTS13.WEATHER for wind.", ""),
        ("Every flight that departed NYC (EWR, JFK, LGA) in 2013.", "Every flight that departed NYC in 2013."),
        ("Weather station: EWR, JFK or LGA", ""),
        (
            "Weather_days and planes_2 are other words; LGA is a value as stored",
            "Weather_days and planes_2 are other words",
        ),
        ("Values match as stored: lga, Ewr", "Values match as stored: lga, Ewr"),
    ],
)
def test_a_sentence_or_remark_mentioning_what_is_hidden_is_dropped(comment: str, shown: str) -> None:
    assert scrub(comment, HIDDEN) == shown


def test_nothing_hidden_leaves_every_comment() -> None:
    assert mentions([], []) is None and scrub("Every flight (EWR, JFK, LGA).", None) == "Every flight (EWR, JFK, LGA)."

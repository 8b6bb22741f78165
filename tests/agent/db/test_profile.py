"""The agent's limits within the user's profile: never above a constraint's max or the profile's own
lower value, never below a min, and a fixed setting not sent."""

from __future__ import annotations

from agent.db.profile import ProfileSetting, profile_query, within_profile

WANTED = {
    "max_execution_time": 30,
    "max_rows_to_read": 500_000_000,
    "max_result_rows": 100_000,
    "max_result_bytes": 200_000_000,
    "result_overflow_mode": "break",
    "readonly": 1,
}


def setting(name: str, value: str = "0", changed: bool = False, mn: str | None = None, mx: str | None = None,
            fixed: bool = False) -> ProfileSetting:  # fmt: skip
    return ProfileSetting(name, value, changed, mn, mx, fixed)


def test_a_profile_without_constraints_takes_the_agents_limits() -> None:
    profile = {name: setting(name) for name in WANTED}
    assert within_profile(WANTED, profile) == (WANTED, [])


def test_a_profile_capping_lower_caps_the_agents_limits() -> None:
    profile = {
        "max_result_rows": setting("max_result_rows", "1000", True, mx="1000"),  # constrained and set
        "max_rows_to_read": setting("max_rows_to_read", "0", False, mx="1000000"),  # constrained only
        "max_execution_time": setting("max_execution_time", "10", True),  # set lower, no constraint
        "max_result_bytes": setting("max_result_bytes", "0", True),  # set to 0: no limit, not a cap
    }
    sent, notes = within_profile(WANTED, profile)
    assert sent == {
        **WANTED,
        "max_result_rows": 1000,
        "max_rows_to_read": 1_000_000,
        "max_execution_time": 10,
    }
    assert notes == [
        "max_execution_time: 10 as the profile allows (the agent's own is 30)",
        "max_rows_to_read: 1000000 as the profile allows (the agent's own is 500000000)",
        "max_result_rows: 1000 as the profile allows (the agent's own is 100000)",
    ]


def test_a_looser_profile_never_raises_the_agents_limits() -> None:
    profile = {
        "max_result_rows": setting("max_result_rows", "10000000", True, mx="20000000"),
        "max_execution_time": setting("max_execution_time", "3600", True),
    }
    assert within_profile(WANTED, profile)[0] == WANTED


def test_a_floor_and_a_fixed_setting() -> None:
    profile = {
        "max_execution_time": setting("max_execution_time", "60", True, mn="60"),  # the profile's floor
        "result_overflow_mode": setting("result_overflow_mode", "throw", True, fixed=True),
        "max_result_rows": setting("max_result_rows", "100000", True, fixed=True),  # fixed at our value
        "readonly": setting("readonly", "0", False, fixed=True),  # kept: a profile refusing it is refused later
    }
    sent, notes = within_profile(WANTED, profile)
    assert sent["max_execution_time"] == 60
    assert "result_overflow_mode" not in sent and "max_result_rows" not in sent and sent["readonly"] == 1
    assert "result_overflow_mode: the profile fixes it at throw (the agent's break is not sent)" in notes
    assert not any(note.startswith("max_result_rows") for note in notes)  # the same value: nothing to say


def test_settings_printed_in_other_shapes() -> None:
    """Seconds may print as a decimal; a value that is no number is no bound."""
    profile = {
        "max_execution_time": setting("max_execution_time", "12.5", True),
        "max_rows_to_read": setting("max_rows_to_read", "0", False, mx="lots"),
    }
    sent, _ = within_profile(WANTED, profile)
    assert sent["max_execution_time"] == 12 and sent["max_rows_to_read"] == 500_000_000
    assert ProfileSetting.of(["max_result_rows", "5", 1, None, "5", 0]) == setting("max_result_rows", "5", True, mx="5")
    assert profile_query(["a", "b'c"]) == (
        "SELECT name, value, changed, min, max, readonly FROM system.settings WHERE name IN ('a', 'b\\'c')"
    )

"""The agent's limits within what the ClickHouse user's profile allows.

The agent sends its own limits with every query (agent/db/__init__.py, `engine_settings`). A profile
may constrain a limit (`<constraints><max_result_rows><max>1000</max>`, or `SETTINGS max_result_rows =
1000 MAX 1000`): sending more than its `max` fails every query with SETTING_CONSTRAINT_VIOLATION (452).
A profile may also set a limit lower than the agent's, which the agent must not raise. So each limit
sent is at most the constraint's `max` and, where the profile changed it, the profile's own value (0
meaning no limit); never below a `min`; and a setting the profile fixes (a `CONST` or `readonly`
constraint) is not sent at all, its value holds. `system.settings` says all of it for the current user.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

# The limits capped by the profile: a lower value is always allowed and always stricter.
LIMITS = (
    "max_execution_time",
    "max_rows_to_read",
    "max_bytes_to_read",
    "max_result_rows",
    "max_result_bytes",
    "max_memory_usage",
)
KEPT = ("readonly",)  # sent as they are: a profile that refuses them is refused at start-up


@dataclass(frozen=True)
class ProfileSetting:
    """One row of `system.settings` for the current user."""

    name: str
    value: str
    changed: bool
    min: str | None
    max: str | None
    fixed: bool  # the `readonly` column: this user cannot change it

    @classmethod
    def of(cls, row: Iterable[Any]) -> ProfileSetting:
        name, value, changed, minimum, maximum, readonly = row
        return cls(str(name), str(value), bool(int(changed)), _text(minimum), _text(maximum), bool(int(readonly)))


def profile_query(names: Iterable[str]) -> str:
    listed = ", ".join("'" + name.replace("\\", "\\\\").replace("'", "\\'") + "'" for name in names)
    return f"SELECT name, value, changed, min, max, readonly FROM system.settings WHERE name IN ({listed})"


def within_profile(
    wanted: Mapping[str, Any], profile: Mapping[str, ProfileSetting]
) -> tuple[dict[str, Any], list[str]]:
    """The settings to send, and a line for each one the profile changed (for the log)."""
    sent: dict[str, Any] = {}
    notes: list[str] = []
    for name, value in wanted.items():
        setting = profile.get(name)
        if setting is None or name in KEPT:
            sent[name] = value
        elif setting.fixed:
            if not _same(value, setting.value):
                notes.append(f"{name}: the profile fixes it at {setting.value} (the agent's {value} is not sent)")
        elif name in LIMITS and isinstance(value, int):
            capped = _capped(value, setting)
            if capped != value:
                notes.append(f"{name}: {capped} as the profile allows (the agent's own is {value})")
            sent[name] = capped
        else:
            sent[name] = value
    return sent, notes


def _capped(value: int, setting: ProfileSetting) -> int:
    bounds = [value]
    if (maximum := _number(setting.max)) is not None and maximum > 0:
        bounds.append(maximum)
    if setting.changed and (own := _number(setting.value)) is not None and own > 0:
        bounds.append(own)  # the profile's own limit, lower than the agent's: kept
    capped = min(bounds)
    if (minimum := _number(setting.min)) is not None and capped < minimum:
        capped = minimum  # a lower value would be refused; the profile's floor is the strictest allowed
    return capped


def _number(text: str | None) -> int | None:
    """A limit as system.settings prints it (`1000`, `30`, `1.5` seconds rounded down); None if not one."""
    if text is None or not text.strip():
        return None
    try:
        return int(float(text))
    except ValueError:
        return None


def _same(value: Any, current: str) -> bool:
    return str(value) == current or (isinstance(value, int) and _number(current) == value)


def _text(value: Any) -> str | None:
    return None if value is None else str(value)

"""A run another host takes over keeps the policy it ran under, found again by its name in this host's
policy file; one the file no longer has is not resumed under another (process/service.py)."""

from __future__ import annotations

from types import MappingProxyType, SimpleNamespace
from typing import Any

from agent.access.policy import Policies, Policy
from process.service import resumed_policy

OPS = Policy("ops", MappingProxyType({"nycflights13.airlines": None}))


def agent_with(policies: Policies | None) -> Any:
    return SimpleNamespace(policies=policies)  # all resumed_policy reads of the agent


def test_a_run_taken_over_keeps_its_policy_and_one_the_file_lost_is_not_resumed() -> None:
    policies = Policies((OPS,), Policy("default"))
    assert resumed_policy(agent_with(policies), "ops") == (OPS, False)
    assert resumed_policy(agent_with(policies), "default") == (policies.default, False)
    assert resumed_policy(agent_with(None), "") == (None, False)  # it ran under none, and this host has none
    assert resumed_policy(agent_with(policies), "finance") == (None, True)
    assert resumed_policy(agent_with(None), "ops") == (None, True)  # the file is gone from this host


def test_a_run_with_no_policy_is_not_resumed_unrestricted_on_a_host_with_a_policy_file() -> None:
    """A run kept with no policy ("": its host had no policy file) taken over by a host that has one ends with
    a message: resumed with no policy, its queries would read all of the scope this host restricts."""
    policies = Policies((OPS,), Policy("default"))
    assert resumed_policy(agent_with(policies), "") == (None, True)

"""Outside review 2: chats' person ids (`person_id`) fold an email with `str.casefold`, which maps distinct
Unicode addresses onto ASCII ones (tests/agent/access/test_attacks_review_2.py says the same of policy
members): one address then owns another person's conversations, budgets and rate limits."""

from __future__ import annotations

import pytest

from chats.people import person_id
from tests.agent.access.test_attacks_review_2 import LOOKALIKES


@pytest.mark.parametrize(("named", "other"), LOOKALIKES)
def test_two_addresses_that_fold_alike_are_not_one_person(named: str, other: str) -> None:
    assert person_id(email=named.upper(), fallback="") == person_id(email=named, fallback=""), "holds today"
    assert person_id(email=other, fallback="") != person_id(email=named, fallback=""), (
        f"{other!r} owns {named!r}'s conversations, budgets and rate limits"
    )

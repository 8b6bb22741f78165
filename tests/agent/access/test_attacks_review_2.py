"""Outside review 2: a policy member's email is compared with `str.casefold`, which is not only a case
fold: it maps distinct Unicode addresses onto ASCII ones (KELVIN SIGN U+212A folds to `k`, `ß` to `ss`,
the ligature U+FB01 to `fi`). A verified address an identity provider treats as its own mailbox then
matches another person's policy. (chats' person ids fold alike:
tests/chats/test_attacks_review_2.py.) Asserts the SAFE behaviour: distinct addresses stay
distinct (a case-blind ASCII compare, or NFKC then casefold with non-ASCII refused, would do)."""

from __future__ import annotations

import pytest

from agent.access.policy import Asker, Member

LOOKALIKES = [
    ("kate@example.com", "\u212aate@example.com"),  # KELVIN SIGN
    ("strasse@example.com", "stra\u00dfe@example.com"),  # sharp s
    ("finance@example.com", "\ufb01nance@example.com"),  # fi ligature
]


@pytest.mark.parametrize(("named", "other"), LOOKALIKES)
def test_a_policys_email_member_does_not_match_another_address_that_folds_to_it(named: str, other: str) -> None:
    assert Member("email", named).matches(Asker(email=named.upper())), "case-blind (holds today)"
    assert not Member("email", named).matches(Asker(email=other)), f"{other!r} gets {named!r}'s policy"

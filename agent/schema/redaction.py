"""What a policy's schema must not say in the prose written about its tables: table and column comments
(and view definitions) are written by whoever has DDL rights, about the whole warehouse, and the
prompt, the catalogue and `lookup_schema` show them to the model of a policy that reads only part of it.

So under a policy a comment loses every parenthesised remark and every sentence that mentions a table
the policy cannot read (its name in any form: a bare word, `backticks`, `db.table`, `table.column`,
case-blind, as agent/knowledge/base.py leaves out knowledge) or a value only the rows it hides hold
(as written, a whole token: `LGA` in "departed NYC (EWR, JFK, LGA)"). Dropping the whole sentence, not
the word, says nothing of how many values were there. The result depends only on the data and the
policy, so each policy's prefix stays byte-stable.
"""

from __future__ import annotations

import re
from collections.abc import Collection

_PARENTHESISED = re.compile(r"\s*\([^()]*\)")
_SENTENCES = re.compile(r"(?<=[.;!?])\s+")
_LOOSE_ENDS = " \t;,:"


def mentions(hidden_tables: Collection[str], hidden_values: Collection[str]) -> re.Pattern[str] | None:
    """A pattern that finds a mention of a hidden table (`db.table` or its own name, case-blind) or of a
    hidden value (case as stored); None when there is nothing to hide."""
    names = {part for table in hidden_tables for part in (table, table.split(".", 1)[-1]) if part}
    values = {value for value in hidden_values if value.strip()}
    alternatives = []
    if names:
        alternatives.append("(?i:" + "|".join(map(re.escape, sorted(names, key=lambda n: (-len(n), n)))) + ")")
    if values:
        alternatives.append("(?:" + "|".join(map(re.escape, sorted(values, key=lambda v: (-len(v), v)))) + ")")
    if not alternatives:
        return None
    return re.compile(r"(?<!\w)(?:" + "|".join(alternatives) + r")(?!\w)")


def scrub(text: str, mention: re.Pattern[str] | None) -> str:
    """`text` without the parenthesised remarks and the sentences (or clauses after a `;`) that mention
    what is hidden."""
    if mention is None or not mention.search(text):
        return text
    kept = _PARENTHESISED.sub(lambda found: "" if mention.search(found.group(0)) else found.group(0), text)
    sentences = [sentence for sentence in _SENTENCES.split(kept.strip()) if not mention.search(sentence)]
    return " ".join(sentences).strip(_LOOSE_ENDS)

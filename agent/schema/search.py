"""The tables a question needs, best first: the lookup's search over a warehouse too large to show.

Measured on real schemas (benchmarks/bench_retrieval_real.py), a plain BM25 over one document per
table misses in these ways, and each step below answers one:

- a wide table outranks the right narrow one: each term counts once per table, at its best field
  (its name, a column's name or comment), with a mild length discount;
- in a warehouse of many databases, look-alike tables of another database win: a table gains with
  how well its own database matches the question, since a question's tables live together. A
  database is scored as one document of all its tables' words, by BM25 with a length discount: a
  plain sum of the words it covers let the largest database (hundreds of tables, every word somewhere)
  win questions about small ones;
- the lookup, link and concept tables a question never names are missing: a table gains from the
  best hit it joins (agent/schema/joins.py), more where the hit's column that names it matched the
  question ("blue eyes" matched `superhero.eye_colour_id`, which names `colour`); the last places of
  a list go to the tables the first two hits join, and places no table matched go to the tables the
  list joins, nearest first;
- the table that joins two of the first hits is missing when the question names neither it nor a word
  of it ("info caches and security groups of VMs" needs `instances`, which both `instance_info_caches`
  and `security_group_instance_association` join): of the first four hits, two that do not join each
  other bring the best table that joins both, right after them, since a question's tables join up;
- a table named by a word of the question loses to a shorter one that shares the word (`drivers` to
  `driverStandings`): a table the question names whole gains half its score;
- a family of split or copied tables fills the list with near-duplicates: it is one hit, and the
  member shown is the one the question's date names, else the newest (agent/schema/families.py);
- a question names its rows by values the schema does not hold ("the 2008 Australian Grand Prix",
  "Lewis Hamilton"): a date in the question counts as a word that the tables with a date column have
  (by type, or named `date`/`year` where types were not kept), and a proper name (capitalised words in
  a row that are no word of the warehouse) as one that the tables whose rows have a name in parts
  have (`forename` and `surname`, `first_name` and `last_name`; not `department_name`, which names
  another table's rows).

A question's leading command ("List the...", "Provide information about...") is not searched for, nor
the ids it quotes (a UUID's pieces matched a baseball table's `ab` and `bb`).
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Sequence

from agent.lexical import Field, Hit, LexicalIndex, terms, words_of
from agent.schema.families import Families, question_dates
from agent.schema.joins import JoinGraph
from agent.schema.tables import Column, Table

# Field weights: a word in a table's name says more than one among its sampled values.
TABLE_NAME, TABLE_COMMENT, COLUMN_NAME, COLUMN_COMMENT, SAMPLES = 3.0, 2.0, 1.0, 1.0, 0.5
LENGTH_DISCOUNT = 0.3  # BM25's b: a wide table is discounted, less than a long text would be
DATABASE_WEIGHT = 2.0  # a table of the best-matching database gains twice the top score
DATABASE_LENGTH_DISCOUNT = 0.3  # BM25's b over databases: a database of many words is discounted, mildly
WHOLE_NAME = 0.5  # a table the question names whole gains half its score (`drivers` over `driverStandings`)
JOIN_WEIGHT = 0.3  # a table gains this share of the score of the best hit it joins,
VIA_WEIGHT = 0.45  # or this share where the hit's column that names it matched the question (`eye_colour_id`)
KEY_WORDS = frozenset(terms("id key code uuid no number ref"))  # a key's suffix says nothing of what it names
JOINED_PLACES = 3  # of ten hits, the last three are kept for tables the first two join
CANDIDATES = 300
NAMED = "~name"  # the tag of a table whose rows have a name in parts (`forename`, `surname`)
NAME_WEIGHT = 1.0  # a proper name in the question counts as one of its words
NAME_COLUMNS = 2
# Capitalised words in a row, not opening the text or a sentence: a proper name ("Lewis Hamilton").
PROPER = re.compile(r"(?<![.?!]\s)(?<!^)\b[A-Z][a-z]+(?:\s+[A-Z][a-z]+)+")
CONNECTED_HITS = 4  # of the first hits, two that do not join bring the table both join
DATED = "~date"  # the tag of a table with a date column (no text's term has a `~`)
DATE_WORDS = frozenset(terms("date year"))
DATE_TYPES = re.compile(r"\bDate(?:Time)?(?:32|64)?\b")
DATE_WEIGHT = 1.0  # a question's date counts as one of its words
# An id the question quotes (a UUID, a hash: `d052d786`, `bfd50153a2e9...`) names no table, but its pieces
# of letters and digits match columns by chance (`ab`, `bb`, `A11`).
VALUES = re.compile(r"\b(?=[0-9a-f-]{8})(?=[0-9a-f-]*\d)(?=[0-9a-f-]*[a-f])[0-9a-f]+(?:-[0-9a-f]+)*\b", re.IGNORECASE)
# A question's leading command ("List the names...", "Please list...", "Can you show me...") names no table.
COMMAND = re.compile(
    r"^\W*(?:(?:please|can|could|would|will|you|kindly)\b\W*)*"
    r"(?:(?:list|give|provide|show|name|find|tell|state|indicate|describe|identify|calculate|count|return|"
    r"display)\b(?:\s+me\b)?)?",
    re.IGNORECASE,
)


class TableSearch:
    def __init__(self, tables: Sequence[Table]) -> None:
        self._database = {t.qualified: t.database for t in tables}
        self._name_terms = {t.qualified: frozenset(w for w in terms(t.name) if not w.isdigit()) for t in tables}
        entities = _entity_words(tables)
        documents = {t.qualified: fields(t, entities[t.database]) for t in tables}
        self._index = LexicalIndex(documents.items(), best_field=True, b=LENGTH_DISCOUNT)
        self.families = Families(tables)
        self._joins = JoinGraph(tables, self.families)
        by_database = _database_documents(tables, documents)
        self._databases = LexicalIndex(by_database, best_field=True, b=DATABASE_LENGTH_DISCOUNT)

    def search(self, text: str, limit: int) -> list[str]:
        """Qualified names of the tables (one per family) that best match the text, best first; after
        the first four, the tables that join two of them that do not join each other; the last places go
        to the tables the first two join that are not in the list yet, and the places no table matched
        to the tables the list joins."""
        text = VALUES.sub(" ", COMMAND.sub(" ", text))
        hits = self._index.search(text, CANDIDATES, self._implied(text))
        if not hits:
            return []
        scores = self._with_neighbours(hits)
        matching = {hit.key: hit.score for hit in self._databases.search(text, len(self._databases))}
        top, best = hits[0].score, max(matching.values(), default=0.0) or 1.0
        for key in scores:
            scores[key] += DATABASE_WEIGHT * top * matching.get(self._database[key], 0.0) / best
        order = sorted(scores, key=lambda key: (-scores[key], key))
        dates = question_dates(text)
        ranked = self._shown(order, dates, limit)
        leading = ranked[:CONNECTED_HITS]
        ranked = list(dict.fromkeys(leading + self._connectors(leading, scores, dates) + ranked))
        near = set().union(*(self._joins.neighbours(first) for first in ranked[:2]))
        joined = [key for key in order if key in near]
        kept = ranked[: max(limit - JOINED_PLACES, 5)]
        shown_joined = [self.families.representative(key, dates) for key in joined]
        found = list(dict.fromkeys(kept + shown_joined + ranked))[:limit]
        return found + self._reachable(found, dates, limit - len(found))

    def _implied(self, text: str) -> dict[str, float]:
        """The tags the text asks for without their words: a date's, and a proper name's (capitalised
        words in a row, not opening a sentence, none a word of the warehouse: "Lewis Hamilton")."""
        implied = {DATED: DATE_WEIGHT} if question_dates(text) else {}
        for match in PROPER.finditer(text):
            if not any(self._index.has(term) for term in terms(match.group(0))):
                implied[NAMED] = NAME_WEIGHT
        return implied

    def _shown(self, order: list[str], dates: list[str], limit: int) -> list[str]:
        """The first `limit` tables of the order, a family once, by the member the dates name."""
        ranked: list[str] = []
        for key in order:
            if (shown := self.families.representative(key, dates)) not in ranked:
                ranked.append(shown)
            if len(ranked) == limit:
                break
        return ranked

    def _connectors(self, firsts: list[str], scores: dict[str, float], dates: list[str]) -> list[str]:
        """For each two of the first hits that do not join, the table both join, if any (best scored):
        a question's tables join up, so what joins two of them is one too."""
        out: list[str] = []
        for i, one in enumerate(firsts):
            near = self._joins.neighbours(one)
            for other in firsts[i + 1 :]:
                if other in near:
                    continue
                common = (near & self._joins.neighbours(other)) - set(firsts)
                if common:
                    best = min(common, key=lambda key: (-scores.get(key, 0.0), key))
                    out.append(self.families.representative(best, dates))
        return list(dict.fromkeys(out))

    def _named(self, hit: Hit) -> bool:
        """Whether the question names the table whole (`drivers`, not only a word of `driverStandings`)."""
        name = self._name_terms[hit.key]
        return bool(name) and name <= hit.matched

    def _reachable(self, found: list[str], dates: list[str], places: int) -> list[str]:
        """Up to `places` tables joined to the found ones, nearest first (a short list's free places: the
        link table between two hits, the lookup behind a link table)."""
        seen, frontier, out = set(found), list(found), list[str]()
        while frontier and len(out) < places:
            step = []
            for key in frontier:
                for neighbour in sorted(self._joins.neighbours(key)):
                    if (shown := self.families.representative(neighbour, dates)) not in seen:
                        seen.add(shown)
                        step.append(shown)
            out += step
            frontier = step
        return out[:places]

    def _with_neighbours(self, hits: list[Hit]) -> dict[str, float]:
        scores = {hit.key: hit.score * (1 + WHOLE_NAME * self._named(hit)) for hit in hits}
        best_neighbour: dict[str, float] = defaultdict(float)
        for hit in hits:
            for neighbour in self._joins.neighbours(hit.key):
                best_neighbour[neighbour] = max(best_neighbour[neighbour], JOIN_WEIGHT * hit.score)
            for target, columns in self._joins.via(hit.key).items():
                if any(hit.matched.intersection(terms(column)) - KEY_WORDS for column in columns):
                    best_neighbour[target] = max(best_neighbour[target], VIA_WEIGHT * hit.score)
        for key, score in best_neighbour.items():
            scores[key] = scores.get(key, 0.0) + score
        return scores


def fields(table: Table, entities: frozenset[str] = frozenset()) -> list[Field]:
    out: list[Field] = [(table.name, TABLE_NAME), (table.comment, TABLE_COMMENT)]
    for column in table.columns:
        out += [(column.name, COLUMN_NAME), (column.comment, COLUMN_COMMENT)]
        out += [(value, SAMPLES) for value in column.samples]
    if any(_dated(column) for column in table.columns):
        out.append(((DATED,), COLUMN_NAME))
    if sum(1 for column in table.columns if _own_name(column.name, entities)) >= NAME_COLUMNS:
        out.append(((NAMED,), COLUMN_NAME))
    return out


def _dated(column: Column) -> bool:
    """Whether a column holds dates: by its type, or by its name where types are not kept (`year`)."""
    return bool(DATE_TYPES.search(column.type)) or bool(DATE_WORDS.intersection(terms(column.name)))


def _own_name(column: str, entities: frozenset[str]) -> bool:
    """Whether a column holds part of the name of the table's own rows: a name in two parts (`forename`,
    `last_name`, `FirstName`), whose first word names no other table (not `department_name`)."""
    if not column.lower().endswith("name"):
        return False
    words = [word.lower() for word in words_of(column)]
    if not words[-1].endswith("name") or words == ["name"]:
        return False
    return not entities.intersection(term for word in words[:-1] for term in terms(word))


def _entity_words(tables: Sequence[Table]) -> dict[str, frozenset[str]]:
    """Each database's words of its tables' names."""
    out: dict[str, set[str]] = defaultdict(set)
    for table in tables:
        out[table.database].update(terms(table.name))
    return defaultdict(frozenset, {db: frozenset(words) for db, words in out.items()})


def _database_documents(tables: Sequence[Table], fields: dict[str, list[Field]]) -> list[tuple[str, list[Field]]]:
    """One document per database: the fields of all its tables."""
    documents: dict[str, list[Field]] = defaultdict(list)
    for table in sorted(tables, key=lambda t: t.qualified):
        documents[table.database] += fields[table.qualified]
    return list(documents.items())

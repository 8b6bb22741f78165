"""Which functions the model's SQL may call: an allowlist kept in `allowed_functions.txt`.

The list was generated from the engine's own `system.functions`, `system.table_functions` and
aggregate combinators, minus DENIED below, and is committed: a function ClickHouse adds next year is
refused until someone reviews it and adds it (`python -m agent.db.functions review` lists them).
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass
from functools import cache
from pathlib import Path

ALLOWLIST_PATH = Path(__file__).with_name("allowed_functions.txt")
MAX_NAME_CHARS = 200  # ClickHouse's longest function name with combinators is far shorter

# Reasons are shown to whoever reviews the list; every denied name is refused whatever its case.
_DENY_GROUPS: dict[str, str] = {
    # files, network, processes, other systems
    "file filesystemAvailable filesystemCapacity filesystemUnreserved": "reads the host's files or disks",
    "aiClassify aiEmbed aiExtract aiFilter aiGenerate aiRedact aiSimilarity aiTranslate "
    "AIClassify AIEmbed AIExtract AIFilter AIGenerate AIRedact AISimilarity AITranslate": (
        "calls a model over the network"
    ),
    "naiveBayesClassifier naiveBayesClassifierWithAllProbs naiveBayesClassifierWithProb catboostEvaluate "
    "hierarchicalKMeans assignCentroid": "loads model files from the server",
    "generateSerialID": "writes to Keeper",
    # dictionaries and tables reached by name, outside the statement's FROM clauses
    "dictGet dictGetAll dictGetChildren dictGetDate dictGetDateOrDefault dictGetDateTime dictGetDateTimeOrDefault "
    "dictGetDescendants dictGetFloat32 dictGetFloat32OrDefault dictGetFloat64 dictGetFloat64OrDefault "
    "dictGetHierarchy dictGetIPv4 dictGetIPv4OrDefault dictGetIPv6 dictGetIPv6OrDefault dictGetInt16 "
    "dictGetInt16OrDefault dictGetInt32 dictGetInt32OrDefault dictGetInt64 dictGetInt64OrDefault dictGetInt8 "
    "dictGetInt8OrDefault dictGetKeys dictGetOrDefault dictGetOrNull dictGetRoot dictGetString "
    "dictGetStringOrDefault dictGetUInt16 dictGetUInt16OrDefault dictGetUInt32 dictGetUInt32OrDefault "
    "dictGetUInt64 dictGetUInt64OrDefault dictGetUInt8 dictGetUInt8OrDefault dictGetUUID dictGetUUIDOrDefault "
    "dictHas dictIsIn": "reads a dictionary, whose source may be a file, a URL or another database",
    "regionHierarchy regionIn regionToArea regionToCity regionToContinent regionToCountry regionToDistrict "
    "regionToName regionToPopulation regionToTopContinent": "reads the server's embedded dictionary files",
    "joinGet joinGetOrNull hasColumnInTable getMaxTableNameLengthForDatabase inIgnoreSet notInIgnoreSet "
    "globalInIgnoreSet globalNotInIgnoreSet nullInIgnoreSet notNullInIgnoreSet globalNullInIgnoreSet "
    "globalNotNullInIgnoreSet": "reaches a table by name, outside scope",
    "structureToCapnProtoSchema structureToProtobufSchema": "parses a column structure, which may hold expressions",
    # the host, the server and other sessions
    "hostName hostname fullHostName FQDN fqdn getOSKernelVersion getServerPort tcpPort displayName shardNum "
    "shardCount getMacro serverUUID buildId revision version uptime zookeeperSessionUptime showCertificate chdb "
    "serverTimeZone serverTimezone": ("describes the host or server"),
    "getSetting getSettingOrDefault getServerSetting getMergeTreeSetting globalVariable": "reads server settings",
    "currentUser current_user user session_user authenticatedUser authUser currentProfiles currentRoles "
    "enabledRoles defaultRoles enabledProfiles defaultProfiles pgGetUserById pg_get_userbyid pgTableIsVisible "
    "pg_table_is_visible": "describes users and roles",
    "connectionId connection_id currentQueryID current_query_id queryID query_id initialQueryID initial_query_id "
    "initialQueryStartTime initial_query_start_time currentRequestURL getClientHTTPHeader currentHandler "
    "transactionID transactionLatestSnapshot transactionOldestSnapshot": "describes this or other sessions",
    "addressToLine addressToLineWithInlines addressToSymbol demangle tid logTrace isMergeTreePartCoveredBy "
    "mergeTreePartInfo hasThreadFuzzer fuzzQuery": "server internals",
    "sleep sleepEachRow": "holds a connection without doing work",
    "timeSeriesStoreTags timeSeriesIdToTags timeSeriesIdToTagsGroup timeSeriesIdToGroup timeSeriesTagsGroupToTags "
    "timeSeriesTagsToGroup timeSeriesGroupToTags timeSeriesGroupToSamplingKey timeSeriesExtractTag "
    "timeSeriesCopyTag timeSeriesCopyTags timeSeriesJoinTags timeSeriesRemoveTag timeSeriesRemoveTags "
    "timeSeriesRemoveAllTagsExcept timeSeriesReplaceTag timeSeriesThrowDuplicateSeriesIf "
    "timeSeriesMetricTypeToSuffixes": "reads or writes the server's shared time-series tag store",
}
DENIED: dict[str, str] = {name: reason for names, reason in _DENY_GROUPS.items() for name in names.split()}
_DENIED_PREFIXES = ("__",)  # internal functions the analyzer inserts itself

# Table functions that only generate numbers. values() with literal rows is allowed by
# agent/db/table_functions.py, which also says why each other one is refused.
TABLE_FUNCTIONS = ("numbers", "numbers_mt", "generate_series", "generateSeries", "primes")

# Names the parser produces for syntax (lambdas, CASE) that are not in system.functions.
SYNTAX_FUNCTIONS = ("lambda", "exists", "grouping")


def denied_reason(name: str) -> str | None:
    """Why `name` is denied (matched in any case), or None when it is not."""
    if name.startswith(_DENIED_PREFIXES):
        return "it reaches the server's internals"
    return _DENIED_LOWER.get(name.lower())


def is_denied(name: str) -> bool:
    return denied_reason(name) is not None


_DENIED_LOWER = {name.lower(): reason for name, reason in DENIED.items()}


@dataclass(frozen=True)
class FunctionPolicy:
    functions: frozenset[str]  # exact names
    case_insensitive: frozenset[str]  # lower-cased names the engine resolves in any case
    aggregates: frozenset[str]  # exact names that take combinators
    combinators: tuple[str, ...]  # longest first
    table_functions: frozenset[str]
    engine_version: str = ""

    def allows(self, name: str) -> bool:
        if is_denied(name):
            return False
        if name in self.functions or name.lower() in self.case_insensitive:
            return True
        return self._is_combined_aggregate(name)

    def allows_table_function(self, name: str) -> bool:
        return name.lower() in {f.lower() for f in self.table_functions}

    def _is_combined_aggregate(self, name: str) -> bool:
        """`uniqExactIf`, `sumArrayOrNull`, `avgStateMerge`...: an allowed aggregate plus combinators.
        No real name is longer than MAX_NAME_CHARS; a longer one is not peeled suffix by suffix."""
        if len(name) > MAX_NAME_CHARS:
            return False
        base = name
        while True:
            for suffix in self.combinators:
                if base.endswith(suffix) and len(base) > len(suffix):
                    base = base[: -len(suffix)]
                    break
            else:
                return False
            if (base in self.aggregates or base.lower() in self.case_insensitive) and not is_denied(base):
                return True


@cache
def load_policy(path: Path = ALLOWLIST_PATH) -> FunctionPolicy:
    functions: set[str] = set(SYNTAX_FUNCTIONS)
    insensitive: set[str] = set()
    aggregates: set[str] = set()
    combinators: list[str] = []
    table_functions: set[str] = set()
    version = ""
    for line in path.read_text().splitlines():
        if line.startswith("# engine "):
            version = line.split()[-1]
        if not line or line.startswith("#"):
            continue
        kind, name, *flags = line.split()
        if kind == "combinator":
            combinators.append(name)
        elif kind == "table":
            table_functions.add(name)
        else:
            functions.add(name)
            if kind == "aggregate":
                aggregates.add(name)
            if "ci" in flags:
                insensitive.add(name.lower())
    return FunctionPolicy(
        frozenset(functions),
        frozenset(insensitive),
        frozenset(aggregates),
        tuple(sorted(combinators, key=len, reverse=True)),
        frozenset(table_functions),
        version,
    )


# --- keeping the list: `python -m agent.db.functions generate|review` (runs the engine in this process) ---


def _engine_rows(sql: str) -> list[list[str]]:
    import chdb  # a maintainer's tool; the app itself never loads chdb outside the engine process

    text = chdb.query(sql, "TSVRaw").bytes().decode()
    return [line.split("\t") for line in text.splitlines() if line]


def _engine_functions() -> list[tuple[str, str, bool, str]]:
    """(kind, name, case_insensitive, alias_to) of every built-in function, sorted."""
    rows = _engine_rows(
        "SELECT name, is_aggregate, case_insensitive, alias_to FROM system.functions WHERE origin = 'System' "
        "ORDER BY name"
    )
    return [("aggregate" if agg == "1" else "function", name, ci == "1", alias) for name, agg, ci, alias in rows]


def generate(path: Path = ALLOWLIST_PATH) -> int:
    (version,) = _engine_rows("SELECT version()")[0]
    lines = [
        "# Functions the model's SQL may call (see agent/db/functions.py). Reviewed; regenerate with",
        "# `python -m agent.db.functions generate` only after reading `review`'s output.",
        f"# engine {version}",
    ]
    for kind, name, insensitive, alias in _engine_functions():
        if is_denied(name) or (alias and is_denied(alias)):
            continue
        lines.append(f"{kind} {name}{' ci' if insensitive else ''}")
    lines += [
        f"combinator {name}" for (name,) in _engine_rows("SELECT name FROM system.aggregate_function_combinators")
    ]
    lines += [f"table {name}" for name in TABLE_FUNCTIONS]
    path.write_text("\n".join(lines) + "\n")
    print(f"wrote {path} ({len(lines) - 3} entries, engine {version})")
    return 0


def review(path: Path = ALLOWLIST_PATH) -> int:
    """Functions this engine has that the list neither allows nor denies: each needs a decision."""
    policy = load_policy(path)
    new = [name for _, name, _, _ in _engine_functions() if name not in policy.functions and not is_denied(name)]
    print("\n".join(new) if new else "Every engine function is either allowed or denied.")
    return 1 if new else 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Keep the function allowlist of the model's SQL.")
    parser.add_argument("command", choices=["generate", "review"])
    args = parser.parse_args(argv)
    return generate() if args.command == "generate" else review()


if __name__ == "__main__":
    sys.exit(main())

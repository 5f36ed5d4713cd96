"""No SQL of the collection names a column, table alias or CTE with a word a supported
PostgreSQL reserves. PostgreSQL 16 made SYSTEM_USER a reserved word: `AS l(..., system_user,
...)` ran on 13 and 15 and is a syntax error on 16 and 17 (found by the Molecule cluster
scenario on Debian 13's PostgreSQL 17, where the boot-time cleanup failed)."""

from __future__ import annotations

import re
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[4]
MODULE_UTILS = REPO_ROOT / "plugins" / "module_utils"
# PostgreSQL 17's reserved words: SELECT word FROM pg_get_keywords() WHERE catcode = 'R'
# (run on Debian 13's postgresql-17, 17.12). A superset of those of 13 and 15.
RESERVED = set(
    """all analyse analyze and any array as asc asymmetric both case cast check collate column
    constraint create current_catalog current_date current_role current_time current_timestamp
    current_user default deferrable desc distinct do else end except false fetch for foreign
    from grant group having in initially intersect into lateral leading limit localtime
    localtimestamp not null offset on only or order placing primary references returning select
    session_user some symmetric system_user table then to trailing true union unique user using
    variadic when where window with""".split()
)
# `AS name(col, col, ...)`: a table alias with its column aliases; `AS name` a column or
# table alias; `name AS (` a common table expression.
ALIAS_LIST = re.compile(r"\bAS\s+([A-Za-z_]\w*)\s*\(([\w\s,]*)\)")
ALIAS = re.compile(r"\bAS\s+([a-z_]\w*)\b")
CTE = re.compile(r"\b([a-z_]\w*)\s+AS\s+\(")


def names_given(sql: str) -> set[str]:
    names = set()
    for alias, columns in ALIAS_LIST.findall(sql):
        names.add(alias)
        names.update(column.strip() for column in columns.split(",") if column.strip())
    names.update(ALIAS.findall(sql))
    names.update(CTE.findall(sql))
    return {name.lower() for name in names}


def test_names_given_finds_every_kind_of_alias():
    sql = "WITH moved AS (SELECT a AS b FROM unnest(x) AS l(uuid, system_user)) SELECT 1"
    assert names_given(sql) == {"moved", "b", "l", "uuid", "system_user"}
    assert names_given(sql) & RESERVED == {"system_user"}


def test_no_sql_names_anything_with_a_reserved_word():
    offenders = {
        "%s: %s" % (path.relative_to(REPO_ROOT), sorted(names_given(path.read_text()) & RESERVED))
        for path in sorted(MODULE_UTILS.rglob("*.py"))
        if names_given(path.read_text()) & RESERVED
    }
    assert offenders == set()

# -*- coding: utf-8 -*-
# SPDX-License-Identifier: GPL-3.0-or-later
"""The cleanup's statements as Python holds them: every `%` a named placeholder or a
literal `%%` (the drivers read any other as a placeholder), the batch's columns in
BatchJob's order (the engine builds a BatchJob from each row by position), and the user a
requeued job runs as. What the statements do runs on PostgreSQL, in
tests/integration (test_arvados_fail_jobs.py, test_fail_jobs_audit_rows.py and the
others); no reserved word: ../test_sql_reserved_words.py."""

from __future__ import annotations

import re

import pytest

from ansible_collections.arvados_ops.recovery.plugins.module_utils._cleanup import sql
from ansible_collections.arvados_ops.recovery.plugins.module_utils._cleanup.sql import (
    BATCH_COLUMNS,
    SQL_BATCH_JOBS,
    SQL_FIRST_PAGE,
    SQL_LOCK_JOBS,
    SQL_SYSTEM_USER_SUFFIX,
    SQL_USER_UUID,
    BatchJob,
    batch_columns,
    run_as,
)

STATEMENTS = sorted(name for name in vars(sql) if name.startswith("SQL_") and isinstance(getattr(sql, name), str))
# A named placeholder, text (s) or binary (b, psycopg 3's; _database.driver makes psycopg2 take it).
PLACEHOLDER = re.compile(r"%\(\w+\)[sb]|%%")


@pytest.mark.parametrize("name", STATEMENTS)
def test_every_percent_sign_is_a_named_placeholder_or_doubled(name):
    assert "%" not in PLACEHOLDER.sub("", getattr(sql, name)), name


def test_only_the_templates_have_format_fields_left():
    """A statement run as it is has no `{field}` of str.format left in it; the templates
    are filled where they are used. (`{5}` and `{15}` are regular expressions' counts.)"""
    unfilled = {name for name in STATEMENTS if re.search(r"\{[a-z_]+\}", getattr(sql, name))}
    assert unfilled == {"SQL_FIRST_PAGE", "SQL_LOCKED_ROWS", "SQL_RUNNING", "SQL_RUN_AS", "SQL_TOKEN_OWNERS"}


def test_the_templates_are_filled_where_they_are_used():
    assert SQL_FIRST_PAGE.format(running="SELECT 1") == "SELECT 1    LIMIT %(page_limit)s\n"


def test_a_batch_reads_batchjobs_columns_in_their_order():
    assert BATCH_COLUMNS == ("uuid", "owner_uuid", "created_at", "started_at", "is_locked_by_uuid")
    assert batch_columns("j") == "j.uuid, j.owner_uuid, j.created_at, j.started_at, j.is_locked_by_uuid"
    for statement in (SQL_BATCH_JOBS, SQL_LOCK_JOBS):
        assert statement.startswith("SELECT %s, %s" % (batch_columns("j"), run_as("j")))
    # The run_as column comes sixth, as BatchJob's sixth field.
    assert BatchJob._fields[5] == "run_as"


@pytest.mark.parametrize(
    "uuid, user",
    [
        ("zzzzz-tpzed-0123456789abcde", True),
        ("zzzzz-tpzed-000000000000000", True),
        ("zzzzz-tpzed-0123456789ABCDE", False),
        ("zzzzz-8i9sb-0123456789abcde", False),
        ("zzzzz-tpzed-0123456789abcd", False),
        ("zzzzz-tpzed-0123456789abcdef", False),
        ("", False),
    ],
)
def test_the_user_uuid_pattern(uuid, user):
    # PostgreSQL's ~ and Python's re agree on this pattern (ASCII classes, anchors).
    assert bool(re.search(SQL_USER_UUID, uuid)) is user


def test_the_system_user_is_told_by_its_suffix():
    assert SQL_SYSTEM_USER_SUFFIX == "-tpzed-000000000000000"
    statement = run_as("o")
    assert "right(o.is_locked_by_uuid, %d) <> '%s'" % (len(SQL_SYSTEM_USER_SUFFIX), SQL_SYSTEM_USER_SUFFIX) in statement
    # The dispatcher's user first, then whoever last changed the row; else NULL (no ELSE).
    assert statement.index("o.is_locked_by_uuid ~") < statement.index("o.modified_by_user_uuid ~")
    assert "ELSE" not in statement and statement.endswith("END")

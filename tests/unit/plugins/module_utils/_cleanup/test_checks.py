# -*- coding: utf-8 -*-
# SPDX-License-Identifier: GPL-3.0-or-later
"""What the cleanup checks before any change, with a scripted connection: the schema it
needs, a primary, the collection's advisory lock (waited for with backoff, then refused
naming its key), and who holds a table's lock when a wait ends. The privileges are in
test_engine_locks.py, with the engine that asks for them."""

from __future__ import annotations

import pytest

from ansible_collections.arvados_ops.recovery.plugins.module_utils._cleanup import checks as cleanup_checks
from ansible_collections.arvados_ops.recovery.plugins.module_utils._cleanup import sql as cleanup_sql
from ansible_collections.arvados_ops.recovery.plugins.module_utils._cleanup.checks import (
    ADVISORY_LOCK_KEY,
    BLOCKS_READS,
    BLOCKS_WRITES,
    REQUIRED_COLUMNS,
    SQL_LOCK_HOLDERS,
    check_schema,
    columns_by_table,
    lock_holders,
    lock_timeout_message,
    release_advisory_lock,
    take_advisory_lock,
)
from ansible_collections.arvados_ops.recovery.plugins.module_utils._common.errors import RecoveryError
from tests.unit.plugins.module_utils.pg_fakes import Rows
from tests.unit.plugins.module_utils.slurm_fakes import FakeClock


class ScriptedConnection:
    """Answers each execute with the next of `answers` (lists of rows) and records what
    was asked, committed and rolled back."""

    def __init__(self, answers=()):
        self.answers = list(answers)
        self.events = []
        self.autocommit = False
        self.closed = False

    def execute(self, sql, params=None):
        self.events.append(("execute", sql, params, self.autocommit))
        return Rows(self.answers.pop(0) if self.answers else [])

    def commit(self):
        self.events.append(("commit",))

    def rollback(self):
        self.events.append(("rollback",))


def test_columns_by_table():
    assert columns_by_table([("jobs", "uuid"), ("users", "id"), ("jobs", "state")]) == {
        "jobs": {"uuid", "state"},
        "users": {"id"},
    }
    assert columns_by_table([]) == {}


def test_a_complete_schema_passes():
    check_schema({table: set(columns) | {"extra"} for table, columns in REQUIRED_COLUMNS.items()})


def test_what_the_schema_lacks_is_named():
    present = {table: set(columns) for table, columns in REQUIRED_COLUMNS.items()}
    del present["job_tasks"]
    present["logs"] -= {"summary", "properties"}
    with pytest.raises(RecoveryError) as refused:
        check_schema(present)
    assert str(refused.value) == (
        "this database does not have the Arvados schema the cleanup needs: "
        "table job_tasks is missing; table logs lacks column(s) summary, properties"
    )


def test_the_lock_is_let_go_outside_a_transaction():
    conn = ScriptedConnection()
    release_advisory_lock(conn)
    assert conn.events == [("rollback",), ("execute", "SELECT pg_advisory_unlock(%s)", (ADVISORY_LOCK_KEY,), True)]
    assert conn.autocommit is False


def test_a_lost_connection_is_left_in_autocommit():
    conn = ScriptedConnection()

    def lost(sql, params=None):
        conn.closed = True
        raise OSError("server closed the connection")

    conn.execute = lost
    with pytest.raises(OSError):
        release_advisory_lock(conn)
    assert conn.autocommit is True


def test_lock_holders_are_named_with_who_they_are():
    conn = ScriptedConnection(
        [
            [
                ("jobs", "AccessExclusiveLock", True, 12, "arvados", "psql"),
                ("jobs", "ShareLock", False, 13, None, ""),
                ("logs", "SomeFutureLock", True, 14, "admin", None),
            ]
        ]
    )
    assert lock_holders(conn, ("jobs", "logs")) == [
        "pid 12 (user arvados, application psql) holds ACCESS EXCLUSIVE on jobs",
        "pid 13 (user unknown) waits for SHARE on jobs",
        "pid 14 (user admin) holds SomeFutureLock on logs",
    ]
    sql, params = conn.events[0][1:3]
    assert sql == SQL_LOCK_HOLDERS
    assert params == {"tables": ["jobs", "logs"], "modes": list(BLOCKS_WRITES)}


def test_a_read_waits_only_behind_access_exclusive():
    conn = ScriptedConnection([[]])
    assert lock_holders(conn, ["jobs"], BLOCKS_READS) == []
    assert conn.events[0][2]["modes"] == ["AccessExclusiveLock"]


def test_the_lock_timeout_message():
    holders = ["pid 12 (user arvados) holds ACCESS EXCLUSIVE on jobs"]
    assert lock_timeout_message("row_lock_wait", 10.0, ["jobs", "logs"], holders, "nothing was changed") == (
        "a lock on table jobs, logs was not had within row_lock_wait (10 s): "
        "pid 12 (user arvados) holds ACCESS EXCLUSIVE on jobs; nothing was changed. "
        "Try again when that session has finished, or raise row_lock_wait"
    )
    assert "no session holds it any more (it was let go as the wait ended)" in lock_timeout_message(
        "lock_wait", 0.5, ["jobs"], [], "x"
    )


class LockConnection:
    """Answers pg_try_advisory_lock with the scripted answers, then True for ever."""

    def __init__(self, answers):
        self.answers = list(answers)
        self.calls = []

    def execute(self, query, params=None):
        self.calls.append(("execute", query, params))
        answer = self.answers.pop(0) if self.answers else True
        return Rows([(answer,)])

    def commit(self):
        self.calls.append(("commit",))

    def rollback(self):
        self.calls.append(("rollback",))


def test_lock_taken_at_once_is_committed_without_sleeping():
    conn, clock = LockConnection([True]), FakeClock()
    take_advisory_lock(conn, 5, sleep=clock.sleep, clock=clock)
    assert conn.calls == [("execute", "SELECT pg_try_advisory_lock(%s)", (ADVISORY_LOCK_KEY,)), ("commit",)]
    assert clock.sleeps == []


def test_lock_is_retried_with_growing_pauses_until_it_is_free():
    conn, clock = LockConnection([False] * 5 + [True]), FakeClock()
    take_advisory_lock(conn, 30, sleep=clock.sleep, clock=clock)
    assert clock.sleeps == pytest.approx([0.1, 0.2, 0.4, 0.8, 1.6])
    assert [c[0] for c in conn.calls].count("rollback") == 5
    assert conn.calls[-1] == ("commit",)


def test_lock_wait_is_bounded_and_the_message_names_the_lock():
    conn, clock = LockConnection([False] * 1000), FakeClock()
    with pytest.raises(RecoveryError) as raised:
        take_advisory_lock(conn, 3, sleep=clock.sleep, clock=clock)
    assert sum(clock.sleeps) == pytest.approx(3.0)
    assert max(clock.sleeps) <= 2.0
    assert str(raised.value) == (
        "another arvados_fail_jobs run holds the cleanup lock (PostgreSQL advisory lock %d); "
        "waited 3 s. Try again when it has finished." % ADVISORY_LOCK_KEY
    )
    assert ("commit",) not in conn.calls


def test_lock_wait_zero_tries_once():
    conn, clock = LockConnection([False]), FakeClock()
    with pytest.raises(RecoveryError, match="waited 0 s"):
        take_advisory_lock(conn, 0, sleep=clock.sleep, clock=clock)
    assert clock.sleeps == []
    assert len([c for c in conn.calls if c[0] == "execute"]) == 1


def test_the_lock_key_is_a_fixed_positive_bigint():
    assert ADVISORY_LOCK_KEY == int.from_bytes(b"arvfailj", "big")
    assert 0 < ADVISORY_LOCK_KEY < 2**63


def test_a_standby_is_refused_before_anything_is_done():
    with pytest.raises(RecoveryError, match=r"standby \(pg_is_in_recovery\(\) is true\).*connect to the primary"):
        cleanup_checks.check_primary(True)
    cleanup_checks.check_primary(False)
    # Read with the other checks, before the cleanup lock and any change.
    assert "pg_is_in_recovery()" in cleanup_sql.SQL_SERVER_FACTS

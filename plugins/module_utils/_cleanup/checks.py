# -*- coding: utf-8 -*-
# Copyright: Contributors to the arvados_ops.recovery collection
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""What a run checks before it changes anything (schema, privileges, a primary server),
and the advisory lock that keeps two runs apart."""

from __future__ import annotations

import time
from datetime import datetime
from typing import Callable, Dict, Iterable, List, NamedTuple, Optional, Sequence, Set, Tuple

from .._common.errors import RecoveryError
from .._database.driver import Connection, connection_lost
from .options import CleanupOptions
from .sql import READ_TABLES, SQL_SERVER_FACTS, TASK_TABLE, TOKEN_TABLE

# Any fixed 64-bit number works, as long as every run of this collection uses the same one
# and no other program picks it: 'arvados-fail-jobs' read as ASCII, folded to 63 bits.
ADVISORY_LOCK_KEY = int.from_bytes(b"arvfailj", "big") & 0x7FFFFFFFFFFFFFFF

# What the cleanup reads or writes. The 2017 schema and today's both have all of it.
REQUIRED_COLUMNS: Dict[str, Tuple[str, ...]] = {
    "jobs": (
        "uuid",
        "owner_uuid",
        "state",
        "running",
        "success",
        "created_at",
        "started_at",
        "finished_at",
        "cancelled_at",
        "modified_at",
        "updated_at",
        "modified_by_user_uuid",
        "modified_by_client_uuid",
        "is_locked_by_uuid",
        "log",
        "output",
        "tasks_summary",
    ),
    "job_tasks": ("job_uuid",),
    "logs": (
        "id",
        "uuid",
        "owner_uuid",
        "modified_by_client_uuid",
        "modified_by_user_uuid",
        "object_uuid",
        "object_owner_uuid",
        "event_at",
        "event_type",
        "summary",
        "properties",
        "created_at",
        "updated_at",
        "modified_at",
    ),
    "api_client_authorizations": (
        "uuid",
        "api_client_id",
        "user_id",
        "expires_at",
        "created_at",
        "updated_at",
    ),
    "users": ("id", "uuid"),
    "containers": ("auth_uuid",),
    "pipeline_instances": ("uuid", "state", "modified_by_user_uuid", "created_at"),
}


def columns_by_table(pairs: Iterable[Tuple[str, str]]) -> Dict[str, Set[str]]:
    present: Dict[str, Set[str]] = {}
    for table, column in pairs:
        present.setdefault(table, set()).add(column)
    return present


class Privilege(NamedTuple):
    """A table privilege a real run needs, and what for."""

    table: str
    privilege: str
    purpose: str


def needed_privileges(options: CleanupOptions) -> List[Privilege]:
    """The table privileges a real run of `options` uses. Table privileges, not column
    ones: a batch locks its tables first (LOCK TABLE), which PostgreSQL allows by the
    table's own privileges only."""
    needs = [
        Privilege("jobs", "SELECT", "to read the jobs"),
        Privilege("jobs", "UPDATE", "to lock and change the jobs"),
        Privilege("logs", "SELECT", "to read the ids of its log rows"),
        Privilege("logs", "INSERT", "to write the log rows"),
    ]
    if options.revoke_tokens:
        needs += [
            Privilege(TOKEN_TABLE, "SELECT", "to find the jobs' tokens"),
            Privilege(TOKEN_TABLE, "UPDATE", "to lock and expire the jobs' tokens"),
        ]
        needs += [Privilege(table, "SELECT", "to tell whose tokens they are") for table in READ_TABLES]
    if options.retry:
        needs += [
            Privilege(TASK_TABLE, "SELECT", "to find the requeued jobs' tasks"),
            Privilege(TASK_TABLE, "UPDATE", "to lock the tasks it deletes without waiting"),
            Privilege(TASK_TABLE, "DELETE", "to delete the requeued jobs' tasks"),
        ]
    return needs


class ServerFacts(NamedTuple):
    """What SQL_SERVER_FACTS read, for the checks before any change."""

    # {table: its columns}, of the tables of REQUIRED_COLUMNS the current schema has.
    columns: Dict[str, Set[str]]
    in_recovery: bool
    # The database's now() in UTC: the clock Arvados writes started_at by.
    now: datetime
    # Whether each of needed_privileges(options) is granted, in its order.
    granted: List[Optional[bool]]
    # The logs' id sequence (None without one) and whether it may be used.
    log_sequence: Optional[str]
    log_sequence_usable: Optional[bool]
    user: str


def read_server_facts(conn: Connection, options: CleanupOptions) -> ServerFacts:
    """ServerFacts in one round trip."""
    needs = needed_privileges(options)
    params = {
        "tables": list(REQUIRED_COLUMNS),
        "need_tables": [n.table for n in needs],
        "need_privileges": [n.privilege for n in needs],
    }
    tables, columns, in_recovery, now, granted, sequence, usable, user = conn.execute(
        SQL_SERVER_FACTS, params
    ).fetchone()
    present = columns_by_table(zip(tables, columns))
    return ServerFacts(present, in_recovery, now, list(granted), sequence, usable, user)


def check_schema(present: Dict[str, Set[str]]) -> None:
    """Fail with the names of whatever table or column the cleanup needs and lacks, given
    the columns the database has (`present`, ServerFacts.columns)."""
    problems = []
    for table, columns in REQUIRED_COLUMNS.items():
        if table not in present:
            problems.append("table %s is missing" % table)
            continue
        missing = [c for c in columns if c not in present[table]]
        if missing:
            problems.append("table %s lacks column(s) %s" % (table, ", ".join(missing)))
    if problems:
        raise RecoveryError(
            "this database does not have the Arvados schema the cleanup needs: %s" % "; ".join(problems)
        )


def missing_privileges(facts: ServerFacts, options: CleanupOptions) -> List[str]:
    """The privileges of needed_privileges (and the logs' id sequence) the database user
    lacks, as phrases naming privilege, table and purpose."""
    granted = dict(enumerate(facts.granted))
    missing = [
        "%s on table %s (%s)" % (need.privilege, need.table, need.purpose)
        for position, need in enumerate(needed_privileges(options))
        if not granted.get(position)
    ]
    if facts.log_sequence is not None and not facts.log_sequence_usable:
        missing.append("USAGE on sequence %s (to number the log rows)" % facts.log_sequence)
    return missing


def check_privileges(facts: ServerFacts, options: CleanupOptions) -> None:
    """Fail, before Slurm is asked and before any row is written, when the database user
    may not do what a real run does; check mode fails the same way, as it predicts."""
    missing = missing_privileges(facts, options)
    if missing:
        user = facts.user
        raise RecoveryError(
            "the database user %s lacks privileges a run needs, so nothing was changed "
            "(no Slurm job cancelled, no row written): %s; grant them (GRANT ... ON ... TO %s) "
            "or connect as the Arvados database user" % (user, "; ".join(missing), user)
        )


def check_primary(in_recovery: bool) -> None:
    """Refuse a standby, before anything changes (Slurm included): it refuses writes, and
    its rows may lag behind the primary's, so even check mode would predict from the past."""
    if in_recovery:
        raise RecoveryError(
            "the database server is a standby (pg_is_in_recovery() is true): the cleanup "
            "writes, and a standby's rows may lag behind the primary's; connect to the primary"
        )


def take_advisory_lock(
    conn: Connection,
    wait: float,
    sleep: Callable[[float], None] = time.sleep,
    clock: Callable[[], float] = time.monotonic,
) -> None:
    """Hold the collection's advisory lock for this session, waiting at most `wait` s."""
    deadline = clock() + wait
    delay = 0.1
    while True:
        if conn.execute("SELECT pg_try_advisory_lock(%s)", (ADVISORY_LOCK_KEY,)).fetchone()[0]:
            conn.commit()
            return
        conn.rollback()
        if clock() >= deadline:
            raise RecoveryError(
                "another arvados_fail_jobs run holds the cleanup lock (PostgreSQL advisory "
                "lock %d); waited %.0f s. Try again when it has finished." % (ADVISORY_LOCK_KEY, wait)
            )
        sleep(min(delay, max(0.0, deadline - clock())))
        delay = min(delay * 2, 2.0)


def release_advisory_lock(conn: Connection) -> None:
    """Let go of the lock take_advisory_lock took, ending the transaction under way."""
    conn.rollback()
    # Outside a transaction: one round trip, not BEGIN, the unlock and COMMIT.
    conn.autocommit = True
    try:
        conn.execute("SELECT pg_advisory_unlock(%s)", (ADVISORY_LOCK_KEY,))
    finally:
        if not connection_lost(conn):
            conn.autocommit = False


# The sessions that hold, or queue ahead for, a lock on one of the tables in a mode that
# conflicts with what the run waited for. Asked after the wait ended (lock_timeout), so
# pg_blocking_pids() of our own session is empty by then: pg_locks says who is still there.
# pg_locks and pg_stat_activity's pid, usename and application_name are readable by every
# user; the query text is not shown (it may hold anything).
SQL_LOCK_HOLDERS = """
    SELECT c.relname, l.mode, l.granted, l.pid, a.usename, a.application_name
    FROM pg_locks l
    JOIN pg_class c ON c.oid = l.relation
    LEFT JOIN pg_stat_activity a ON a.pid = l.pid
    WHERE l.locktype = 'relation' AND l.pid <> pg_backend_pid()
      AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())
      AND l.relation IN (SELECT to_regclass(t) FROM unnest(%(tables)s::text[]) AS t)
      AND l.mode = ANY(%(modes)s::text[])
    ORDER BY c.relname, l.granted DESC, l.pid
"""
# What conflicts with the ACCESS SHARE lock a read takes (the listing, check mode's batches).
BLOCKS_READS = ("AccessExclusiveLock",)
# What conflicts with the ROW EXCLUSIVE lock a writing batch takes.
BLOCKS_WRITES = ("ShareLock", "ShareRowExclusiveLock", "ExclusiveLock", "AccessExclusiveLock")
_MODE_NAMES = {
    "AccessShareLock": "ACCESS SHARE",
    "RowShareLock": "ROW SHARE",
    "RowExclusiveLock": "ROW EXCLUSIVE",
    "ShareUpdateExclusiveLock": "SHARE UPDATE EXCLUSIVE",
    "ShareLock": "SHARE",
    "ShareRowExclusiveLock": "SHARE ROW EXCLUSIVE",
    "ExclusiveLock": "EXCLUSIVE",
    "AccessExclusiveLock": "ACCESS EXCLUSIVE",
}


def lock_holders(conn: Connection, tables: Sequence[str], modes: Sequence[str] = BLOCKS_WRITES) -> List[str]:
    """Phrases naming each other session that holds (or waits ahead for) a lock of `modes`
    on one of `tables`: "pid 12 (user arvados, application psql) holds ACCESS EXCLUSIVE on jobs"."""
    rows = conn.execute(SQL_LOCK_HOLDERS, {"tables": list(tables), "modes": list(modes)}).fetchall()
    phrases = []
    for table, mode, granted, pid, user, application in rows:
        who = "user %s" % (user or "unknown")
        if application:
            who += ", application %s" % application
        phrases.append(
            "pid %s (%s) %s %s on %s"
            % (pid, who, "holds" if granted else "waits for", _MODE_NAMES.get(mode, mode), table)
        )
    return phrases


def lock_timeout_message(option: str, seconds: float, tables: Sequence[str], holders: List[str], context: str) -> str:
    """The message of a wait for a table's lock that `option` (`seconds`) ended."""
    who = "; ".join(holders) if holders else "no session holds it any more (it was let go as the wait ended)"
    return (
        "a lock on table %s was not had within %s (%g s): %s; %s. Try again when that session "
        "has finished, or raise %s" % (", ".join(tables), option, seconds, who, context, option)
    )

# -*- coding: utf-8 -*-
# SPDX-License-Identifier: GPL-3.0-or-later
"""The cleanup engine (_cleanup/engine.py) with fakes (issue 26): one lock budget per run, a held token or task sets
aside its job only, the privileges checked before the Slurm step, the jobs a failed batch
leaves without a Slurm job named, and no second error from a dead connection."""

from __future__ import annotations

import sys
from datetime import datetime, timedelta

import pytest

from ansible_collections.arvados_ops.recovery.plugins.module_utils._cleanup import checks as cleanup_checks
from ansible_collections.arvados_ops.recovery.plugins.module_utils._cleanup import engine as cleanup_engine
from ansible_collections.arvados_ops.recovery.plugins.module_utils._cleanup import sql as cleanup_sql
from ansible_collections.arvados_ops.recovery.plugins.module_utils._cleanup.batch import (
    ROW_PHASE_LOCK_TIMEOUT_MS,
)
from ansible_collections.arvados_ops.recovery.plugins.module_utils._cleanup.engine import JobCleaner
from ansible_collections.arvados_ops.recovery.plugins.module_utils._cleanup.options import CleanupOptions
from ansible_collections.arvados_ops.recovery.plugins.module_utils._cleanup.result import BatchOutcome
from ansible_collections.arvados_ops.recovery.plugins.module_utils._cleanup.sql import BatchJob
from ansible_collections.arvados_ops.recovery.plugins.module_utils._cleanup.tokens import TokenCandidate, TokenPlan
from ansible_collections.arvados_ops.recovery.plugins.module_utils._common.errors import RecoveryError
from tests.unit.plugins.module_utils.pg_fakes import Rows
from tests.unit.plugins.module_utils.slurm_fakes import FakeClock

JOB = "zzzzz-8i9sb-%015d"
USER = "zzzzz-tpzed-%015d"
T0 = datetime(2026, 11, 30, 8, 0, 0)


class DbError(Exception):
    def __init__(self, message, sqlstate=None):
        super().__init__(message)
        self.sqlstate = sqlstate


class ScriptedConnection:
    """Answers each statement by the first of `answers` ((SQL constant, rows or callable))
    whose statement it is; records every statement with its parameters."""

    def __init__(self, answers=()):
        self.answers = list(answers)
        self.statements = []
        self.closed = False

    def execute(self, query, params=None):
        self.statements.append((query, params))
        for statement, answer in self.answers:
            if query == statement:
                return Rows(answer(params) if callable(answer) else answer)
        return Rows([])

    def commit(self):
        self.statements.append(("COMMIT", None))

    def rollback(self):
        self.statements.append(("ROLLBACK", None))

    def ran(self, statement):
        return [params for query, params in self.statements if query == statement]


# -- one budget of row_lock_wait per run -------------------------------------------------


class TableLockConnection(ScriptedConnection):
    """LOCK TABLE ... ROW EXCLUSIVE waits `table_wait` s of the fake clock, and fails as
    PostgreSQL does (55P03) when lock_timeout is shorter."""

    def __init__(self, clock, table_wait, modes=("ROW EXCLUSIVE",)):
        super().__init__()
        self.clock, self.table_wait, self.timeout_ms, self.modes = clock, table_wait, None, modes

    def execute(self, query, params=None):
        if query.startswith("SET LOCAL lock_timeout"):
            self.timeout_ms = int(query.split("=")[1])
        if query.startswith("LOCK TABLE") and any(mode in query for mode in self.modes):
            waited = min(self.table_wait, self.timeout_ms / 1000.0)
            self.clock.sleep(waited)
            self.table_wait -= waited
            if self.table_wait > 0:
                self.statements.append((query, params))
                raise DbError("canceling statement due to lock timeout", "55P03")
        return super().execute(query, params)


def cleaner_on(conn, clock, **options):
    cleaner = JobCleaner(conn, None, CleanupOptions(**options), clock=clock, sleep=clock.sleep)
    cleaner.transaction.write = lambda uuids: BatchOutcome(list(uuids), [])
    return cleaner


def test_a_table_lock_is_waited_for_before_any_row_within_the_runs_budget_only():
    clock = FakeClock()
    conn = TableLockConnection(clock, table_wait=2.0)
    cleaner = cleaner_on(conn, clock, row_lock_wait=3, retry=True)

    cleaner._clean_batch([JOB % 1], last=False)  # pylint: disable=protected-access

    timeouts = [q for q, _p in conn.statements if q.startswith("SET LOCAL lock_timeout")]
    assert timeouts == ["SET LOCAL lock_timeout = 3000", "SET LOCAL lock_timeout = %d" % ROW_PHASE_LOCK_TIMEOUT_MS]
    locks = [q for q, _p in conn.statements if q.startswith("LOCK TABLE")]
    assert locks == [
        "LOCK TABLE jobs, logs, api_client_authorizations, job_tasks IN ROW EXCLUSIVE MODE",
        "LOCK TABLE users, containers, pipeline_instances IN ACCESS SHARE MODE",
    ]
    assert cleaner._lock_budget.remaining() == pytest.approx(1.0)  # pylint: disable=protected-access
    assert cleaner.result.to_dict()["requeued_jobs"] == [JOB % 1]


def test_table_lock_waits_and_tries_again_share_one_budget():
    clock = FakeClock()
    # The table stays locked for 10 s; the run may wait 3 s in all.
    conn = TableLockConnection(clock, table_wait=10.0)
    cleaner = cleaner_on(conn, clock, row_lock_wait=3, revoke_tokens=False)
    cleaner._clean_batch([JOB % 1, JOB % 2], last=False)  # pylint: disable=protected-access
    cleaner._clean_batch([JOB % 3], last=False)  # pylint: disable=protected-access
    cleaner._retry_deferred()  # pylint: disable=protected-access

    result = cleaner.result.to_dict()
    assert result["locked_jobs"] == [JOB % 1, JOB % 2, JOB % 3]
    # The first batch spent the budget; the second and the try again waited 1 ms each.
    assert clock.elapsed() == pytest.approx(3.002)
    assert [q for q, _p in conn.statements if q.startswith("SET LOCAL lock_timeout = ")][:3:2] == [
        "SET LOCAL lock_timeout = 3000",
        "SET LOCAL lock_timeout = 1",
    ]


def test_check_mode_takes_no_write_lock_and_waits_for_reads_within_the_budget():
    clock = FakeClock()
    # A migration's ACCESS EXCLUSIVE: the reads of check mode wait too (issue 34).
    conn = TableLockConnection(clock, table_wait=10.0, modes=("ACCESS SHARE",))
    cleaner = cleaner_on(conn, clock, row_lock_wait=3, check_mode=True)
    cleaner._clean_batch([JOB % 1], last=False)  # pylint: disable=protected-access
    cleaner._retry_deferred()  # pylint: disable=protected-access
    locks = [q for q, _p in conn.statements if q.startswith("LOCK")]
    assert locks and all(q.endswith("IN ACCESS SHARE MODE") for q in locks)
    assert (
        locks[0]
        == "LOCK TABLE jobs, api_client_authorizations, users, containers, pipeline_instances IN ACCESS SHARE MODE"
    )
    assert cleaner.result.to_dict()["locked_jobs"] == [JOB % 1]
    assert clock.elapsed() == pytest.approx(3.001)


def test_check_mode_with_free_tables_does_not_wait():
    clock = FakeClock()
    conn = TableLockConnection(clock, table_wait=0.0, modes=("ACCESS SHARE",))
    cleaner = cleaner_on(conn, clock, row_lock_wait=3, check_mode=True, revoke_tokens=False)
    cleaner._clean_batch([JOB % 1], last=False)  # pylint: disable=protected-access
    assert [q for q, _p in conn.statements if q.startswith("LOCK")] == ["LOCK TABLE jobs IN ACCESS SHARE MODE"]
    assert cleaner.result.to_dict()["locked_jobs"] == [] and clock.elapsed() == 0


# -- a held token or task sets aside its job only ----------------------------------------


def job(number, user, created_hours, started_hours, run_as=None):
    return BatchJob(
        JOB % number,
        USER % 900,
        T0 + timedelta(hours=created_hours),
        T0 + timedelta(hours=started_hours),
        USER % user,
        run_as,
    )


def token(number, user, hours):
    return TokenCandidate(number, "zzzzz-gj3su-%015d" % number, USER % user, T0 + timedelta(hours=hours))


def test_a_held_token_sets_aside_the_jobs_whose_window_holds_it_and_is_not_revoked():
    jobs = [job(1, 1, 0, 2), job(2, 1, 3, 5), job(3, 2, 0, 2)]
    tokens = [token(11, 1, 1), token(12, 1, 4), token(13, 2, 1)]
    plan = TokenPlan(tokens, [(token(14, 1, 4.5), JOB % 99)])

    assert plan.set_aside_for([tokens[1]], jobs) == [JOB % 2]

    outcome = BatchOutcome([], [])
    outcome = plan.report([jobs[0], jobs[2]], outcome)
    assert outcome.tokens == [tokens[0].uuid, tokens[2].uuid]
    # Left alone in the set-aside job's window: reported when that job is done.
    assert outcome.tokens_left_alone == []
    assert plan.ids([tokens[2].uuid]) == [13]


def test_a_token_in_an_ended_and_a_set_aside_window_waits_for_the_set_aside_job():
    jobs = [job(1, 1, 0, 2), job(2, 1, 1, 3)]  # overlapping windows of one user
    plan = TokenPlan([token(11, 1, 1.5), token(12, 1, 0.5)])
    assert plan.set_aside_for([token(11, 1, 1.5)], jobs) == [JOB % 1, JOB % 2]
    outcome = BatchOutcome([], [])
    outcome = plan.report([], outcome)
    assert outcome.tokens == []


def batch_connection(locked_jobs, held_token_ids=(), task_counts=None, held_tasks=(), yaml_jobs=(), yaml_tokens=()):
    """A connection for one writing batch of BatchTransaction.write: the jobs it locks, their users'
    tokens (one per job, made an hour after the job's creation), those held by another
    transaction, the jobs' tasks, and the jobs and tokens whose serialized texts are YAML."""
    users = sorted(set(j.is_locked_by_uuid for j in locked_jobs))
    candidates = [
        (
            100 + int(j.uuid[-3:]),
            "zzzzz-gj3su-%015d" % int(j.uuid[-3:]),
            users.index(j.is_locked_by_uuid),
            j.created_at + timedelta(hours=1),
        )
        for j in locked_jobs
    ]

    def changed(params):
        kept = set(params["uuids"])
        changed_at = T0 + timedelta(hours=9)
        return [tuple(j)[:6] + (changed_at, '{"new_etag": "x"}') for j in locked_jobs if j.uuid in kept]

    def lock_tasks(params):
        wanted = set(params["uuids"])
        return [
            (u,) for u, count in (task_counts or {}).items() if u in wanted for _i in range(count - (u in held_tasks))
        ]

    return ScriptedConnection(
        [
            (cleanup_sql.SQL_LOCK_JOBS, [tuple(j)[:6] + (j.uuid in yaml_jobs,) for j in locked_jobs]),
            (cleanup_sql.SQL_USER_IDS, [(u, i) for i, u in enumerate(users)]),
            (cleanup_sql.SQL_TOKEN_CANDIDATES, candidates),
            (
                cleanup_sql.SQL_LOCK_TOKENS,
                lambda p: [(i, i in yaml_tokens) for i in p["ids"] if i not in held_token_ids],
            ),
            (cleanup_sql.SQL_FAIL_JOBS, changed),
            (cleanup_sql.SQL_REQUEUE_JOBS, lambda p: [r for r in changed(p) if r[5]]),
            (cleanup_sql.SQL_FAIL_UNRUNNABLE, lambda p: [r for r in changed(p) if not r[5]]),
            (
                cleanup_sql.SQL_COUNT_TASKS,
                lambda p: [(u, c) for u, c in (task_counts or {}).items() if u in p["uuids"]],
            ),
            (cleanup_sql.SQL_LOCK_TASKS, lock_tasks),
            (
                cleanup_sql.SQL_REVOKE_TOKENS,
                lambda p: [("zzzzz-gj3su-%015d" % (i - 100), USER % 1, '{"old_etag": "x"}') for i in p["ids"]],
            ),
            (cleanup_sql.SQL_INSERT_LOGS, lambda p: [(u, None) for u in p["log_uuids"]]),
            (cleanup_sql.SQL_SERIALIZED_TEXTS, []),
        ]
    )


def test_a_batch_with_a_held_token_does_its_other_jobs_and_sets_the_one_aside():
    jobs = [job(1, 1, 0, 2), job(2, 2, 0, 2), job(3, 3, 0, 2)]
    conn = batch_connection(jobs, held_token_ids={102})
    cleaner = JobCleaner(conn, None, CleanupOptions())

    outcome = cleaner.transaction.write([j.uuid for j in jobs])

    assert outcome.set_aside == [JOB % 2]
    assert outcome.done == [JOB % 1, JOB % 3] and outcome.skipped == []
    assert conn.ran(cleanup_sql.SQL_FAIL_JOBS)[0]["uuids"] == [JOB % 1, JOB % 3]
    assert [p["ids"] for p in conn.ran(cleanup_sql.SQL_REVOKE_TOKENS)] == [[101, 103]]
    # Every row lock is taken before the first write, none waited for.
    order = [q for q, _p in conn.statements]
    assert order.index(cleanup_sql.SQL_LOCK_TOKENS) < order.index(cleanup_sql.SQL_FAIL_JOBS)


@pytest.mark.parametrize("audit_logs", [True, False])
def test_a_batch_logs_its_expired_tokens_in_the_same_transaction_as_audit_logging_says(audit_logs):
    jobs = [job(1, 1, 0, 2), job(2, 2, 0, 2)]
    conn = batch_connection(jobs)
    cleaner = JobCleaner(conn, None, CleanupOptions(audit_logs=audit_logs))

    outcome = cleaner.transaction.write([j.uuid for j in jobs])

    assert outcome.tokens == ["zzzzz-gj3su-%015d" % 1, "zzzzz-gj3su-%015d" % 2]
    (logged,) = conn.ran(cleanup_sql.SQL_INSERT_LOGS)
    kinds = list(zip(logged["event_types"], logged["objects"]))
    dispatch = [("dispatch", j.uuid) for j in jobs]
    if audit_logs:
        assert kinds == dispatch + [("update", j.uuid) for j in jobs] + [("update", t) for t in outcome.tokens]
    else:
        assert kinds == dispatch
    assert len(outcome.logs) == len(kinds)
    order = [q for q, _p in conn.statements]
    assert order.index(cleanup_sql.SQL_REVOKE_TOKENS) < order.index(cleanup_sql.SQL_INSERT_LOGS)
    assert "COMMIT" not in order  # write() runs inside the batch's one transaction


def test_a_requeue_sets_aside_a_job_whose_task_is_held():
    jobs = [job(1, 1, 0, 2, run_as=USER % 1), job(2, 2, 0, 2, run_as=USER % 2)]
    conn = batch_connection(jobs, task_counts={JOB % 1: 2, JOB % 2: 3}, held_tasks={JOB % 2})
    cleaner = JobCleaner(conn, None, CleanupOptions(retry=True))

    outcome = cleaner.transaction.write([j.uuid for j in jobs])

    assert outcome.set_aside == [JOB % 2] and outcome.done == [JOB % 1]
    assert conn.ran(cleanup_sql.SQL_DELETE_TASKS) == [{"uuids": [JOB % 1]}]


def test_set_aside_jobs_are_tried_again_and_not_reported_as_skipped():
    clock = FakeClock()
    cleaner = JobCleaner(ScriptedConnection(), None, CleanupOptions(row_lock_wait=2), clock=clock, sleep=clock.sleep)
    outcomes = iter([BatchOutcome([JOB % 1], [], set_aside=[JOB % 2]), BatchOutcome([JOB % 2], [])])
    cleaner._batch_transaction = lambda uuids, last: next(outcomes)  # pylint: disable=protected-access
    cleaner._clean_batch([JOB % 1, JOB % 2], last=False)  # pylint: disable=protected-access
    cleaner._retry_deferred()  # pylint: disable=protected-access
    result = cleaner.result.to_dict()
    assert result["failed_jobs"] == [JOB % 1, JOB % 2]
    assert result["skipped_jobs"] == [] and result["locked_jobs"] == []


# -- privileges, before the Slurm step ------------------------------------------------------


def privilege_facts(options, refused, sequence=("public.logs_id_seq", True)):
    """The ServerFacts read_server_facts makes of SQL_SERVER_FACTS' row, for user `reader`
    who lacks the (table, privilege) pairs of `refused`."""

    def granted(params):
        pairs = zip(params["need_tables"], params["need_privileges"])
        return [(table, privilege) not in refused for table, privilege in pairs]

    conn = ScriptedConnection(
        [
            (
                cleanup_sql.SQL_SERVER_FACTS,
                lambda params: [([], [], False, None, granted(params)) + (sequence or (None, None)) + ("reader",)],
            )
        ]
    )
    facts = cleanup_checks.read_server_facts(conn, options)
    assert [query for query, _params in conn.statements] == [cleanup_sql.SQL_SERVER_FACTS]
    return facts


def test_the_privileges_follow_what_the_run_writes():
    plain = [(n.table, n.privilege) for n in cleanup_checks.needed_privileges(CleanupOptions(revoke_tokens=False))]
    assert plain == [("jobs", "SELECT"), ("jobs", "UPDATE"), ("logs", "SELECT"), ("logs", "INSERT")]
    retry = [(n.table, n.privilege) for n in cleanup_checks.needed_privileges(CleanupOptions(retry=True))]
    assert ("api_client_authorizations", "UPDATE") in retry
    assert ("job_tasks", "DELETE") in retry and ("job_tasks", "UPDATE") in retry


def test_missing_privileges_are_named_with_table_and_purpose():
    options = CleanupOptions(check_mode=True)
    facts = privilege_facts(options, {("jobs", "UPDATE"), ("logs", "INSERT")}, sequence=("public.logs_id_seq", False))
    with pytest.raises(RecoveryError) as caught:
        cleanup_checks.check_privileges(facts, options)
    assert str(caught.value) == (
        "the database user reader lacks privileges a run needs, so nothing was changed (no "
        "Slurm job cancelled, no row written): UPDATE on table jobs (to lock and change the "
        "jobs); INSERT on table logs (to write the log rows); USAGE on sequence "
        "public.logs_id_seq (to number the log rows); grant them (GRANT ... ON ... TO reader) "
        "or connect as the Arvados database user"
    )


def test_all_privileges_granted_pass_without_a_write():
    options = CleanupOptions(retry=True)
    cleanup_checks.check_privileges(privilege_facts(options, set(), sequence=None), options)
    # privilege_facts asserted that the one statement read is SQL_SERVER_FACTS: a query.
    assert cleanup_sql.SQL_SERVER_FACTS.split()[0] == "WITH"
    assert not {"INSERT", "UPDATE", "DELETE", "LOCK"} & set(cleanup_sql.SQL_SERVER_FACTS.split())


# -- a failed batch names the jobs it leaves without a Slurm job -----------------------------


def failing_cleaner(check_mode=False, slurm=True):
    cleaner = JobCleaner(
        ScriptedConnection(),
        None,
        CleanupOptions(check_mode=check_mode),
        cancel_slurm=(lambda uuids, check_mode: {"cancelled": []}) if slurm else None,
    )

    def fail(uuids):
        raise DbError("lab: this test refuses log rows")

    cleaner.transaction.write = fail
    return cleaner


def test_a_batch_failing_after_its_slurm_step_names_its_jobs_and_the_locked_ones():
    cleaner = failing_cleaner()
    cleaner._deferred = [JOB % 9]  # pylint: disable=protected-access
    with pytest.raises(DbError):
        cleaner._clean_batch([JOB % 2, JOB % 1], last=False)  # pylint: disable=protected-access
    assert cleaner.failure_context() == (
        "the batch under way was rolled back after its Slurm step, so 3 job(s) now have no "
        "Slurm job and are still Running: %s, %s, %s; a rerun finishes them" % (JOB % 1, JOB % 2, JOB % 9)
    )


@pytest.mark.parametrize("check_mode, slurm", [(True, True), (False, False)])
def test_without_a_slurm_step_done_the_message_stays_the_rollback(check_mode, slurm):
    cleaner = failing_cleaner(check_mode=check_mode, slurm=slurm)
    with pytest.raises(DbError):
        cleaner._clean_batch([JOB % 1], last=False)  # pylint: disable=protected-access
    assert cleaner.failure_context() == "the batch under way was rolled back (a rerun finishes the work)"


def test_after_a_committed_batch_only_its_set_aside_jobs_lack_a_slurm_job():
    cleaner = failing_cleaner()
    cleaner.transaction.write = lambda uuids: BatchOutcome([JOB % 1], [], set_aside=[JOB % 2])
    cleaner._clean_batch([JOB % 1, JOB % 2], last=False)  # pylint: disable=protected-access
    cleaner.result.batches = 1
    cleaner.step = "listing the Running jobs"
    assert cleaner.failure_context() == (
        "while listing the Running jobs, after 1 batch(es) committed whole; 1 job(s) have no "
        "Slurm job and are still Running: %s; a rerun finishes them" % (JOB % 2)
    )


# -- a dead connection: one error, PostgreSQL's -----------------------------------------------


# Facts every check passes on (with the checks themselves patched out, as in the tests below).
SERVER_FACTS = cleanup_checks.ServerFacts(
    dict(cleanup_checks.REQUIRED_COLUMNS), False, T0, [True] * 20, None, None, "arvados"
)


class ListingCursor:
    def __init__(self, conn, rows):
        self.conn, self.rows, self.closes = conn, list(rows), 0

    def execute(self, query, params=None):
        pass

    def fetchmany(self, size):
        page, self.rows = self.rows[:size], self.rows[size:]
        return page

    def close(self):
        self.closes += 1
        if self.conn.dead:
            # psycopg marks the connection closed once it finds the session gone.
            self.conn.closed = True
            raise DbError("the connection is lost")


class WorkingConnection(ScriptedConnection):
    """The working connection, whose first page's query (SQL_FIRST_PAGE) gets at most
    page_limit of `rows`."""

    def __init__(self, rows, answers=()):
        super().__init__(answers)
        self.rows = rows

    def execute(self, query, params=None):
        if params and "page_limit" in params:
            self.statements.append((query, params))
            return Rows(self.rows[: params["page_limit"]])
        return super().execute(query, params)


class ListingConnection:
    """The listing's connection: its cursor WITH HOLD reads `rows` a page at a time."""

    def __init__(self, rows):
        self.dead = self.closed = False
        self.autocommit = False
        self.cursor_made = None
        self.rows = rows
        self.statements = []

    def execute(self, query, params=None):
        self.statements.append((query, params))
        return Rows([])

    def commit(self):
        pass

    def cursor(self, name, withhold):
        self.cursor_made = ListingCursor(self, self.rows)
        return self.cursor_made


def test_closing_the_listing_on_a_dead_connection_raises_nothing_on_a_live_one_it_does():
    dead = ListingConnection([])
    dead.dead = True
    cleanup_engine.close_listing(ListingCursor(dead, []), dead)
    live = ListingConnection([])

    class Refusing(ListingCursor):
        def close(self):
            raise DbError("refused")

    with pytest.raises(DbError):
        cleanup_engine.close_listing(Refusing(live, []), live)


def test_a_run_killed_mid_batch_says_postgresqls_reason_once(monkeypatch):
    for name in ("check_schema", "check_primary", "check_privileges"):
        monkeypatch.setattr(cleanup_engine, name, lambda *args: None)
    monkeypatch.setattr(cleanup_engine, "read_server_facts", lambda *args: SERVER_FACTS)
    monkeypatch.setattr(cleanup_engine, "take_advisory_lock", lambda conn, wait: None)
    unraisable = []
    monkeypatch.setattr(sys, "unraisablehook", unraisable.append)
    # No user has a token to judge before the first of the three batches.
    jobs = [(JOB % n, T0, None) for n in range(1, 6)]
    conn = WorkingConnection(jobs, [(cleanup_sql.SQL_RUN_TOKEN_SCOPE, [([], None, T0)])])
    listing = ListingConnection(jobs)
    cleaner = JobCleaner(conn, listing, CleanupOptions(batch_size=2, live=False))

    sent_before_the_kill = []

    def killed(uuids, last, first_try=True):
        # pg_terminate_backend of both sessions, found by the working one first.
        sent_before_the_kill.append(len(conn.statements))
        listing.dead = conn.closed = True
        raise DbError("terminating connection due to administrator command")

    cleaner._clean_batch = killed  # pylint: disable=protected-access
    with pytest.raises(DbError, match="administrator command"):
        cleaner.run()
    assert listing.cursor_made.closes == 1  # closed by the run, not left to the collector
    assert unraisable == []
    # Nothing more was sent on the dead session (no rollback, no unlock).
    assert sent_before_the_kill == [len(conn.statements)]


@pytest.mark.parametrize("jobs, opened", [(2, False), (3, True)])
def test_the_listings_connection_opens_after_the_checks_and_the_lock_for_more_than_a_page(monkeypatch, jobs, opened):
    events = []
    monkeypatch.setattr(cleanup_engine, "read_server_facts", lambda *args: events.append("checks") or SERVER_FACTS)
    monkeypatch.setattr(cleanup_engine, "take_advisory_lock", lambda conn, wait: events.append("lock"))
    rows = [(JOB % n, T0, None) for n in range(1, jobs + 1)]
    listing = ListingConnection(rows)

    def open_listing():
        events.append("listing connection")
        return listing

    # No user has a token to judge before the first of several batches.
    conn = WorkingConnection(rows, [(cleanup_sql.SQL_RUN_TOKEN_SCOPE, [([], None, T0)])])
    cleaner = JobCleaner(conn, None, CleanupOptions(batch_size=2, live=False), open_listing=open_listing)
    cleaner.transaction.write = lambda uuids: BatchOutcome(list(uuids), [])
    cleaner.run()
    # The first page is read on the working connection, in a transaction rolled back
    # with its lock_timeout; a no-op rerun's short list needs no second backend.
    first_page = [n for n, (query, params) in enumerate(conn.statements) if params and "page_limit" in params]
    assert len(first_page) == 1
    assert conn.statements[first_page[0] - 1][0].startswith("SET LOCAL lock_timeout = ")
    assert conn.statements[first_page[0] + 1][0] == "ROLLBACK"
    if opened:
        assert events == ["checks", "lock", "listing connection"]
        assert cleaner.listing_conn is listing and listing.autocommit is True
        assert listing.cursor_made is not None and listing.cursor_made.closes == 1
    else:
        assert events == ["checks", "lock"] and cleaner.listing_conn is None


def test_a_failed_check_takes_no_lock_and_lets_none_go(monkeypatch):
    taken = []
    monkeypatch.setattr(cleanup_engine, "read_server_facts", lambda *args: SERVER_FACTS._replace(granted=[]))
    monkeypatch.setattr(cleanup_engine, "take_advisory_lock", lambda conn, wait: taken.append(conn))
    conn = ScriptedConnection()
    cleaner = JobCleaner(conn, ListingConnection([]), CleanupOptions(live=False))
    with pytest.raises(RecoveryError, match="lacks privileges"):
        cleaner.run()
    assert taken == [] and not [q for q, _p in conn.statements if "pg_advisory_unlock" in q]
    # Outside a transaction, the checks' statement included; none is left for the batches.
    assert conn.autocommit is False and "COMMIT" not in [q for q, _p in conn.statements]


@pytest.mark.parametrize("jobs, cursor", [(2, False), (3, True)])
def test_a_list_of_a_page_or_less_is_read_without_a_cursor(monkeypatch, jobs, cursor):
    monkeypatch.setattr(cleanup_engine, "read_server_facts", lambda *args: SERVER_FACTS)
    monkeypatch.setattr(cleanup_engine, "take_advisory_lock", lambda conn, wait: None)
    rows = [(JOB % n, T0, None) for n in range(1, jobs + 1)]
    listing = ListingConnection(rows)
    cleaner = JobCleaner(WorkingConnection(rows), listing, CleanupOptions(batch_size=2, live=False))
    assert [uuid for uuid, _started, _finished in cleaner._running_jobs()] == [  # pylint: disable=protected-access
        JOB % n for n in range(1, jobs + 1)
    ]
    assert (listing.cursor_made is not None) is cursor


def test_a_slurm_step_failing_later_names_the_jobs_set_aside_before():
    def refuse(uuids, check_mode):
        raise RecoveryError("Slurm jobs of 1 job(s) could not be made absent: squeue timed out")

    cleaner = JobCleaner(ScriptedConnection(), None, CleanupOptions(), cancel_slurm=refuse)
    cleaner._deferred = [JOB % 4]  # pylint: disable=protected-access
    with pytest.raises(RecoveryError) as caught:
        cleaner._clean_batch([JOB % 5], last=False)  # pylint: disable=protected-access
    assert str(caught.value) == (
        "Slurm jobs of 1 job(s) could not be made absent: squeue timed out; 1 job(s) set aside "
        "earlier as locked have no Slurm job and are still Running: %s; a rerun finishes them" % (JOB % 4)
    )


@pytest.mark.parametrize("yaml_jobs, yaml_tokens", [((), ()), ((JOB % 2,), ()), ((), (101,)), ((JOB % 1,), (102,))])
def test_a_batch_asks_for_yaml_texts_only_of_the_rows_its_locks_flagged(yaml_jobs, yaml_tokens):
    jobs = [job(1, 1, 0, 2), job(2, 2, 0, 2)]
    conn = batch_connection(jobs, yaml_jobs=yaml_jobs, yaml_tokens=yaml_tokens)
    cleaner = JobCleaner(conn, None, CleanupOptions(audit_logs=True))

    cleaner.transaction.write([j.uuid for j in jobs])

    asked = conn.ran(cleanup_sql.SQL_SERIALIZED_TEXTS)
    assert [p["uuids"] for p in asked if p["uuids"]] == ([list(yaml_jobs)] if yaml_jobs else [])
    assert [p["token_ids"] for p in asked if p["token_ids"]] == ([list(yaml_tokens)] if yaml_tokens else [])

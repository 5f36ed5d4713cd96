# -*- coding: utf-8 -*-
# SPDX-License-Identifier: GPL-3.0-or-later
"""fail_jobs.py, the cleanup engine, with fakes for the database and the clock: its options,
merging Slurm results, the advisory lock, token windows, the bulk settings of a batch,
locked rows and the live mode."""

from __future__ import annotations

import random
from datetime import datetime, timedelta

import pytest

from ansible_collections.arvados_ops.recovery.plugins.module_utils._cleanup import checks as fail_jobs_checks
from ansible_collections.arvados_ops.recovery.plugins.module_utils._cleanup import engine as fail_jobs
from ansible_collections.arvados_ops.recovery.plugins.module_utils._cleanup import options as fail_jobs_options
from ansible_collections.arvados_ops.recovery.plugins.module_utils._cleanup import pace as fail_jobs_pace
from ansible_collections.arvados_ops.recovery.plugins.module_utils._cleanup import run as fail_jobs_run
from ansible_collections.arvados_ops.recovery.plugins.module_utils._cleanup import sql as fail_jobs_sql
from ansible_collections.arvados_ops.recovery.plugins.module_utils._cleanup import tokens as fail_jobs_tokens
from ansible_collections.arvados_ops.recovery.plugins.module_utils._cleanup.checks import (
    ADVISORY_LOCK_KEY,
    take_advisory_lock,
)
from ansible_collections.arvados_ops.recovery.plugins.module_utils._cleanup.options import (
    DEFAULT_FAIL_MESSAGE,
    DEFAULT_RETRY_MESSAGE,
    CleanupOptions,
)
from ansible_collections.arvados_ops.recovery.plugins.module_utils._cleanup.pace import BatchSample
from ansible_collections.arvados_ops.recovery.plugins.module_utils._cleanup.result import (
    BatchOutcome,
    CleanupResult,
    merge_slurm_results,
)
from ansible_collections.arvados_ops.recovery.plugins.module_utils._common.errors import ConfigError, RecoveryError
from tests.unit.plugins.module_utils.slurm_fakes import FakeClock

JOB = "zzzzz-8i9sb-%015d"
NO_FILES = {"config_file": "", "database_yml": "", "db_name": "arvados_test", "cancel_slurm_jobs": False}


# -- CleanupOptions -----------------------------------------------------------------------


@pytest.mark.parametrize(
    "batch_size, message",
    [
        (0, "option batch_size must be at least 1, got 0"),
        (-1, "option batch_size must be at least 1, got -1"),
        (True, "option batch_size must be of type int, got True"),
        ("5", "option batch_size must be of type int, got '5'"),
        (2.5, "option batch_size must be of type int, got 2.5"),
    ],
)
def test_batch_size_must_be_a_positive_integer(batch_size, message):
    with pytest.raises(RecoveryError) as raised:
        CleanupOptions(batch_size=batch_size)
    assert str(raised.value) == message


def test_negative_lock_wait_and_blank_message_are_refused():
    with pytest.raises(RecoveryError, match="option lock_wait must be at least 0, got -1.0"):
        CleanupOptions(lock_wait=-1)
    with pytest.raises(RecoveryError, match="message must not be empty"):
        CleanupOptions(message="  \n ")


def test_uuids_must_be_job_uuids_and_are_deduplicated_and_sorted():
    options = CleanupOptions(uuids=[JOB % 2, JOB % 1, JOB % 2])
    assert options.uuids == [JOB % 1, JOB % 2]
    container = "zzzzz-dz642-000000000000001"
    with pytest.raises(RecoveryError) as raised:
        CleanupOptions(uuids=[JOB % 1, container, "zzzzz-8i9sb-short", JOB % 3 + "\n"])
    assert str(raised.value) == (
        "not Arvados job UUIDs (<prefix>-8i9sb-<15 chars>): %r, 'zzzzz-8i9sb-short', %r" % (JOB % 3 + "\n", container)
    )


def test_default_messages_and_target_state_follow_retry():
    assert CleanupOptions().message == DEFAULT_FAIL_MESSAGE
    assert CleanupOptions().target_state == "Failed"
    assert CleanupOptions(retry=True).message == DEFAULT_RETRY_MESSAGE
    assert CleanupOptions(retry=True).target_state == "Queued"
    assert CleanupOptions(retry=True, message="mine").message == "mine"


def test_result_dict_names_the_job_list_after_the_mode_and_diffs_each_job():
    result = CleanupResult(CleanupOptions(retry=True, diff=True))
    result.done_jobs.extend([JOB % 1, JOB % 2])
    result.not_requeued.append(JOB % 4)
    result.exempt = [JOB % 3]
    as_dict = result.to_dict()
    assert as_dict["changed"] is True
    assert as_dict["requeued_jobs"] == [JOB % 1, JOB % 2]
    assert as_dict["not_requeued"] == [JOB % 4]
    assert "failed_jobs" not in as_dict
    assert as_dict["exempt"] == {"count": 1, "uuids": [JOB % 3]}
    assert as_dict["threshold"] is None and as_dict["threshold_source"] is None
    assert as_dict["slurm"] == {}
    assert as_dict["tokens_left_alone"] == []
    assert as_dict["counts"] == {
        "jobs": 2,
        "skipped_jobs": 0,
        "revoked_tokens": 0,
        "tokens_left_alone": 0,
        "logs": 0,
        "held_by_other_users": 0,
    }
    assert as_dict["held_by_other_users"] == []
    # A job retry could not requeue is failed, and the diff says so.
    assert as_dict["diff"] == {
        "before": "%s: Running\n%s: Running\n%s: Running\n" % (JOB % 1, JOB % 2, JOB % 4),
        "after": "%s: Queued\n%s: Queued\n%s: Failed\n" % (JOB % 1, JOB % 2, JOB % 4),
    }
    nothing = CleanupResult(CleanupOptions()).to_dict()
    assert nothing["changed"] is False and nothing["failed_jobs"] == []
    assert "diff" not in nothing


# -- merge_slurm_results ------------------------------------------------------------------


def test_merge_slurm_results_concatenates_lists_ors_flags_and_sums_counts():
    first = {
        "cancelled": [{"name": JOB % 1}],
        "already_absent": [],
        "changed": True,
        "failed": False,
        "scancel_calls": 2,
        "squeue_calls": 3,
        "elapsed": 0.5,
        "msg": "first",
    }
    second = {
        "cancelled": [{"name": JOB % 2}],
        "already_absent": [JOB % 3],
        "changed": False,
        "failed": False,
        "scancel_calls": 1,
        "squeue_calls": 1,
        "elapsed": 0.25,
        "msg": "second",
    }
    merged = merge_slurm_results([first, second])
    assert merged == {
        "cancelled": [{"name": JOB % 1}, {"name": JOB % 2}],
        "already_absent": [JOB % 3],
        "changed": True,
        "failed": False,
        "scancel_calls": 3,
        "squeue_calls": 4,
        "elapsed": 0.75,
        "msg": "second",
    }
    # the inputs are not modified
    assert first["cancelled"] == [{"name": JOB % 1}] and first["already_absent"] == []


def test_merge_of_no_batches_is_empty():
    assert merge_slurm_results([]) == {}


# -- the advisory lock --------------------------------------------------------------------


class LockConnection:
    """Answers pg_try_advisory_lock with the scripted answers, then True for ever."""

    def __init__(self, answers):
        self.answers = list(answers)
        self.calls = []

    def execute(self, query, params=None):
        self.calls.append(("execute", query, params))
        answer = self.answers.pop(0) if self.answers else True
        return _Rows([(answer,)])

    def commit(self):
        self.calls.append(("commit",))

    def rollback(self):
        self.calls.append(("rollback",))


class _Rows:
    def __init__(self, rows):
        self.rows = rows

    def fetchone(self):
        return self.rows[0]

    def fetchall(self):
        return self.rows


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


# -- token windows ------------------------------------------------------------------------


def _at(minute):
    return datetime(2026, 1, 1) + timedelta(minutes=minute)


def test_a_token_belongs_to_a_window_of_its_own_user_only():
    windows = fail_jobs_tokens.JobWindows([(1, _at(0), _at(10)), (2, _at(20), _at(30))])
    assert windows.contain(1, _at(5)) and windows.contain(2, _at(25))
    assert not windows.contain(2, _at(5)) and not windows.contain(1, _at(25))
    assert not windows.contain(3, _at(5))


def test_window_edges_are_inside_and_gaps_between_windows_outside():
    windows = fail_jobs_tokens.JobWindows([(1, _at(0), _at(10)), (1, _at(20), _at(30))])
    assert windows.contain(1, _at(0)) and windows.contain(1, _at(10))
    assert windows.contain(1, _at(20)) and windows.contain(1, _at(30))
    assert not windows.contain(1, _at(15))
    assert not windows.contain(1, _at(-1)) and not windows.contain(1, _at(31))


def test_a_long_window_covers_the_short_ones_opening_inside_it():
    # Sorted by start, the short window (5, 6) comes last; an instant after it is still
    # inside the long window that opened before it.
    windows = fail_jobs_tokens.JobWindows([(1, _at(0), _at(100)), (1, _at(5), _at(6))])
    assert windows.contain(1, _at(50))
    assert not windows.contain(1, _at(101))


def test_bounds_span_each_users_windows():
    windows = fail_jobs_tokens.JobWindows([(2, _at(20), _at(30)), (1, _at(5), _at(6)), (1, _at(0), _at(3))])
    assert windows.bounds() == {"user_ids": [1, 2], "lo": [_at(0), _at(20)], "hi": [_at(6), _at(30)]}
    assert len(windows) == 2
    assert len(fail_jobs_tokens.JobWindows([])) == 0


def test_windows_agree_with_a_plain_scan_of_every_window():
    rng = random.Random(7)
    spans = []
    for _index in range(200):
        start = rng.randint(0, 1000)
        spans.append((rng.randint(1, 5), _at(start), _at(start + rng.randint(0, 60))))
    windows = fail_jobs_tokens.JobWindows(spans)
    for user in range(1, 6):
        for minute in range(-5, 1070, 3):
            expected = any(u == user and lo <= _at(minute) <= hi for u, lo, hi in spans)
            assert windows.contain(user, _at(minute)) is expected, (user, minute)


class OwnersConnection:
    """Answers SQL_TOKEN_OTHER_OWNERS with `rows`; records its parameters."""

    def __init__(self, rows):
        self.rows = rows
        self.params = []

    def execute(self, query, params=None):
        assert query == fail_jobs_sql.SQL_TOKEN_OTHER_OWNERS
        self.params.append(params)
        return _Rows(self.rows)


def test_other_owners_asks_once_for_all_tokens_with_their_users_and_span():
    """One statement per batch (issue 21): the tokens as arrays, and what bounds the one
    pass over jobs as constants: the batch's users once each, the first and last token."""
    user_a, user_b = "zzzzz-tpzed-%015d" % 1, "zzzzz-tpzed-%015d" % 2
    tokens = [
        fail_jobs_tokens.TokenCandidate(11, "zzzzz-gj3su-%015d" % 11, user_b, _at(30)),
        fail_jobs_tokens.TokenCandidate(12, "zzzzz-gj3su-%015d" % 12, user_a, _at(5)),
        fail_jobs_tokens.TokenCandidate(13, "zzzzz-gj3su-%015d" % 13, user_b, _at(50)),
    ]
    conn = OwnersConnection([(12, JOB % 7)])
    options = CleanupOptions(uuids=[JOB % 1, JOB % 2])

    owners = fail_jobs_tokens.other_owners(conn, options, tokens, [JOB % 1])

    assert owners == {12: JOB % 7}
    assert conn.params == [
        {
            "ids": [11, 12, 13],
            "users": [user_b, user_a, user_b],
            "made": [_at(30), _at(5), _at(50)],
            "user_uuids": [user_a, user_b],
            "first_made": _at(5),
            "last_made": _at(50),
            "batch": [JOB % 1],
            "run_uuids": [JOB % 1, JOB % 2],
            "every_row": True,
            "threshold": None,
            "attempt_summary": "dispatching to %",
        }
    ]


def test_with_last_marks_the_final_item_only():
    assert list(fail_jobs.with_last([])) == []
    assert list(fail_jobs.with_last(["a"])) == [("a", True)]
    assert list(fail_jobs.with_last(iter("abc"))) == [("a", False), ("b", False), ("c", True)]


class SettingsConnection:
    """Answers the pg_settings query with `server_kb` and records every statement."""

    def __init__(self, server_kb):
        self.server_kb = server_kb
        self.statements = []

    def execute(self, query, params=None):
        self.statements.append((query, params))
        rows = list(self.server_kb.items()) if "pg_settings" in query else []
        return _Rows(rows)

    def commit(self):
        self.statements.append(("COMMIT", None))

    def rollback(self):
        self.statements.append(("ROLLBACK", None))


def test_settings_are_read_once_and_set_for_each_batch_transaction_only():
    conn = SettingsConnection({"gin_pending_list_limit": 4096, "work_mem": 4096})
    cleaner = fail_jobs.JobCleaner(conn, None, CleanupOptions())

    cleaner.transaction.raise_bulk_settings(last=False)
    cleaner.transaction.raise_bulk_settings(last=True)

    reads = [q for q, _p in conn.statements if "pg_settings" in q]
    sets = [p for q, p in conn.statements if "set_config" in q]
    assert len(reads) == 1
    assert all("true)" in q for q, _p in conn.statements if "set_config" in q)  # SET LOCAL
    assert sets == [
        {"names": ["gin_pending_list_limit", "work_mem"], "values": ["262144kB", "65536kB"]},
        {"names": ["work_mem"], "values": ["65536kB"]},
    ]


def test_nothing_is_set_when_the_server_gives_more():
    conn = SettingsConnection({"gin_pending_list_limit": 10**7, "work_mem": 10**7})
    cleaner = fail_jobs.JobCleaner(conn, None, CleanupOptions())
    cleaner.transaction.raise_bulk_settings(last=False)
    assert [q for q, _p in conn.statements if "set_config" in q] == []


@pytest.mark.parametrize("check_mode", [False, True])
def test_a_batch_raises_the_settings_unless_it_only_reads(check_mode):
    conn = SettingsConnection({"gin_pending_list_limit": 4096, "work_mem": 4096})
    cleaner = fail_jobs.JobCleaner(conn, None, CleanupOptions(check_mode=check_mode))
    cleaner.transaction.write = lambda uuids: BatchOutcome(uuids, [])

    cleaner._clean_batch([JOB % 1], last=False)  # pylint: disable=protected-access

    raised = [q for q, _p in conn.statements if "set_config" in q]
    assert len(raised) == (0 if check_mode else 1)
    assert conn.statements[-1][0] == ("ROLLBACK" if check_mode else "COMMIT")


# -- locked rows: tried again after the others, for row_lock_wait at most -----------------


class LockingCleaner(fail_jobs.JobCleaner):
    """A cleaner whose batches find `locked` jobs held by another transaction until the
    clock reaches `released_at`; every other job is done."""

    def __init__(self, locked, released_at, row_lock_wait, clock):
        super().__init__(
            None,
            None,
            CleanupOptions(row_lock_wait=row_lock_wait, batch_size=2),
            progress=lambda result: self.said.extend(result.notes),
            clock=clock,
            sleep=clock.sleep,
        )
        self.locked, self.released_at = set(locked), released_at
        self.said = []
        self.transactions = []

    def _batch_transaction(self, uuids, last):
        self.transactions.append(list(uuids))
        held = self.clock() < self.released_at
        done = [u for u in uuids if not (held and u in self.locked)]
        return BatchOutcome(done, [u for u in uuids if u not in done])

    def _still_qualifying(self, uuids):
        return [u for u in uuids if u in self.locked]


def test_a_job_locked_for_longer_than_row_lock_wait_is_reported_and_left():
    clock = FakeClock()
    cleaner = LockingCleaner([JOB % 2], released_at=clock.time + 100, row_lock_wait=3, clock=clock)
    for batch in ([JOB % 1, JOB % 2], [JOB % 3]):
        cleaner._clean_batch(batch, last=False)  # pylint: disable=protected-access
    cleaner._retry_deferred()  # pylint: disable=protected-access

    result = cleaner.result.to_dict()
    assert result["locked_jobs"] == [JOB % 2]
    assert result["failed_jobs"] == [JOB % 1, JOB % 3]
    assert result["skipped_jobs"] == []
    assert sum(clock.sleeps) == pytest.approx(3)  # waited row_lock_wait, not longer
    assert all(len(t) == 1 for t in cleaner.transactions[2:])  # the locked job alone
    assert cleaner.said[0] == "1 job(s) locked by another transaction, tried again after the others: " + JOB % 2
    assert cleaner.said[1] == "waiting up to 3 s more for 1 job(s) locked by another transaction: " + JOB % 2
    assert cleaner.said[-1] == "1 job(s) still locked by another transaction after 3 s, left for a rerun: " + JOB % 2


def test_a_job_unlocked_while_waiting_is_done_in_the_same_run():
    clock = FakeClock()
    cleaner = LockingCleaner([JOB % 2], released_at=clock.time + 1, row_lock_wait=30, clock=clock)
    cleaner._clean_batch([JOB % 1, JOB % 2], last=False)  # pylint: disable=protected-access
    cleaner._retry_deferred()  # pylint: disable=protected-access
    result = cleaner.result.to_dict()
    assert result["locked_jobs"] == []
    assert result["failed_jobs"] == [JOB % 1, JOB % 2]
    assert sum(clock.sleeps) < 2


def test_a_batch_that_waited_too_long_for_another_lock_is_deferred_whole():
    clock = FakeClock()
    cleaner = LockingCleaner([], released_at=0, row_lock_wait=1, clock=clock)
    outcomes = iter([None, BatchOutcome([JOB % 1, JOB % 2], [])])
    cleaner._batch_transaction = lambda uuids, last: next(outcomes)  # pylint: disable=protected-access
    cleaner._clean_batch([JOB % 1, JOB % 2], last=False)  # pylint: disable=protected-access
    assert cleaner._deferred == [JOB % 1, JOB % 2]  # pylint: disable=protected-access
    cleaner._retry_deferred()  # pylint: disable=protected-access
    assert cleaner.result.to_dict()["failed_jobs"] == [JOB % 1, JOB % 2]


def test_row_lock_wait_and_batch_pause_refuse_nan_like_the_other_waits():
    for name in ("row_lock_wait", "batch_pause"):
        with pytest.raises(ConfigError, match="option %s must be a finite number, got nan" % name):
            fail_jobs_run.with_defaults({name: "nan"})


def test_live_takes_auto_true_or_false():
    assert fail_jobs_run.auto_or_bool("live", "AUTO") == "auto"
    assert fail_jobs_run.auto_or_bool("live", "no") is False
    with pytest.raises(ConfigError, match="live must be auto, true or false, got 'maybe'"):
        fail_jobs_run.auto_or_bool("live", "maybe")


@pytest.mark.parametrize(
    "live, batch_pause, expected", [(True, None, 0.0), (False, None, 0.0), (True, 0.0, 0.0), (False, 1.5, 1.5)]
)
def test_the_pause_is_the_option_given_and_none_before_a_batch_is_measured(live, batch_pause, expected):
    cleaner = fail_jobs.JobCleaner(None, None, CleanupOptions(batch_pause=batch_pause))
    cleaner.pace.set_live(live)
    assert cleaner._batch_pause() == expected  # pylint: disable=protected-access


@pytest.mark.parametrize("batch_pause", [None, 1.5])
def test_check_mode_does_not_pause_between_batches(batch_pause):
    cleaner = fail_jobs.JobCleaner(None, None, CleanupOptions(batch_pause=batch_pause, check_mode=True))
    cleaner.pace.set_live(True)
    cleaner.pace.observe(BatchSample(100, 0.1, 0.01))
    assert cleaner._batch_pause() == 0.0  # pylint: disable=protected-access


@pytest.mark.parametrize(
    "live, batch_size, expected",
    [
        (True, None, fail_jobs_pace.START_SIZE),
        (False, None, fail_jobs_options.DEFAULT_BATCH_SIZE),
        (True, 500, 500),
        (False, 7, 7),
    ],
)
def test_the_batch_size_is_the_pace_s_unless_given(live, batch_size, expected):
    cleaner = fail_jobs.JobCleaner(None, None, CleanupOptions(batch_size=batch_size))
    cleaner.pace.set_live(live)
    assert cleaner._batch_size() == expected  # pylint: disable=protected-access


def test_a_run_that_turns_live_goes_on_in_live_batches():
    cleaner = fail_jobs.JobCleaner(None, None, CleanupOptions())
    jobs = [(JOB % n, None, None) for n in range(fail_jobs_options.DEFAULT_BATCH_SIZE + 3 * fail_jobs_pace.START_SIZE)]
    cleaner._running_jobs = lambda: iter(jobs)  # pylint: disable=protected-access
    sizes = []
    for batch in cleaner._qualifying_batches():  # pylint: disable=protected-access
        sizes.append(len(batch))
        cleaner.pace.set_live(True)  # as _notice_other_sessions does after a batch
    assert sizes == [fail_jobs_options.DEFAULT_BATCH_SIZE] + [fail_jobs_pace.START_SIZE] * 3


class SessionsConnection:
    """Answers the other-sessions count with the next of `counts`."""

    def __init__(self, counts):
        self.counts = list(counts)

    def execute(self, query, params=None):
        assert "pg_stat_activity" in query
        return _Rows([(self.counts.pop(0),)])

    def rollback(self):
        pass


def test_auto_turns_live_when_other_sessions_connect_during_the_run():
    cleaner = fail_jobs.JobCleaner(SessionsConnection([0, 0, 2]), None, CleanupOptions(), progress=lambda result: None)
    cleaner.result.live = cleaner._is_live()  # pylint: disable=protected-access
    cleaner._notice_other_sessions()  # pylint: disable=protected-access
    assert cleaner.result.live is False
    cleaner._notice_other_sessions()  # pylint: disable=protected-access
    assert cleaner.result.live is True and cleaner._keep_gin_limit is True  # pylint: disable=protected-access
    assert cleaner.result.notes == ["other sessions connected to the database: going on as live"]


def test_live_a_batch_s_commit_and_the_sessions_queued_behind_it_steer_the_pace():
    cleaner = fail_jobs.JobCleaner(SessionsConnection([3]), None, CleanupOptions(live=True))
    cleaner.pace.set_live(True)
    cleaner.transaction.before_commit()
    cleaner.transaction.commit_seconds = 0.004
    cleaner._observe_batch(100, 0.3)  # pylint: disable=protected-access
    report = cleaner.result.to_dict()["pace"]
    assert (report["commit_ms"], report["backoffs"]) == (4.0, 1)


def test_given_both_options_the_run_does_not_look_at_other_sessions():
    cleaner = fail_jobs.JobCleaner(SessionsConnection([]), None, CleanupOptions(batch_size=100, batch_pause=2.0))
    cleaner.pace.set_live(True)
    cleaner.transaction.before_commit()  # would fail on the empty fake if it asked
    cleaner._observe_batch(100, 0.3)  # pylint: disable=protected-access
    assert cleaner.result.to_dict()["pace"]["mode"] == "fixed"


def test_a_run_told_it_is_at_boot_stays_so():
    cleaner = fail_jobs.JobCleaner(SessionsConnection([]), None, CleanupOptions(live=False))
    cleaner.result.live = cleaner._is_live()  # pylint: disable=protected-access
    cleaner._notice_other_sessions()  # pylint: disable=protected-access
    assert cleaner.result.live is False


# -- a standby ----------------------------------------------------------------------------


def test_a_standby_is_refused_before_anything_is_done():
    with pytest.raises(RecoveryError, match=r"standby \(pg_is_in_recovery\(\) is true\).*connect to the primary"):
        fail_jobs_checks.check_primary(True)
    fail_jobs_checks.check_primary(False)
    # Read with the other checks, before the cleanup lock and any change.
    assert "pg_is_in_recovery()" in fail_jobs_sql.SQL_SERVER_FACTS

# -*- coding: utf-8 -*-
# SPDX-License-Identifier: GPL-3.0-or-later
"""_cleanup/engine.py, the cleanup engine, with fakes for the database and the clock: the
bulk settings of a batch, locked rows and the live mode. Its options, its result, its
checks and the token windows are tested in the files of their own."""

from __future__ import annotations

import pytest

from ansible_collections.arvados_ops.recovery.plugins.module_utils._cleanup import engine as cleanup_engine
from ansible_collections.arvados_ops.recovery.plugins.module_utils._cleanup import options as cleanup_options
from ansible_collections.arvados_ops.recovery.plugins.module_utils._cleanup import pace as cleanup_pace
from ansible_collections.arvados_ops.recovery.plugins.module_utils._cleanup import run as cleanup_run
from ansible_collections.arvados_ops.recovery.plugins.module_utils._cleanup.options import CleanupOptions
from ansible_collections.arvados_ops.recovery.plugins.module_utils._cleanup.pace import BatchSample
from ansible_collections.arvados_ops.recovery.plugins.module_utils._cleanup.result import BatchOutcome
from ansible_collections.arvados_ops.recovery.plugins.module_utils._common.errors import ConfigError
from tests.unit.plugins.module_utils.pg_fakes import Rows
from tests.unit.plugins.module_utils.slurm_fakes import FakeClock

JOB = "zzzzz-8i9sb-%015d"
NO_FILES = {"config_file": "", "database_yml": "", "db_name": "arvados_test", "cancel_slurm_jobs": False}


def test_with_last_marks_the_final_item_only():
    assert list(cleanup_engine.with_last([])) == []
    assert list(cleanup_engine.with_last(["a"])) == [("a", True)]
    assert list(cleanup_engine.with_last(iter("abc"))) == [("a", False), ("b", False), ("c", True)]


class SettingsConnection:
    """Answers the pg_settings query with `server_kb` and records every statement."""

    def __init__(self, server_kb):
        self.server_kb = server_kb
        self.statements = []

    def execute(self, query, params=None):
        self.statements.append((query, params))
        rows = list(self.server_kb.items()) if "pg_settings" in query else []
        return Rows(rows)

    def commit(self):
        self.statements.append(("COMMIT", None))

    def rollback(self):
        self.statements.append(("ROLLBACK", None))


def test_settings_are_read_once_and_set_for_each_batch_transaction_only():
    conn = SettingsConnection({"gin_pending_list_limit": 4096, "work_mem": 4096})
    cleaner = cleanup_engine.JobCleaner(conn, None, CleanupOptions())

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
    cleaner = cleanup_engine.JobCleaner(conn, None, CleanupOptions())
    cleaner.transaction.raise_bulk_settings(last=False)
    assert [q for q, _p in conn.statements if "set_config" in q] == []


@pytest.mark.parametrize("check_mode", [False, True])
def test_a_batch_raises_the_settings_unless_it_only_reads(check_mode):
    conn = SettingsConnection({"gin_pending_list_limit": 4096, "work_mem": 4096})
    cleaner = cleanup_engine.JobCleaner(conn, None, CleanupOptions(check_mode=check_mode))
    cleaner.transaction.write = lambda uuids: BatchOutcome(uuids, [])

    cleaner._clean_batch([JOB % 1], last=False)  # pylint: disable=protected-access

    raised = [q for q, _p in conn.statements if "set_config" in q]
    assert len(raised) == (0 if check_mode else 1)
    assert conn.statements[-1][0] == ("ROLLBACK" if check_mode else "COMMIT")


# -- locked rows: tried again after the others, for row_lock_wait at most -----------------


class LockingCleaner(cleanup_engine.JobCleaner):
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
            cleanup_run.with_defaults({name: "nan"})


def test_live_takes_auto_true_or_false():
    assert cleanup_run.auto_or_bool("live", "AUTO") == "auto"
    assert cleanup_run.auto_or_bool("live", "no") is False
    with pytest.raises(ConfigError, match="live must be auto, true or false, got 'maybe'"):
        cleanup_run.auto_or_bool("live", "maybe")


@pytest.mark.parametrize(
    "live, batch_pause, expected", [(True, None, 0.0), (False, None, 0.0), (True, 0.0, 0.0), (False, 1.5, 1.5)]
)
def test_the_pause_is_the_option_given_and_none_before_a_batch_is_measured(live, batch_pause, expected):
    cleaner = cleanup_engine.JobCleaner(None, None, CleanupOptions(batch_pause=batch_pause))
    cleaner.pace.set_live(live)
    assert cleaner._batch_pause() == expected  # pylint: disable=protected-access


@pytest.mark.parametrize("batch_pause", [None, 1.5])
def test_check_mode_does_not_pause_between_batches(batch_pause):
    cleaner = cleanup_engine.JobCleaner(None, None, CleanupOptions(batch_pause=batch_pause, check_mode=True))
    cleaner.pace.set_live(True)
    cleaner.pace.observe(BatchSample(100, 0.1, 0.01))
    assert cleaner._batch_pause() == 0.0  # pylint: disable=protected-access


@pytest.mark.parametrize(
    "live, batch_size, expected",
    [
        (True, None, cleanup_pace.START_SIZE),
        (False, None, cleanup_options.DEFAULT_BATCH_SIZE),
        (True, 500, 500),
        (False, 7, 7),
    ],
)
def test_the_batch_size_is_the_pace_s_unless_given(live, batch_size, expected):
    cleaner = cleanup_engine.JobCleaner(None, None, CleanupOptions(batch_size=batch_size))
    cleaner.pace.set_live(live)
    assert cleaner._batch_size() == expected  # pylint: disable=protected-access


def test_a_run_that_turns_live_goes_on_in_live_batches():
    cleaner = cleanup_engine.JobCleaner(None, None, CleanupOptions())
    jobs = [(JOB % n, None, None) for n in range(cleanup_options.DEFAULT_BATCH_SIZE + 3 * cleanup_pace.START_SIZE)]
    cleaner._running_jobs = lambda: iter(jobs)  # pylint: disable=protected-access
    sizes = []
    for batch in cleaner._qualifying_batches():  # pylint: disable=protected-access
        sizes.append(len(batch))
        cleaner.pace.set_live(True)  # as _notice_other_sessions does after a batch
    assert sizes == [cleanup_options.DEFAULT_BATCH_SIZE] + [cleanup_pace.START_SIZE] * 3


class SessionsConnection:
    """Answers the other-sessions count with the next of `counts`."""

    def __init__(self, counts):
        self.counts = list(counts)

    def execute(self, query, params=None):
        assert "pg_stat_activity" in query
        return Rows([(self.counts.pop(0),)])

    def rollback(self):
        pass


def test_auto_turns_live_when_other_sessions_connect_during_the_run():
    cleaner = cleanup_engine.JobCleaner(
        SessionsConnection([0, 0, 2]), None, CleanupOptions(), progress=lambda result: None
    )
    cleaner.result.live = cleaner._is_live()  # pylint: disable=protected-access
    cleaner._notice_other_sessions()  # pylint: disable=protected-access
    assert cleaner.result.live is False
    cleaner._notice_other_sessions()  # pylint: disable=protected-access
    assert cleaner.result.live is True and cleaner._keep_gin_limit is True  # pylint: disable=protected-access
    assert cleaner.result.notes == ["other sessions connected to the database: going on as live"]


def test_live_a_batch_s_commit_and_the_sessions_queued_behind_it_steer_the_pace():
    cleaner = cleanup_engine.JobCleaner(SessionsConnection([3]), None, CleanupOptions(live=True))
    cleaner.pace.set_live(True)
    cleaner.transaction.before_commit()
    cleaner.transaction.commit_seconds = 0.004
    cleaner._observe_batch(100, 0.3)  # pylint: disable=protected-access
    report = cleaner.result.to_dict()["pace"]
    assert (report["commit_ms"], report["backoffs"]) == (4.0, 1)


def test_given_both_options_the_run_does_not_look_at_other_sessions():
    cleaner = cleanup_engine.JobCleaner(SessionsConnection([]), None, CleanupOptions(batch_size=100, batch_pause=2.0))
    cleaner.pace.set_live(True)
    cleaner.transaction.before_commit()  # would fail on the empty fake if it asked
    cleaner._observe_batch(100, 0.3)  # pylint: disable=protected-access
    assert cleaner.result.to_dict()["pace"]["mode"] == "fixed"


def test_a_run_told_it_is_at_boot_stays_so():
    cleaner = cleanup_engine.JobCleaner(SessionsConnection([]), None, CleanupOptions(live=False))
    cleaner.result.live = cleaner._is_live()  # pylint: disable=protected-access
    cleaner._notice_other_sessions()  # pylint: disable=protected-access
    assert cleaner.result.live is False


@pytest.mark.parametrize(
    "live, order",
    [(False, "ORDER BY started_at, uuid"), (True, "ORDER BY is_locked_by_uuid, started_at, uuid")],
)
def test_the_listing_is_in_start_order_at_boot_and_by_user_live(live, order):
    """At boot the run reads its tokens once, and start order keeps a batch's pages
    together; live, each batch reads its users' tokens, few users a batch."""
    cleaner = cleanup_engine.JobCleaner(SessionsConnection([]), None, CleanupOptions(live=live))
    cleaner.result.live = live
    query, _params = cleaner._listing_query()  # pylint: disable=protected-access
    assert query.rstrip().endswith(order)

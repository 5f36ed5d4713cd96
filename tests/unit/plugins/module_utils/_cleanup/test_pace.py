# -*- coding: utf-8 -*-
# Copyright: Contributors to the arvados_ops.recovery collection
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The run's pace (_cleanup.pace), fed batches as a fake database would time them."""

from __future__ import annotations

import pytest

from ansible_collections.arvados_ops.recovery.plugins.module_utils._cleanup.pace import (
    COMMIT_BUDGET,
    MAX_BATCH_SECONDS,
    MAX_DUTY,
    MAX_SIZE,
    MIN_RATE,
    MIN_SIZE,
    START_SIZE,
    TARGET_RATE,
    WAITERS,
    BatchSample,
    Pace,
)


def live_pace(size=None, pause=None):
    return Pace(size, pause, live=True, boot_size=1000)


class FakeDatabase:
    """Times batches as the lab's did: a fixed cost per batch (the tokens' read of jobs)
    and a cost per job; a commit that flushes WAL in proportion to the jobs."""

    def __init__(self, fixed=0.2, per_job=0.001, commit_per_job=0.00004):
        self.fixed, self.per_job, self.commit_per_job = fixed, per_job, commit_per_job

    def sample(self, jobs, waiting=0):
        return BatchSample(jobs, self.fixed + self.per_job * jobs, self.commit_per_job * jobs, waiting)


def run_batches(pace, count, database=None, waiting=lambda n: 0):
    """Feed `count` batches; returns the sizes asked for."""
    database = database or FakeDatabase()
    sizes = []
    for number in range(count):
        jobs = pace.batch_size()
        sizes.append(jobs)
        pace.observe(database.sample(jobs, waiting(number)))
    return sizes


def test_at_boot_the_run_goes_at_full_speed_in_the_boot_size():
    pace = Pace(None, None, live=False, boot_size=1000)
    pace.observe(BatchSample(1000, 2.0, 0.05, 3))
    assert (pace.batch_size(), pace.pause(), pace.mode()) == (1000, 0.0, "full speed")


def test_live_the_first_batch_has_the_start_size_and_no_pause():
    pace = live_pace()
    assert (pace.batch_size(), pace.pause(), pace.mode()) == (START_SIZE, 0.0, "adaptive")


def test_small_batches_grow_until_their_fixed_cost_leaves_half_the_time():
    # 0.2 s + 1 ms a job at 200 jobs/s: a batch of n takes half its share from n = 133 on.
    pace = live_pace()
    sizes = run_batches(pace, 10, FakeDatabase(commit_per_job=1e-7))
    assert sizes[0] == START_SIZE
    assert (0.2 + 0.001 * sizes[-1]) * TARGET_RATE / sizes[-1] <= MAX_DUTY
    assert sizes[-1] < 2 * 133


def test_long_commits_shrink_the_batches_to_the_budget():
    # 0.2 ms of commit a job: the budget is met by batches of 50.
    pace = live_pace()
    sizes = run_batches(pace, 40, FakeDatabase(fixed=0.0, commit_per_job=0.0002))
    assert sizes[-1] == pytest.approx(COMMIT_BUDGET / 0.0002, rel=0.1)


def test_the_commit_budget_comes_before_the_duty():
    pace = live_pace()
    sizes = run_batches(pace, 5, FakeDatabase(fixed=1.0, commit_per_job=0.001))
    assert sizes == sorted(sizes, reverse=True) and sizes[-1] < START_SIZE


def test_one_slow_commit_halves_the_size_at_most():
    pace = live_pace()
    pace.observe(BatchSample(START_SIZE, 0.1, 5.0))  # a checkpoint's fsync, say
    assert pace.batch_size() == START_SIZE // 2


def test_the_size_stays_within_its_bounds():
    slow = live_pace()
    assert run_batches(slow, 20, FakeDatabase(commit_per_job=0.01))[-1] == MIN_SIZE
    forced = live_pace()
    forced._size = 5000.0  # pylint: disable=protected-access
    forced.observe(BatchSample(START_SIZE, 0.4, 1e-5))
    assert forced.batch_size() == MAX_SIZE


def test_batches_longer_than_their_bound_shrink():
    pace = live_pace()
    pace.observe(BatchSample(START_SIZE, 0.8, 0.001))
    assert pace.batch_size() == round(START_SIZE * MAX_BATCH_SECONDS / 0.8)
    pace.observe(BatchSample(pace.batch_size(), 30.0, 0.001))  # a stall: half, not less
    assert pace.batch_size() == round(START_SIZE * MAX_BATCH_SECONDS / 0.8 / 2)


def test_growth_stops_where_a_batch_would_outlast_its_bound():
    # A busy machine: 0.3 s a batch and 1 ms a job, so duty asks for more than time allows.
    pace = live_pace()
    sizes = run_batches(pace, 30, FakeDatabase(fixed=0.3, per_job=0.001, commit_per_job=1e-6))
    assert 0.3 + 0.001 * sizes[-1] <= MAX_BATCH_SECONDS * 1.05
    assert sizes[-1] > START_SIZE


def test_the_pause_keeps_the_target_rate_less_the_batch_s_own_time():
    pace = live_pace()
    pace.observe(BatchSample(100, 0.1, 0.001))
    assert pace.pause() == pytest.approx(100 / TARGET_RATE - 0.1)


def test_a_batch_slower_than_its_share_is_not_followed_by_a_pause():
    pace = live_pace()
    pace.observe(BatchSample(100, 5.0, 0.001))
    assert pace.pause() == 0.0


def test_sessions_queued_behind_the_run_halve_the_rate_down_to_the_old_fixed_pace():
    pace = live_pace()
    run_batches(pace, 10, waiting=lambda n: WAITERS)
    assert pace.rate == MIN_RATE
    assert pace.report()["backoffs"] == 10


def test_one_session_waiting_alone_is_not_taken_for_a_queue():
    pace = live_pace()
    run_batches(pace, 10, waiting=lambda n: WAITERS - 1)
    assert (pace.rate, pace.report()["backoffs"]) == (TARGET_RATE, 0)


def test_the_rate_comes_back_by_a_twentieth_of_the_target_per_quiet_batch():
    pace = live_pace()
    run_batches(pace, 1, waiting=lambda n: WAITERS)
    assert pace.rate == TARGET_RATE / 2
    run_batches(pace, 3)
    assert pace.rate == pytest.approx(TARGET_RATE / 2 + 3 * TARGET_RATE / 20)
    run_batches(pace, 20)
    assert pace.rate == TARGET_RATE


def test_an_explicit_batch_size_wins_and_the_pause_is_still_steered():
    pace = live_pace(size=300)
    sizes = run_batches(pace, 5)
    assert sizes == [300] * 5
    assert pace.pause() == pytest.approx(300 / TARGET_RATE - 0.5)
    assert pace.mode() == "adaptive"


def test_an_explicit_pause_wins_and_the_size_is_still_steered():
    pace = live_pace(pause=2.0)
    sizes = run_batches(pace, 5, FakeDatabase(commit_per_job=0.001))
    assert sizes[-1] < START_SIZE
    assert pace.pause() == 2.0


def test_both_options_given_are_today_s_fixed_pace():
    pace = live_pace(size=100, pause=2.0)
    sizes = run_batches(pace, 5, FakeDatabase(commit_per_job=0.01), waiting=lambda n: WAITERS)
    assert (sizes, pace.pause(), pace.mode(), pace.rate) == ([100] * 5, 2.0, "fixed", TARGET_RATE)


@pytest.mark.parametrize("pause", [None, 1.5])
def test_check_mode_never_pauses_nor_steers(pause):
    pace = Pace(None, pause, live=True, boot_size=1000, check_mode=True)
    run_batches(pace, 5, FakeDatabase(commit_per_job=0.01), waiting=lambda n: WAITERS)
    assert (pace.batch_size(), pace.pause(), pace.mode()) == (START_SIZE, 0.0, "check")


def test_a_batch_without_a_commit_teaches_the_size_nothing():
    pace = live_pace()
    pace.observe(BatchSample(START_SIZE, 0.5, 0.0))
    assert pace.batch_size() == START_SIZE


def test_a_run_that_turns_live_starts_steering_then():
    pace = Pace(None, None, live=False, boot_size=1000)
    pace.observe(BatchSample(1000, 1.0, 0.2))
    pace.set_live(True)
    assert (pace.batch_size(), pace.pause()) == (START_SIZE, 0.0)


def test_the_report_says_the_sizes_the_rate_and_the_pauses():
    pace = live_pace()
    for jobs in (100, 50, 80):
        pace.observe(BatchSample(jobs, 0.2, 0.004))
        pace.paused(0.3)
    assert pace.report() == {
        "mode": "adaptive",
        "batch_size": 80,
        "batch_size_range": [50, 100],
        "pause_seconds": 0.9,
        "jobs_per_second": 153.3,
        "commit_ms": 4.0,
        "backoffs": 0,
    }

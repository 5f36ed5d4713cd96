# -*- coding: utf-8 -*-
# SPDX-License-Identifier: GPL-3.0-or-later
"""The scancel processes of a cancel call: their bounds, their time limits, and how they
are reaped, against a scripted Slurm and a fake clock."""

from __future__ import annotations

import pytest

from ansible_collections.arvados_ops.recovery.plugins.module_utils._cancel.request import CancelRequest
from ansible_collections.arvados_ops.recovery.plugins.module_utils._cancel.scancels import (
    SCANCEL_CHECK_INTERVAL,
    Scancels,
    TokenBucket,
)
from ansible_collections.arvados_ops.recovery.plugins.module_utils._slurm.scancel import CANCEL, SIGNAL, TERMINATE
from tests.unit.plugins.module_utils.slurm_fakes import FakeClock, FakeSlurm, Scripted

JOB = "zzzzz-8i9sb-000000000000001"
ENV = {"LC_ALL": "C"}
FAR = 1e6


def pool(**options):
    slurm = FakeSlurm(FakeClock())
    return Scancels(CancelRequest(names=[JOB], **options), slurm, ENV, slurm.clock.now()), slurm


def ids(count):
    return [str(number) for number in range(1, count + 1)]


def test_a_start_runs_the_kinds_command_line_and_counts_it():
    scancels, slurm = pool(signal="USR1", batch=True, clusters="c1")
    now = slurm.clock.now()
    scancels.start(SIGNAL, ["7", "8"], False, True, True, now, FAR)
    assert slurm.argvs("scancel") == [["scancel", "--ctld", "--clusters=c1", "--signal=USR1", "--batch", "7", "8"]]
    assert slurm.calls("scancel")[0].env == ENV
    assert scancels.started_count == 1 and [call.job_ids for call in scancels.running] == [["7", "8"]]


def test_the_time_limit_is_one_command_timeout_per_ten_ids_or_one_for_one_request():
    scancels, slurm = pool(command_timeout=5.0)
    now = slurm.clock.now()
    scancels.start(CANCEL, ids(25), True, False, False, now, FAR)
    scancels.start(TERMINATE, ids(25), False, True, True, now, FAR)
    scancels.start(CANCEL, ids(25), True, False, False, now, now + 12.0)
    assert [call.kill_at - now for call in scancels.running] == [15.0, 5.0, 12.0]


def test_starts_are_spaced_by_the_rate():
    scancels, slurm = pool(max_scancel_per_second=10.0)
    now = slurm.clock.now()
    assert scancels.may_start(True, now)
    assert not scancels.may_start(True, now)
    assert scancels.next_token(now) == pytest.approx(now + 0.1)
    assert scancels.may_start(True, now + 0.1)


def test_no_more_than_max_concurrent_scancel_run_at_once():
    scancels, slurm = pool(max_concurrent_scancel=1)
    now = slurm.clock.now()
    assert scancels.may_start(True, now)
    scancels.start(CANCEL, ["1"], True, False, False, now, FAR)
    assert not scancels.may_start(True, now + 1.0)


def test_running_jobs_wait_for_every_scancel_of_pending_ones():
    scancels, slurm = pool(max_concurrent_scancel=3)
    now = slurm.clock.now()
    scancels.start(CANCEL, ["1"], True, False, False, now, FAR)
    assert not scancels.may_start(False, now + 1.0)
    assert scancels.may_start(True, now + 1.0)


def test_an_ended_scancel_is_reaped_with_its_outcome_and_when():
    scancels, slurm = pool()
    clock = slurm.clock
    scancels.start(CANCEL, ["1"], True, False, False, clock.now(), FAR)
    assert list(scancels.reap(clock)) == []
    clock.sleep(slurm.scancel_duration)
    [(call, outcome, when)] = list(scancels.reap(clock))
    assert call.job_ids == ["1"] and outcome.ok and outcome.program == "scancel" and when == clock.now()
    assert scancels.running == []


def test_an_scancel_that_outlives_its_time_limit_is_killed():
    scancels, slurm = pool(command_timeout=2.0)
    slurm.script("scancel", Scripted(duration=100.0))
    clock = slurm.clock
    scancels.start(CANCEL, ["1"], True, False, False, clock.now(), FAR)
    clock.sleep(1.0)
    assert scancels.next_check(clock.now()) == clock.now() + SCANCEL_CHECK_INTERVAL
    assert scancels.next_check(clock.now() + 0.999) == scancels.running[0].kill_at == clock.now() + 1.0
    assert list(scancels.reap(clock)) == []
    clock.sleep(1.0)
    [(_call, outcome, _when)] = list(scancels.reap(clock))
    assert outcome.timed_out and slurm.calls("scancel")[0].killed
    assert outcome.error_text(2.0) == "scancel did not finish within 2 s and was killed"


def test_the_token_bucket_holds_no_burst():
    bucket = TokenBucket(rate=2.0, now=0.0)
    assert bucket.take(0.0) and not bucket.take(0.4)
    assert bucket.take(100.0) and not bucket.take(100.0)

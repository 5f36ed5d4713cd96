# -*- coding: utf-8 -*-
# SPDX-License-Identifier: GPL-3.0-or-later
"""The jobs of a cancel call: what each was sent and Slurm took, the scancel each needs
next, and the scancels due, worked out once per listing or ended scancel."""

from __future__ import annotations

import pytest

from ansible_collections.arvados_ops.recovery.plugins.module_utils._cancel import jobs as cancel_jobs_state
from ansible_collections.arvados_ops.recovery.plugins.module_utils._cancel.engine import CancelRequest, cancel_jobs
from ansible_collections.arvados_ops.recovery.plugins.module_utils._cancel.jobs import Jobs
from ansible_collections.arvados_ops.recovery.plugins.module_utils._slurm.scancel import (
    CANCEL,
    REMOVE_PENDING,
    SIGNAL,
    TERMINATE,
)
from tests.unit.plugins.module_utils.slurm_fakes import FakeClock, FakeSlurm, container, crunch_job, listed

STARTED = 1000.0
ROOT = (0, "root")
CTLD_TERM = ["scancel", "--ctld", "--signal=TERM", "--batch"]


def tracker(entries, cap=500, **options):
    """Jobs of a request naming every listed job, after one listing at the start."""
    names = sorted({entry.name for entry in entries})
    jobs = Jobs(CancelRequest(names=names, **options), STARTED, lambda batch: cap)
    assert jobs.listed(entries, STARTED) == []
    return jobs


def batches(jobs):
    return [(kind, [entry.job_id for entry in batch]) for kind, batch in jobs.due()]


def test_a_listing_tracks_the_users_jobs_and_notes_the_others():
    entries = [
        listed(1, "PENDING", crunch_job(1)),
        listed(2, "RUNNING", crunch_job(2), user="alice"),
        listed(3, "RUNNING", crunch_job(3)),
    ]
    jobs = Jobs(CancelRequest(names=[crunch_job(1), crunch_job(2)], user="crunch"), STARTED, lambda batch: 500)
    jobs.listed(entries, STARTED)
    assert sorted(jobs.tracked) == ["1"] and sorted(jobs.others) == ["2"]
    assert jobs.seen_names == {crunch_job(1), crunch_job(2)}
    assert jobs.listing == jobs.first_listing == entries[:2]
    assert [entry.job_id for entry in jobs.ours()] == ["1"]


def test_each_job_needs_the_scancel_its_state_asks():
    jobs = tracker(
        [
            listed(1, "PENDING", container(1)),
            listed(2, "RUNNING", container(2)),
            listed(3, "SUSPENDED", container(3)),
            listed(4, "RUNNING", crunch_job(4)),
            listed(5, "COMPLETING", crunch_job(5)),
        ]
    )
    assert [(entry.job_id, kind) for entry, kind in jobs.next_actions()] == [
        ("1", REMOVE_PENDING),
        ("2", TERMINATE),
        ("4", CANCEL),
    ]
    # The suspended container is left alone by default: the call is then done with it.
    assert [entry.job_id for entry in jobs.unfinished()] == ["1", "2", "3", "4", "5"]
    assert jobs.left_suspended(jobs.listing[2]) and jobs.left_running(jobs.listing[2])


def test_a_signal_reaches_running_jobs_and_skips_pending_ones():
    jobs = tracker([listed(1, "PENDING", crunch_job(1)), listed(2, "RUNNING", crunch_job(2))], signal="USR1")
    assert [(entry.job_id, kind) for entry, kind in jobs.next_actions()] == [("2", SIGNAL)]
    assert [jobs.skipped_pending(entry) for entry in jobs.listing] == [True, False]


def test_the_due_scancels_hold_pending_jobs_first_cut_at_the_cap():
    jobs = tracker(
        [
            listed(1, "RUNNING", crunch_job(1)),
            listed(2, "PENDING", crunch_job(2)),
            listed(3, "RUNNING", container(3)),
            listed(4, "PENDING", crunch_job(4)),
            listed(5, "PENDING", crunch_job(5)),
        ],
        cap=2,
    )
    assert batches(jobs) == [(CANCEL, ["2", "4"]), (CANCEL, ["5", "1"]), (TERMINATE, ["3"])]


def test_nothing_is_due_before_the_grace_period_ends():
    jobs = tracker([listed(1, "RUNNING", crunch_job(1))], grace_period=2.0)
    assert jobs.due() == [] and jobs.upcoming(STARTED) == [STARTED + 2.0]
    assert jobs.listed([listed(1, "RUNNING", crunch_job(1))], STARTED + 2.0) == []
    assert batches(jobs) == [(CANCEL, ["1"])]


def test_a_started_scancel_leaves_the_front_and_puts_its_jobs_in_flight():
    jobs = tracker([listed(1, "PENDING", crunch_job(1)), listed(2, "PENDING", crunch_job(2))], cap=1)
    assert jobs.front_started() == []
    assert jobs.tracked["1"].in_flight and jobs.tracked["1"].sent == {CANCEL}
    assert batches(jobs) == [(CANCEL, ["2"])]


def test_an_ended_scancel_has_its_jobs_wait_for_their_next_one():
    jobs = tracker([listed(1, "RUNNING", crunch_job(1)), listed(2, "RUNNING", container(2))])
    jobs.front_started()
    jobs.front_started()
    now = STARTED + 0.1
    jobs.scancel_ended(CANCEL, ["1"], False, {"1"}, set(), now)
    jobs.scancel_ended(TERMINATE, ["2"], False, set(), set(), now)
    job, container_job = jobs.tracked["1"], jobs.tracked["2"]
    assert job.acknowledged == {CANCEL} and not job.in_flight and job.eligible_at == now + 2.0
    # Slurm did not take the TERM: tried again after error_retry_delay.
    assert container_job.acknowledged == set() and container_job.eligible_at == now + 10.0
    assert jobs.due() == [] and jobs.upcoming(now) == [now + 2.0, now + 10.0]
    jobs.scancel_ended(TERMINATE, ["2"], False, {"2"}, set(), now)
    assert container_job.terms == 1 and container_job.eligible_at == now + 10.0  # term_interval


def test_running_jobs_wait_for_a_listing_after_the_pending_ones_scancel():
    jobs = tracker([listed(1, "PENDING", crunch_job(1)), listed(2, "RUNNING", crunch_job(2))], cap=1)
    assert not jobs.look_first()
    jobs.front_started()
    jobs.scancel_ended(CANCEL, ["1"], True, {"1"}, set(), STARTED + 0.1)
    assert batches(jobs) == [(CANCEL, ["2"])] and jobs.look_first()
    jobs.listed([listed(2, "RUNNING", crunch_job(2))], STARTED + 0.2)
    assert not jobs.look_first()


def test_a_scancel_that_never_reached_slurm_counts_as_not_sent():
    jobs = tracker([listed(1, "RUNNING", crunch_job(1))])
    jobs.front_started()
    jobs.scancel_ended(CANCEL, ["1"], False, set(), set(), STARTED, reached_slurm=False)
    assert jobs.tracked["1"].sent == set()


def test_a_job_denied_to_this_user_is_left_alone_and_the_call_done():
    jobs = tracker([listed(1, "RUNNING", crunch_job(1))])
    assert not jobs.done()
    jobs.front_started()
    jobs.scancel_ended(CANCEL, ["1"], False, set(), {"1"}, STARTED)
    assert jobs.next_actions() == [] and jobs.tracked["1"].denied and jobs.done()


def test_a_job_still_queued_after_its_scancel_is_noted_once_per_log_interval():
    entries = [listed(1, "RUNNING", crunch_job(1))]
    jobs = tracker(entries, log_interval=30.0)
    jobs.front_started()
    jobs.scancel_ended(CANCEL, ["1"], False, {"1"}, set(), STARTED)
    assert jobs.listed(entries, STARTED + 1.0) == []
    assert jobs.listed(entries, STARTED + 2.0) == [
        "Slurm job 1 (%s) still in queue, RUNNING, 2.0 s into the call" % crunch_job(1)
    ]
    assert jobs.listed(entries, STARTED + 31.0) == []
    assert len(jobs.listed(entries, STARTED + 32.0)) == 1


def test_the_first_term_again_is_reported_once_per_job():
    entries = [listed(1, "RUNNING", container(1))]
    jobs = tracker(entries)
    jobs.front_started()
    jobs.scancel_ended(TERMINATE, ["1"], False, {"1"}, set(), STARTED)
    jobs.listed(entries, STARTED + 10.0)
    assert batches(jobs) == [(TERMINATE, ["1"])] and jobs.front_started() == ["1"]
    jobs.scancel_ended(TERMINATE, ["1"], False, {"1"}, set(), STARTED + 10.0)
    jobs.listed(entries, STARTED + 20.0)
    assert jobs.front_started() == []


def test_no_listing_means_not_done():
    jobs = Jobs(CancelRequest(names=[crunch_job(1)]), STARTED, lambda batch: 500)
    assert not jobs.done() and jobs.ours() == [] and jobs.due() == []


@pytest.mark.parametrize("release, ctld", [("22.05.8", "auto"), ("24.11.5", "never"), ("22.05.8", "always")])
def test_the_jobs_are_gone_over_once_per_listing_or_ended_scancel_not_while_scancels_run(release, ctld, monkeypatch):
    # 2,000 running containers on the per-job path: four scancels of 500, three alive at
    # once, the fourth waiting for a slot, each taking 2 s (the loop checks them every 5 ms
    # meanwhile).
    slurm = FakeSlurm(FakeClock())
    slurm.release = release
    slurm.scancel_duration = 2.0
    names = [container(number) for number in range(1, 2001)]
    for number, name in enumerate(names, 1):
        slurm.add(number, name, "RUNNING", exits_after_signal=1.0)
    worked_out = []
    due_batches = cancel_jobs_state.Jobs._due_batches

    def counted(jobs):
        worked_out.append(slurm.clock.now())
        return due_batches(jobs)

    monkeypatch.setattr(cancel_jobs_state.Jobs, "_due_batches", counted)
    request = CancelRequest(names=names, ctld=ctld)
    result = cancel_jobs(request, runner=slurm, clock=slurm.clock, environ={"PATH": "/usr/bin:/bin"}, caller=ROOT)
    sent = [argv[len(CTLD_TERM) if "--ctld" in argv else 3 :] for argv in slurm.argvs("scancel")]
    assert sent == [[str(n) for n in range(first, first + 500)] for first in (1, 501, 1001, 1501)]
    calls = slurm.calls("scancel")
    assert calls[3].started >= min(call.ends for call in calls[:3])
    assert len(result.terminated) == 2000 and not result.failed
    # Without the cache: once per check of the running scancels, 2,167 times here, each
    # over every job.
    assert len(worked_out) <= result.squeue_calls + result.scancel_calls

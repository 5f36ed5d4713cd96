# -*- coding: utf-8 -*-
# SPDX-License-Identifier: GPL-3.0-or-later
"""The result of a cancel call, made from its jobs and its log: what it did to each job,
what it left queued and why, and the message."""

from __future__ import annotations

from ansible_collections.arvados_ops.recovery.plugins.module_utils._cancel.jobs import Jobs
from ansible_collections.arvados_ops.recovery.plugins.module_utils._cancel.log import CallLog
from ansible_collections.arvados_ops.recovery.plugins.module_utils._cancel.report import (
    CancelResult,
    Report,
    outlived_term_note,
)
from ansible_collections.arvados_ops.recovery.plugins.module_utils._cancel.request import CancelRequest
from ansible_collections.arvados_ops.recovery.plugins.module_utils._slurm.scancel import CANCEL, TERMINATE
from tests.unit.plugins.module_utils.slurm_fakes import FakeClock, container, crunch_job, listed


class Call:
    """The parts a report reads, without the loop: the test plays the loop's part."""

    def __init__(self, **options) -> None:
        self.clock = FakeClock()
        self.request = CancelRequest(**options)
        self.jobs = Jobs(self.request, self.clock.now(), lambda batch: 500)
        self.log = CallLog(self.request, self.clock)
        self.report = Report(self.request, self.jobs, self.log, self.clock, self.clock.now())

    def cancel_all(self, taken=True, denied=()):
        """Every due scancel started and ended now."""
        while self.jobs.due():
            kind, batch = self.jobs.due()[0]
            self.jobs.front_started()
            job_ids = [entry.job_id for entry in batch]
            self.jobs.scancel_ended(
                kind, job_ids, False, set(job_ids) if taken else set(), set(denied), self.clock.now()
            )

    def finish(self, note=""):
        return self.report.finish(CancelResult(messages=self.log.messages), note)


def test_jobs_never_listed_remain_unknown_and_fail_the_call():
    call = Call(names=[crunch_job(1)], job_ids=["7"], timeout=30.0)
    call.log.failed("squeue", "squeue: error: Unable to contact slurm controller")
    call.clock.sleep(30.0)
    result = call.finish()
    assert result.failed and not result.changed
    assert result.remaining == [
        {"name": crunch_job(1), "job_id": None, "state": "UNKNOWN", "user": None},
        {"name": None, "job_id": "7", "state": "UNKNOWN", "user": None},
    ]
    assert result.msg == "could not list Slurm's queue within 30 s: squeue: error: Unable to contact slurm controller"
    assert result.elapsed == 30.0 and result.to_dict()["diff"] == {"before": "", "after": ""}


def test_a_permanent_failure_leads_the_message():
    call = Call(names=[crunch_job(1)])
    call.log.note_permanent("squeue exited with status 1 and printed nothing")
    assert call.finish().msg == (
        "squeue exited with status 1 and printed nothing (squeue_path=squeue); not tried again: "
        "Slurm's queue was not listed, no job was cancelled"
    )


def test_what_was_cancelled_and_what_the_queue_showed_before_and_after():
    call = Call(names=[crunch_job(1), crunch_job(2)])
    before = [listed(1, "PENDING", crunch_job(1))]
    call.jobs.listed(before, call.clock.now())
    call.cancel_all()
    call.clock.sleep(0.2)
    call.jobs.listed([], call.clock.now())
    result = call.finish()
    assert result.cancelled == [{"name": crunch_job(1), "job_id": "1", "state_before": "PENDING", "user": "crunch"}]
    assert result.changed and not result.failed and result.already_absent == [crunch_job(2)]
    assert result.msg == "cancelled 1 Slurm job(s)"
    assert result.diff_before == "1 %s PENDING crunch\n" % crunch_job(1) and result.diff_after == ""
    assert result.elapsed == 0.2


def test_check_mode_says_what_a_real_run_would_do_and_leave():
    call = Call(names=[crunch_job(1), container(2)], check_mode=True)
    call.jobs.listed([listed(1, "RUNNING", crunch_job(1)), listed(2, "SUSPENDED", container(2))], call.clock.now())
    result = call.finish()
    assert [job["job_id"] for job in result.cancelled] == ["1"] and result.changed
    assert [job["job_id"] for job in result.remaining] == ["2"]
    assert result.msg.startswith("would have cancelled 1 Slurm job(s); 1 still queued after 0.0 s: 2 (")
    assert result.diff_after == "2 %s SUSPENDED crunch\n" % container(2)


def test_jobs_left_at_the_deadline_are_named_with_why():
    names = [container(number) for number in range(1, 13)]
    call = Call(names=names, timeout=60.0)
    queue = [listed(number, "RUNNING", name) for number, name in enumerate(names, 1)]
    call.jobs.listed(queue, call.clock.now())
    call.cancel_all()
    call.log.failed("scancel", "slow")
    call.clock.sleep(60.0)
    call.jobs.listed(queue, call.clock.now())
    result = call.finish()
    assert result.failed and len(result.terminated) == 12 and len(result.left_running) == 12
    assert result.left_running[0]["terms"] == 1
    assert result.msg.startswith("sent TERM to 12 Slurm job(s); 12 still queued after 60 s: 1 (%s, RUNNING)" % names[0])
    assert " and 2 more; 12 left running, not cancelled" in result.msg
    assert "1 (TERM taken 1 time(s))" in result.msg and result.msg.endswith("; Slurm said: slow")


def test_jobs_denied_to_this_user_are_reported_not_counted():
    call = Call(names=[crunch_job(1)])
    call.jobs.listed([listed(1, "RUNNING", crunch_job(1), user="alice")], call.clock.now())
    call.cancel_all(taken=False, denied=["1"])
    call.jobs.listed([listed(1, "RUNNING", crunch_job(1), user="alice")], call.clock.now())
    result = call.finish()
    assert result.cancelled == [] and not result.changed
    assert result.permission_denied == [{"name": crunch_job(1), "job_id": "1", "state": "RUNNING", "user": "alice"}]
    assert result.msg.startswith("no Slurm job cancelled; 1 still queued after 0.0 s: ")
    assert "Slurm refused 1 of them to this user (Access/permission denied), not tried again: 1 (user alice)" in (
        result.msg
    )


def test_the_note_when_jobs_first_get_more_than_their_term():
    request = CancelRequest(names=[container(1)], after_term="cancel", terminate_grace=60.0)
    assert outlived_term_note(request, CANCEL, ["1", "2"]) == (
        "2 Slurm job(s) still queued 60 s after their TERM, cancelled outright: 1, 2"
    )
    request = CancelRequest(names=[container(1)])
    assert outlived_term_note(request, TERMINATE, ["1"]) == (
        "1 Slurm job(s) still running 10 s after their TERM, sent TERM again (every 10 s until they leave or "
        "the timeout; never cancelled outright, after_term=term_again): 1"
    )


def test_an_empty_request_is_answered_with_its_note():
    call = Call(names=[])
    result = call.finish("nothing requested: no Slurm job name or id given")
    assert result.msg == "nothing requested: no Slurm job name or id given" and not result.failed
